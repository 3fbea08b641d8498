package registry

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// lakeArgs declares its arguments with field tags, as entries do.
type lakeArgs struct {
	MaxSteps int            `arg:"max_steps" default:"8" range:"[1,100]" task:"true" doc:"budget"`
	P        float64        `arg:"p" default:"0.8" range:"(0,1]"`
	Slippery bool           `arg:"slippery" default:"true"`
	Ops      []any          `arg:"ops" default:"[\"+\"]"`
	Rows     []string       `arg:"rows"`
	Env      map[string]any `arg:"env"`
	Prompt   string         `arg:"prompt"`
	ignored  int            //nolint:unused // not an argument: no tag, unexported
	Other    int            // not an argument: no tag
}

func testRegistry() *Registry[int] {
	r := New[int]("agent")
	r.Register(Entry[int]{Name: "frozenlake", Description: "grid", Params: lakeArgs{}})
	r.Register(Entry[int]{Name: "math"})
	return r
}

func TestLookup(t *testing.T) {
	r := testRegistry()
	tests := []struct{ name, want string }{
		{"math", ""},
		{"maht", `agent.name: "maht" is not a registered agent; did you mean "math"?`},
		{"frozen", `did you mean "frozenlake"?`},
		{"zzzzzzzz", "known: frozenlake, math"},
		{"", "agent.name: is empty; set it to one of: frozenlake, math"},
	}
	for _, tt := range tests {
		_, err := r.Lookup(tt.name)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.name, err)
			}
			continue
		}
		var ue *usererr.Error
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.As(err, &ue) || ue.ExitCode() != 2 || ue.Subject != "agent.name" {
			t.Errorf("%q: err %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestArgsOf(t *testing.T) {
	e, _ := testRegistry().Lookup("frozenlake")
	want := []Arg{
		{Name: "max_steps", Type: "int", Default: 8, Range: "[1,100]", Doc: "budget", FromTask: true},
		{Name: "p", Type: "float", Default: 0.8, Range: "(0,1]"},
		{Name: "slippery", Type: "bool", Default: true},
		{Name: "ops", Type: "list", Default: []any{"+"}},
		{Name: "rows", Type: "list of strings", Default: []string(nil)},
		{Name: "env", Type: "map", Default: map[string]any(nil)},
		{Name: "prompt", Type: "string", Default: ""},
	}
	got := e.Info().Args
	if len(got) != len(want) {
		t.Fatalf("got %d args %+v", len(got), got)
	}
	for i := range want {
		g := got[i]
		g.rng = nil
		if !reflect.DeepEqual(g, want[i]) {
			t.Errorf("arg %d: got %+v, want %+v", i, g, want[i])
		}
	}
	// A field without a default tag defaults to the value it holds.
	args, err := ArgsOf(lakeArgs{Prompt: "hi", MaxSteps: 3})
	if err != nil || args[6].Default != "hi" || args[0].Default != 8 {
		t.Fatalf("%+v %v", args, err)
	}
}

func TestResolve(t *testing.T) {
	e, _ := testRegistry().Lookup("frozenlake")
	defaults := Values{"max_steps": 8, "p": 0.8, "slippery": true, "ops": []any{"+"}, "rows": []string(nil), "env": map[string]any(nil), "prompt": ""}
	with := func(kv ...any) Values {
		v := Values{}
		for k, x := range defaults {
			v[k] = x
		}
		for i := 0; i < len(kv); i += 2 {
			v[kv[i].(string)] = kv[i+1]
		}
		return v
	}
	tests := []struct {
		args    map[string]any
		want    Values
		wantErr string
	}{
		{nil, defaults, ""},
		// Values as --set and environment variables deliver them.
		{map[string]any{"max_steps": "12", "p": "0.5", "slippery": "false", "ops": "+,-", "prompt": 3, "rows": []any{"SF", 7}},
			with("max_steps", 12, "p", 0.5, "slippery", false, "ops", []any{"+", "-"}, "prompt", "3", "rows", []string{"SF", "7"}), ""},
		{map[string]any{"max_steps": int64(3), "p": 1, "env": map[string]string{"a": "b"}}, with("max_steps", 3, "p", 1.0, "env", map[string]any{"a": "b"}), ""},
		{map[string]any{"max_step": 3}, nil, "agent.args.max_step: is not an accepted argument; did you mean agent.args.max_steps?"},
		{map[string]any{"max_steps": 2.5}, nil, "agent.args.max_steps: must be an int, got 2.5"},
		{map[string]any{"max_steps": "abc"}, nil, `agent.args.max_steps: must be an int, got "abc"`},
		{map[string]any{"max_steps": 0}, nil, "agent.args.max_steps: must be in [1,100], got 0"},
		{map[string]any{"p": 0}, nil, "agent.args.p: must be in (0,1], got 0"},
		{map[string]any{"p": "NaN"}, nil, `agent.args.p: must be a float, got "NaN"`},
		{map[string]any{"slippery": "maybe"}, nil, "agent.args.slippery: must be a bool"},
		{map[string]any{"p": []any{1}}, nil, "agent.args.p: must be a float, got a list"},
		{map[string]any{"rows": []any{[]any{1}}}, nil, "agent.args.rows: item 0 must be a string"},
		{map[string]any{"zzzz": 1}, nil, "accepted: max_steps, p, slippery, ops, rows, env, prompt"},
		// Every mistake at once, sorted by key.
		{map[string]any{"p": "x", "max_steps": "y"}, nil, "agent.args.max_steps: must be an int, got \"y\"\nagent.args.p: must be a float, got \"x\""},
	}
	for i, tt := range tests {
		got, err := e.Resolve("agent.args", tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || usererr.ExitCode(nil, err) != 2 {
				t.Errorf("%d: err %v, want %q", i, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%d: got %#v, %v; want %#v", i, got, err, tt.want)
		}
	}
}

func TestAs(t *testing.T) {
	e, _ := testRegistry().Lookup("frozenlake")
	v, err := e.Resolve("agent.args", map[string]any{"max_steps": 5, "rows": []any{"SF"}})
	if err != nil {
		t.Fatal(err)
	}
	got := As[lakeArgs](v)
	want := lakeArgs{MaxSteps: 5, P: 0.8, Slippery: true, Ops: []any{"+"}, Rows: []string{"SF"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v want %+v", got, want)
	}
}

func TestOverride(t *testing.T) {
	e, _ := testRegistry().Lookup("frozenlake")
	v, _ := e.Resolve("env.args", map[string]any{"p": 0.5})
	// Only task:"true" arguments come from the row: p stays configured.
	got, err := v.Override(e.Args, "task", map[string]any{"max_steps": 4.0, "p": 0.1, "question": "ignored"})
	if err != nil || got.Int("max_steps") != 4 || got.Float("p") != 0.5 || v.Int("max_steps") != 8 {
		t.Fatalf("got %v, %v (original %v)", got, err, v)
	}
	if _, err := v.Override(e.Args, "task", map[string]any{"max_steps": "x"}); err == nil || !strings.Contains(err.Error(), "task.max_steps") {
		t.Fatalf("err %v", err)
	}
}

type badType struct {
	X complex128 `arg:"x"`
}
type badRange struct {
	X string `arg:"x" range:"[0,1]"`
}
type badDefault struct {
	X int `arg:"x" default:"seven"`
}
type defaultOutOfRange struct {
	X int `arg:"x" default:"7" range:"[0,1]"`
}

func TestRegisterPanics(t *testing.T) {
	for _, e := range []Entry[int]{
		{Name: "math"}, {Name: ""},
		{Name: "x", Args: []Arg{{Name: "a", Type: "complex"}}},
		{Name: "x", Params: badType{}}, {Name: "x", Params: badRange{}},
		{Name: "x", Params: badDefault{}}, {Name: "x", Params: defaultOutOfRange{}},
		{Name: "x", Params: 3},
		{Name: "x", Params: lakeArgs{}, Args: []Arg{{Name: "a", Type: "int"}}},
	} {
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

func FuzzResolve(f *testing.F) {
	e, _ := testRegistry().Lookup("frozenlake")
	f.Add("max_steps", "12")
	f.Add("p", "0.5")
	f.Add("ops", "a,b")
	f.Fuzz(func(t *testing.T, key, val string) {
		v, err := e.Resolve("a", map[string]any{key: val})
		if err != nil {
			if !usererr.Is(err) {
				t.Fatalf("%v is not a user error", err)
			}
			return
		}
		_ = As[lakeArgs](v)
	})
}

func TestBuild(t *testing.T) {
	type factory func(Values) (string, error)
	r := New[factory]("reward")
	r.Register(Entry[factory]{
		Name: "echo",
		Args: []Arg{{Name: "word", Type: "string", Default: "hi"}},
		New:  func(v Values) (string, error) { return v.String("word"), nil },
	})
	tests := []struct {
		name    string
		args    map[string]any
		want    string
		wantErr string
	}{
		{"echo", nil, "hi", ""},
		{"echo", map[string]any{"word": "yo"}, "yo", ""},
		{"echo", map[string]any{"wrod": "yo"}, "", "env.args.reward_args.wrod"},
		{"ecko", nil, "", `reward.name: "ecko" is not a registered reward`},
	}
	for _, tt := range tests {
		got, err := Build(r, tt.name, "env.args.reward_args", tt.args)
		if tt.wantErr == "" {
			if err != nil || got != tt.want {
				t.Errorf("%s %v: %q, %v; want %q", tt.name, tt.args, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !usererr.Is(err) {
			t.Errorf("%s %v: err %v, want a user error with %q", tt.name, tt.args, err, tt.wantErr)
		}
	}
	if got := r.Names(); !reflect.DeepEqual(got, []string{"echo"}) {
		t.Errorf("Names() = %v", got)
	}
}
