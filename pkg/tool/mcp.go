package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	osexec "os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rllm-org/rllm-go/internal/childenv"
	"github.com/rllm-org/rllm-go/internal/procgroup"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// MCPServer is one entry of tools.mcp: a server started as a child
// process (command) or reached over streamable HTTP (url).
type MCPServer struct {
	Name     string            `arg:"-"`
	Command  []string          `arg:"command" doc:"program and arguments of a stdio server, run without a shell"`
	URL      string            `arg:"url" doc:"endpoint of a streamable HTTP server, e.g. http://127.0.0.1:8000/mcp"`
	Dir      string            `arg:"dir" doc:"working directory of a stdio server"`
	EnvVars  map[string]string `arg:"env_vars" doc:"variables set in a stdio server's environment"`
	PassEnv  []string          `arg:"pass_env" doc:"names of rllm's variables passed on to a stdio server"`
	ConnectS float64           `arg:"connect_timeout_s" default:"30" range:"(0,3600]" doc:"seconds to connect and list the tools"`
}

var mcpEntry = func() registry.Entry[struct{}] {
	r := registry.New[struct{}]("mcp server")
	r.Register(registry.Entry[struct{}]{Name: "mcp", Params: MCPServer{}})
	e, _ := r.Lookup("mcp")
	return e
}()

// Logger receives what stdio MCP servers write to stderr, a line each.
// The CLI may replace it.
var Logger = slog.Default()

// ParseMCPServer checks the settings of tools.mcp.NAME.
func ParseMCPServer(name string, raw any) (MCPServer, error) {
	key := "tools.mcp." + name
	m, ok := raw.(map[string]any)
	if !ok {
		return MCPServer{}, usererr.Errorf("%s must be a mapping such as {command: [npx, my-server]} or {url: http://host/mcp}", key)
	}
	v, err := mcpEntry.Resolve(key, m)
	if err != nil {
		return MCPServer{}, err
	}
	s := registry.As[MCPServer](v)
	s.Name = name
	switch {
	case len(s.Command) > 0 && s.URL != "":
		return s, usererr.Errorf("%s sets both command and url; a server is either started (command) or reached (url)", key)
	case len(s.Command) == 0 && s.URL == "":
		return s, usererr.Errorf("%s needs a command (stdio server) or a url (streamable HTTP server)", key)
	case s.URL != "":
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return s, usererr.Errorf("%s.url %q is not an http(s) URL", key, s.URL)
		}
	case s.Command[0] == "":
		return s, usererr.Errorf("%s.command starts with an empty program name", key)
	}
	for _, k := range s.PassEnv {
		if err := childenv.CheckName(k); err != nil {
			return s, usererr.Errorf("%s.pass_env: %v", key, err)
		}
	}
	for k := range s.EnvVars {
		if err := childenv.CheckName(k); err != nil {
			return s, usererr.Errorf("%s.env_vars: %v", key, err)
		}
	}
	return s, nil
}

// where names the server in messages.
func (s MCPServer) where() string {
	if s.URL != "" {
		return fmt.Sprintf("MCP server %s (%s)", s.Name, s.URL)
	}
	return fmt.Sprintf("MCP server %s [%s]", s.Name, strings.Join(s.Command, " "))
}

// connectMCP connects to the server and lists its tools. A stdio server
// runs in a process group of its own (internal/procgroup), killed as a
// whole when the session closes or the connection fails, so a wrapper's
// grandchild (npx, uv run) never outlives rllm and Close is bounded.
func connectMCP(ctx context.Context, s MCPServer, environ []string) ([]Tool, func() error, error) {
	if s.URL != "" {
		return connectTransport(ctx, s, &mcp.StreamableClientTransport{Endpoint: s.URL, DisableStandaloneSSE: true, MaxRetries: 2}, nil)
	}
	cmd := osexec.Command(s.Command[0], s.Command[1:]...)
	procgroup.Configure(cmd, 0)
	cmd.Dir = s.Dir
	// Under a supervisor, as exec envs and programs are: nothing the
	// server starts outlives it, nor it rllm, even by SIGKILL.
	procgroup.Supervise(cmd)
	if environ == nil {
		environ = os.Environ()
	}
	cmd.Env = childenv.Build(environ, s.PassEnv, s.EnvVars)
	// The server's logs join rllm's, a line each through Logger (so
	// --output json keeps one object a line); the tail names the cause of
	// a failed connection.
	tail := procgroup.NewTail(4 << 10)
	cmd.Stderr = &procgroup.LineLog{Tail: tail, Log: func(line string) { Logger.Info("mcp server " + s.Name + " stderr: " + line) }}
	tools, closeFn, err := connectTransport(ctx, s, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, tail)
	if err != nil {
		_ = procgroup.Kill(cmd)
		return nil, nil, err
	}
	return tools, func() error {
		err := closeFn()
		_ = procgroup.Kill(cmd)
		return err
	}, nil
}

func connectTransport(ctx context.Context, s MCPServer, transport mcp.Transport, stderr *procgroup.Tail) ([]Tool, func() error, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Duration(s.ConnectS*float64(time.Second)))
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "rllm", Version: "1"}, nil)
	session, err := client.Connect(cctx, transport, nil)
	if err != nil {
		if stderr != nil {
			if l := stderr.LastLine(); l != "" {
				return nil, nil, fmt.Errorf("%s: cannot connect: %w; its stderr ends with: %s", s.where(), err, l)
			}
		}
		return nil, nil, fmt.Errorf("%s: cannot connect: %w", s.where(), err)
	}
	var out []Tool
	for t, err := range session.Tools(cctx, nil) {
		if err != nil {
			session.Close()
			return nil, nil, fmt.Errorf("%s: cannot list its tools: %w", s.where(), err)
		}
		params, err := json.Marshal(t.InputSchema)
		if err != nil || t.InputSchema == nil {
			params = json.RawMessage(`{"type": "object"}`)
		}
		out = append(out, &mcpTool{
			server:  s,
			session: session,
			spec: sampler.Tool{Type: "function", Function: sampler.ToolFunction{
				Name: t.Name, Description: t.Description, Parameters: params,
			}},
		})
	}
	return out, session.Close, nil
}

// mcpTool is one tool of a connected server.
type mcpTool struct {
	server  MCPServer
	session *mcp.ClientSession
	spec    sampler.Tool
}

func (t *mcpTool) Spec() sampler.Tool { return t.spec }

// Call sends tools/call. The result's text content (and structured
// content, when there is no text) is what the model sees; isError is
// kept. A protocol error from the server (an unknown tool, invalid
// params) is an error result too, since the model caused it.
func (t *mcpTool) Call(ctx context.Context, arguments string) (Result, error) {
	res, err := t.session.CallTool(ctx, &mcp.CallToolParams{Name: t.spec.Function.Name, Arguments: json.RawMessage(arguments)})
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, err
		}
		var rpc *jsonrpc.Error
		if errors.As(err, &rpc) {
			// The server refused the call (unknown tool, invalid params).
			return Errorf("error: %s", rpc.Message), nil
		}
		return Result{}, fmt.Errorf("%s: %w", t.server.where(), err)
	}
	return Result{Text: ContentText(res), IsError: res.IsError}, nil
}

// ContentText renders a tool result for the model: its text parts joined
// by newlines; other parts, and structured content when there is no
// text, as JSON.
func ContentText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch x := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, x.Text)
		default:
			b, err := json.Marshal(c)
			if err == nil {
				parts = append(parts, string(b))
			}
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}
