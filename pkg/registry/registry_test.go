package registry

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func testRegistry() *Registry[int] {
	r := New[int]("agent")
	r.Register(Entry[int]{Name: "frozenlake", Description: "grid", Args: []Arg{
		{Name: "max_steps", Type: "int", Default: 8, Doc: "budget"},
		{Name: "p", Type: "float", Default: 0.8},
		{Name: "slippery", Type: "bool", Default: true},
		{Name: "ops", Type: "list", Default: []any{"+"}},
		{Name: "prompt", Type: "string", Default: ""},
	}})
	r.Register(Entry[int]{Name: "math"})
	return r
}

func TestLookup(t *testing.T) {
	r := testRegistry()
	tests := []struct{ name, want string }{
		{"math", ""},
		{"maht", `agent.name "maht" is not a registered agent; did you mean "math"?`},
		{"frozen", `did you mean "frozenlake"?`},
		{"zzzzzzzz", "known: frozenlake, math"},
		{"", "agent.name is empty; set it to one of: frozenlake, math"},
	}
	for _, tt := range tests {
		_, err := r.Lookup(tt.name)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.name, err)
			}
			continue
		}
		var ce *ConfigError
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.As(err, &ce) || ce.ExitCode() != 2 || ce.Key != "agent.name" {
			t.Errorf("%q: err %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestResolve(t *testing.T) {
	e, _ := testRegistry().Lookup("frozenlake")
	tests := []struct {
		args    map[string]any
		want    Values
		wantErr string
	}{
		{nil, Values{"max_steps": 8, "p": 0.8, "slippery": true, "ops": []any{"+"}, "prompt": ""}, ""},
		// Values as --set and environment variables deliver them.
		{map[string]any{"max_steps": "12", "p": "0.5", "slippery": "false", "ops": "+,-", "prompt": 3},
			Values{"max_steps": 12, "p": 0.5, "slippery": false, "ops": []any{"+", "-"}, "prompt": "3"}, ""},
		{map[string]any{"max_steps": int64(3), "p": 1}, Values{"max_steps": 3, "p": 1.0, "slippery": true, "ops": []any{"+"}, "prompt": ""}, ""},
		{map[string]any{"max_step": 3}, nil, "agent.args.max_step is not an accepted argument; did you mean agent.args.max_steps?"},
		{map[string]any{"max_steps": 2.5}, nil, "agent.args.max_steps must be an int, got 2.5"},
		{map[string]any{"slippery": "maybe"}, nil, "agent.args.slippery must be a bool"},
		{map[string]any{"p": []any{1}}, nil, "agent.args.p must be a float"},
	}
	for i, tt := range tests {
		got, err := e.Resolve("agent.args", tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%d: err %v, want %q", i, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%d: got %v, %v; want %v", i, got, err, tt.want)
		}
	}
}

func TestOverride(t *testing.T) {
	e, _ := testRegistry().Lookup("frozenlake")
	v, _ := e.Resolve("env.args", map[string]any{"p": 0.5})
	got, err := v.Override(e.Args, "task", map[string]any{"max_steps": 4.0, "question": "ignored"})
	if err != nil || got.Int("max_steps") != 4 || got.Float("p") != 0.5 || v.Int("max_steps") != 8 {
		t.Fatalf("got %v, %v (original %v)", got, err, v)
	}
	if _, err := v.Override(e.Args, "task", map[string]any{"p": "x"}); err == nil || !strings.Contains(err.Error(), "task.p") {
		t.Fatalf("err %v", err)
	}
}

func TestRegisterPanics(t *testing.T) {
	for _, e := range []Entry[int]{{Name: "math"}, {Name: ""}, {Name: "x", Args: []Arg{{Name: "a", Type: "complex"}}}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("registering %+v did not panic", e)
				}
			}()
			testRegistry().Register(e)
		}()
	}
}
