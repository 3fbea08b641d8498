package tool

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// TestMain doubles as a stdio MCP server when MCP_TEST_SERVER is set.
func TestMain(m *testing.M) {
	if os.Getenv("MCP_TEST_SERVER") == "1" {
		if f := os.Getenv("MCP_TEST_GRANDCHILD_PIDFILE"); f != "" {
			// A wrapper's real program: a grandchild holding stdout and
			// stderr open.
			gc := exec.Command("sleep", "300")
			gc.Stdout, gc.Stderr = os.Stdout, os.Stderr
			if os.Getenv("MCP_TEST_GRANDCHILD_SETSID") == "1" {
				// Out of the server's process group: only the
				// supervisor can reach it.
				gc.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			}
			if err := gc.Start(); err != nil {
				os.Exit(1)
			}
			os.WriteFile(f, []byte(strconv.Itoa(gc.Process.Pid)), 0o644)
		}
		if msg := os.Getenv("MCP_TEST_STDERR"); msg != "" {
			fmt.Fprintln(os.Stderr, msg)
		}
		if err := testServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type addIn struct {
	A int `json:"a" jsonschema:"first addend"`
	B int `json:"b" jsonschema:"second addend"`
}

type addOut struct {
	Sum int `json:"sum"`
}

// testServer is a small MCP server: add (typed, schema-checked), fail
// (an isError result), get-env (the server's environment, as the
// reference "everything" server has) and slow (answers after 2s).
func testServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "adds two integers"}, func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(in.A + in.B)}}}, addOut{Sum: in.A + in.B}, nil
	})
	s.AddTool(&mcp.Tool{Name: "fail", Description: "always fails", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "it went wrong"}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "get-env", Description: "prints the environment", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		env := os.Environ()
		sort.Strings(env)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(env, "\n")}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "slow", Description: "sleeps", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
	})
	return s
}

func TestCalculator(t *testing.T) {
	c, err := registry.Build(Registry, "calculator", "tools", nil)
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]Result{
		`{"expression": "8/(3-8/3)"}`: {Text: "24"},
		`{"expression": "1/3"}`:       {Text: "1/3"},
		// Exact big-number arithmetic: no float rounding, no overflow.
		`{"expression": "123456789012345678901234567890 * 987654321098765432109876543210"}`: {Text: "121932631137021795226185032733622923332237463801111263526900"},
		`{"expression": "(2/3 + 1/6) * 6"}`:                                                 {Text: "5"},
		`{"expression": "1/0"}`:                                                             {Text: "error: division by zero", IsError: true},
		`{"expr": 1}`:                                                                       {Text: "error: syntax error: expression ends where a number was expected", IsError: true},
		`not json`:                                                                          {Text: "error: arguments must be a JSON object with an expression string: invalid character 'o' in literal null (expecting 'u')", IsError: true},
	} {
		got, err := c.Call(context.Background(), in)
		if err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", in, got, err, want)
		}
	}
	if c.Spec().Function.Name != "calculator" {
		t.Error(c.Spec())
	}
}

func FuzzCalculator(f *testing.F) {
	f.Add(`{"expression":"1+2"}`)
	f.Fuzz(func(t *testing.T, args string) {
		if _, err := (Calculator{}).Call(context.Background(), args); err != nil {
			t.Fatal(err)
		}
	})
}

// inMemory connects a Set to the test server without a process.
func inMemory(t testing.TB) *Set {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := testServer().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	srv := MCPServer{Name: "mem", ConnectS: 5}
	ts, closer, err := connectTransport(ctx, srv, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, Config{Builtin: []string{"calculator"}})
	if err != nil {
		t.Fatal(err)
	}
	s.timeout = 500 * time.Millisecond
	for _, tl := range ts {
		if err := s.add(tl, "mcp server mem"); err != nil {
			t.Fatal(err)
		}
	}
	s.closers = append(s.closers, closer)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSetCalls(t *testing.T) {
	s := inMemory(t)
	if got := strings.Join(s.Names(), ","); got != "calculator,add,fail,get-env,slow" {
		t.Fatalf("names %s", got)
	}
	specs := s.Specs()
	if specs[1].Function.Name != "add" || !strings.Contains(string(specs[1].Function.Parameters), `"a"`) || specs[1].Function.Description != "adds two integers" {
		t.Fatalf("spec %+v", specs[1])
	}
	tests := []struct {
		name, args string
		want       Result
		wantSub    string
	}{
		{"add", `{"a": 2, "b": 40}`, Result{Text: "42"}, ""},
		{"calculator", `{"expression": "2**3"}`, Result{}, "error: syntax error"},
		{"fail", `{}`, Result{Text: "it went wrong", IsError: true}, ""},
		{"add", `{"a": 2,`, Result{}, "error: the arguments of add are not valid JSON"},
		{"add", `[1, 2]`, Result{}, "error: the arguments of add must be a JSON object, got an array"},
		{"add", `{"a": "two", "b": 1}`, Result{}, "error: the arguments of add do not match its schema"},
		{"add", `{"a": 1, "b": 2} {}`, Result{}, "not valid JSON"},
		{"ad", `{}`, Result{}, `error: there is no tool named "ad"; did you mean "add"?`},
		{"slow", `{}`, Result{}, "error: slow did not answer within 500ms"},
	}
	for _, tt := range tests {
		got, err := s.Call(context.Background(), tt.name, tt.args)
		if err != nil {
			t.Errorf("%s %s: %v", tt.name, tt.args, err)
			continue
		}
		if tt.wantSub != "" {
			if !got.IsError || !strings.Contains(got.Text, tt.wantSub) {
				t.Errorf("%s %s: %+v, want an error result with %q", tt.name, tt.args, got, tt.wantSub)
			}
		} else if got != tt.want {
			t.Errorf("%s %s: %+v, want %+v", tt.name, tt.args, got, tt.want)
		}
	}
}

func TestStdioServer(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENAI_API_KEY", "sk-do-not-leak")
	t.Setenv("SHARED_SETTING", "passed")
	s, err := Open(context.Background(), Config{MCP: map[string]any{
		"local": map[string]any{"command": []any{exe, "-test.run=^$"}, "env_vars": map[string]any{"MCP_TEST_SERVER": "1"}, "pass_env": []any{"SHARED_SETTING"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, err := s.Call(context.Background(), "add", `{"a": 1, "b": 2}`); err != nil || r.Text != "3" {
		t.Fatalf("%+v %v", r, err)
	}
	r, err := s.Call(context.Background(), "get-env", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.Text, "sk-do-not-leak") || !strings.Contains(r.Text, "SHARED_SETTING=passed") || !strings.Contains(r.Text, "PATH=") {
		t.Fatalf("the server's environment: %s", r.Text)
	}
	if s.Origin("add") != "mcp server local" {
		t.Error(s.Origin("add"))
	}
}

func TestStreamableHTTPServer(t *testing.T) {
	srv := testServer()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(h)
	defer ts.Close()
	s, err := Open(context.Background(), Config{MCP: map[string]any{"remote": map[string]any{"url": ts.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, err := s.Call(context.Background(), "add", `{"a": 20, "b": 22}`); err != nil || r.Text != "42" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestOpenErrors(t *testing.T) {
	dead := httptest.NewServer(nil)
	deadURL := dead.URL
	dead.Close()
	tests := []struct {
		cfg  Config
		want string
		user bool
	}{
		{Config{Builtin: []string{"calculater"}}, `tools.builtin[0]: "calculater" is not a registered tool; did you mean "calculator"?`, true},
		{Config{Builtin: []string{"calculator", "calculator"}}, `builtin and builtin both offer a tool named "calculator"`, true},
		{Config{MCP: map[string]any{"x": "npx"}}, "tools.mcp.x must be a mapping", true},
		{Config{MCP: map[string]any{"x": map[string]any{}}}, "tools.mcp.x needs a command (stdio server) or a url", true},
		{Config{MCP: map[string]any{"x": map[string]any{"command": []any{"a"}, "url": "http://h"}}}, "sets both command and url", true},
		{Config{MCP: map[string]any{"x": map[string]any{"url": "ftp://h"}}}, `tools.mcp.x.url "ftp://h" is not an http(s) URL`, true},
		{Config{MCP: map[string]any{"x": map[string]any{"comand": []any{"a"}}}}, "tools.mcp.x.comand: is not an accepted argument; did you mean tools.mcp.x.command?", true},
		{Config{MCP: map[string]any{"x": map[string]any{"url": deadURL, "connect_timeout_s": 2}}}, "MCP server x (" + deadURL + "): cannot connect", false},
		{Config{MCP: map[string]any{"x": map[string]any{"command": []any{"/nonexistent/mcp-server"}}}}, "MCP server x [/nonexistent/mcp-server]: cannot connect", false},
		{Config{CallTimeoutS: -1}, "tools.call_timeout_s is -1", true},
	}
	for _, tt := range tests {
		_, err := Open(context.Background(), tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) || usererr.Is(err) != tt.user {
			t.Errorf("%+v: err %v (user error %v), want %q", tt.cfg, err, usererr.Is(err), tt.want)
		}
	}
}

func TestShared(t *testing.T) {
	a, err := Shared(context.Background(), Config{Builtin: []string{"calculator"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Shared(context.Background(), Config{Builtin: []string{"calculator"}})
	if a != b {
		t.Fatal("the same config opened twice")
	}
	closeShared()
	if _, err := Shared(context.Background(), Config{Builtin: []string{"nope"}}); err == nil {
		t.Fatal("no error")
	}
}

func FuzzSetCall(f *testing.F) {
	s, err := Open(context.Background(), Config{Builtin: []string{"calculator"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("calculator", `{"expression": "1+1"}`)
	f.Add("calculator", `{"expression": 1}`)
	f.Add("x", `[]`)
	f.Fuzz(func(t *testing.T, name, args string) {
		if _, err := s.Call(context.Background(), name, args); err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkMCPCall is one tools/call round trip to an in-process server
// over the in-memory transport (the SDK's JSON-RPC, no network).
func BenchmarkMCPCall(b *testing.B) {
	s := inMemory(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, err := s.Call(context.Background(), "add", `{"a": 1, "b": 2}`); err != nil || r.Text != "3" {
			b.Fatal(r, err)
		}
	}
}

// BenchmarkMCPCallHTTP is the same over streamable HTTP (httptest).
func BenchmarkMCPCallHTTP(b *testing.B) {
	srv := testServer()
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer ts.Close()
	s, err := Open(context.Background(), Config{MCP: map[string]any{"remote": map[string]any{"url": ts.URL}}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, err := s.Call(context.Background(), "add", `{"a": 1, "b": 2}`); err != nil || r.Text != "3" {
			b.Fatal(r, err)
		}
	}
}

// A stdio server's descendants go with it when the set closes.
func TestStdioServerGroupIsKilled(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s, pid := serverWithGrandchild(t, exe, nil)
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close is still waiting")
	}
	repotest.WaitGone(t, pid)
}

// serverWithGrandchild opens the test server as a stdio MCP server that
// starts a grandchild (with the extra environment), and returns the set
// and the grandchild's pid.
func serverWithGrandchild(t *testing.T, exe string, env map[string]any) (*Set, int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pid")
	vars := map[string]any{"MCP_TEST_SERVER": "1", "MCP_TEST_GRANDCHILD_PIDFILE": pidFile}
	for k, v := range env {
		vars[k] = v
	}
	s, err := Open(context.Background(), Config{MCP: map[string]any{"local": map[string]any{"command": []any{exe, "-test.run=^$"}, "env_vars": vars}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(b))
	return s, pid
}

// A stdio server runs under the supervisor: a grandchild that left its
// process group (setsid) goes with it too. Its stderr reaches Logger a
// line each, so --output json keeps one object a line.
func TestStdioServerSupervised(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the supervisor is Linux's")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	var mu sync.Mutex
	prev := Logger
	Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
	defer func() { Logger = prev }()
	s, pid := serverWithGrandchild(t, exe, map[string]any{"MCP_TEST_GRANDCHILD_SETSID": "1", "MCP_TEST_STDERR": "starting up"})
	s.Close()
	repotest.WaitGone(t, pid)
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), `msg="mcp server local stderr: starting up"`) {
		t.Errorf("the server's stderr was not logged: %q", logged.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// closeShared closes every Set Shared opened.
func closeShared() {
	sharedMu.Lock()
	all := shared
	shared = map[string]*sharedSet{}
	sharedMu.Unlock()
	for _, ss := range all {
		if ss.set != nil {
			_ = ss.set.Close()
		}
	}
}
