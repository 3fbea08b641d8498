package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Config selects the tools of a run (the tools section of the config).
type Config struct {
	// Builtin names registered tools (rllm list tools).
	Builtin []string `json:"builtin,omitempty"`
	// Args holds built-in tools' arguments by tool name (tools.args).
	Args map[string]any `json:"args,omitempty"`
	// MCP maps a server name to its settings: {command: [...]} for a
	// server over stdio or {url: ...} for streamable HTTP (see MCPServer).
	MCP map[string]any `json:"mcp,omitempty"`
	// CallTimeoutS bounds one call; 0 means 60 seconds.
	CallTimeoutS float64 `json:"call_timeout_s,omitempty"`
	// Environ is the environment stdio servers start from (KEY=value);
	// only the allowed variables and pass_env are taken from it. Nil
	// means this process's.
	Environ []string `json:"-"`
}

// Empty reports whether c selects no tool.
func (c Config) Empty() bool { return len(c.Builtin) == 0 && len(c.MCP) == 0 }

// Check validates c without connecting to anything: builtin names,
// each MCP server's settings and the timeout. Every mistake is reported.
func Check(c Config) error {
	var errs []error
	if c.CallTimeoutS < 0 {
		errs = append(errs, &usererr.Error{Subject: "tools.call_timeout_s", Msg: fmt.Sprintf("is %g; use a positive number of seconds (0 for the default 60)", c.CallTimeoutS)})
	}
	for i, name := range c.Builtin {
		if _, err := Registry.Lookup(name); err != nil {
			var ue *usererr.Error
			if errors.As(err, &ue) {
				ue.Subject = fmt.Sprintf("tools.builtin[%d]", i)
			}
			errs = append(errs, err)
		} else if _, given := c.Args[name]; !given {
			// Checks what the tool needs to run (python: a sandbox).
			if _, _, err := Registry.Resolve(name, fmt.Sprintf("tools.builtin[%d]", i), nil); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for name, raw := range c.Args {
		if !slices.Contains(c.Builtin, name) {
			errs = append(errs, &usererr.Error{Subject: "tools.args." + name, Msg: fmt.Sprintf("gives arguments to %q, which tools.builtin does not list; add it there or drop these arguments", name)})
			continue
		}
		args, err := builtinArgs(name, raw)
		if err == nil {
			_, _, err = Registry.Resolve(name, "tools.args."+name, args)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	for n, raw := range c.MCP {
		if _, err := ParseMCPServer(n, raw); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Set is the tools of a run under their own names. It is safe for
// concurrent use.
type Set struct {
	order   []string
	tools   map[string]Tool
	schemas map[string]*jsonschema.Resolved
	origin  map[string]string // "builtin" or "mcp server NAME"
	timeout time.Duration
	closers []func() error
}

// Open builds the builtin tools, connects to every MCP server and lists
// its tools. A mistake in the config is a user error naming the key; a
// server that cannot be reached or listed is an error naming it.
func Open(ctx context.Context, c Config) (*Set, error) {
	if c.CallTimeoutS < 0 {
		return nil, usererr.Errorf("tools.call_timeout_s is %g; use a positive number of seconds (0 for the default 60)", c.CallTimeoutS)
	}
	s := &Set{tools: map[string]Tool{}, schemas: map[string]*jsonschema.Resolved{}, origin: map[string]string{}, timeout: 60 * time.Second}
	if c.CallTimeoutS > 0 {
		s.timeout = time.Duration(c.CallTimeoutS * float64(time.Second))
	}
	for i, name := range c.Builtin {
		args, err := builtinArgs(name, c.Args[name])
		if err != nil {
			return nil, err
		}
		key := fmt.Sprintf("tools.builtin[%d]", i)
		if args != nil {
			key = "tools.args." + name
		}
		t, err := registry.Build(Registry, name, key, args)
		if err != nil {
			var ue *usererr.Error
			if errors.As(err, &ue) && ue.Subject == "tool.name" {
				ue.Subject = fmt.Sprintf("tools.builtin[%d]", i)
			}
			return nil, err
		}
		if err := s.add(t, "builtin"); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(c.MCP))
	for n := range c.MCP {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		srv, err := ParseMCPServer(n, c.MCP[n])
		if err != nil {
			s.Close()
			return nil, err
		}
		ts, closer, err := connectMCP(ctx, srv, c.Environ)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.closers = append(s.closers, closer)
		for _, t := range ts {
			if err := s.add(t, "mcp server "+n); err != nil {
				s.Close()
				return nil, err
			}
		}
	}
	return s, nil
}

func (s *Set) add(t Tool, origin string) error {
	name := t.Spec().Function.Name
	if prev, dup := s.origin[name]; dup {
		return usererr.Errorf("tools: %s and %s both offer a tool named %q; the model could not tell them apart, so drop one of them", prev, origin, name)
	}
	s.order = append(s.order, name)
	s.tools[name] = t
	s.origin[name] = origin
	if p := t.Spec().Function.Parameters; len(p) > 0 {
		var sch jsonschema.Schema
		if err := json.Unmarshal(p, &sch); err == nil {
			if rs, err := sch.Resolve(nil); err == nil {
				s.schemas[name] = rs
			}
		}
	}
	return nil
}

// Names lists the tools in the order they were configured.
func (s *Set) Names() []string { return append([]string(nil), s.order...) }

// Specs are the OpenAI function tools offered to the model.
func (s *Set) Specs() []sampler.Tool {
	out := make([]sampler.Tool, len(s.order))
	for i, n := range s.order {
		out[i] = s.tools[n].Spec()
	}
	return out
}

// Origin says where tool name comes from: "builtin" or "mcp server X".
func (s *Set) Origin(name string) string { return s.origin[name] }

// Call runs tool name with the model's arguments, bounded by the call
// timeout. Unknown tools, arguments that are not a JSON object or do not
// match the tool's schema, and timeouts are error results for the model;
// an error is returned only when the tool itself broke or ctx ended.
func (s *Set) Call(ctx context.Context, name, arguments string) (Result, error) {
	t, ok := s.tools[name]
	if !ok {
		msg := fmt.Sprintf("error: there is no tool named %q", name)
		if sg := registry.Suggest(name, s.order); sg != "" {
			msg += fmt.Sprintf("; did you mean %q?", sg)
		} else if len(s.order) > 0 {
			msg += "; available: " + strings.Join(s.order, ", ")
		}
		return Result{Text: msg, IsError: true}, nil
	}
	if strings.TrimSpace(arguments) == "" {
		arguments = "{}"
	}
	var args any
	dec := json.NewDecoder(bytes.NewReader([]byte(arguments)))
	dec.UseNumber()
	if err := dec.Decode(&args); err != nil || dec.More() {
		return Errorf("error: the arguments of %s are not valid JSON: %s", name, jsonError(err)), nil
	}
	if _, ok := args.(map[string]any); !ok {
		return Errorf("error: the arguments of %s must be a JSON object, got %s", name, jsonKind(args)), nil
	}
	if rs := s.schemas[name]; rs != nil {
		var plain any
		_ = json.Unmarshal([]byte(arguments), &plain)
		if err := rs.Validate(plain); err != nil {
			return Errorf("error: the arguments of %s do not match its schema: %v", name, err), nil
		}
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := t.Call(cctx, arguments)
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return Errorf("error: %s did not answer within %s", name, s.timeout), nil
	}
	return res, err
}

// Close disconnects from the MCP servers (stopping stdio ones).
func (s *Set) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	s.closers = nil
	return errors.Join(errs...)
}

func jsonError(err error) string {
	if err == nil {
		return "more than one value"
	}
	return err.Error()
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

var (
	sharedMu sync.Mutex
	shared   = map[string]*sharedSet{}
)

type sharedSet struct {
	once sync.Once
	set  *Set
	err  error
}

// Shared returns the Set for c, opened once per process and shared by
// every episode that uses the same tools (MCP servers are connected once,
// not per episode); they live until the process ends.
func Shared(ctx context.Context, c Config) (*Set, error) {
	key, err := json.Marshal(c)
	if err != nil {
		return nil, usererr.Errorf("tools: %v", err)
	}
	sharedMu.Lock()
	ss, ok := shared[string(key)]
	if !ok {
		ss = &sharedSet{}
		shared[string(key)] = ss
	}
	sharedMu.Unlock()
	ss.once.Do(func() {
		ss.set, ss.err = Open(context.WithoutCancel(ctx), c)
	})
	if ss.err != nil {
		sharedMu.Lock()
		delete(shared, string(key)) // a later run may fix the server
		sharedMu.Unlock()
	}
	return ss.set, ss.err
}

// builtinArgs reads tools.args.NAME, which must be a mapping.
func builtinArgs(name string, raw any) (map[string]any, error) {
	if raw == nil {
		return nil, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, &usererr.Error{Subject: "tools.args." + name, Msg: fmt.Sprintf("must be a mapping of argument names to values, not %T", raw)}
	}
	return m, nil
}
