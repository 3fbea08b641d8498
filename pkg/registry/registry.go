// Package registry holds the named, self-describing entries that configs
// select by name: agents, environments, workflows, reward functions and
// tools. Each kind keeps one Registry, filled from init() functions the way
// database/sql drivers register, so importing a package is enough to make
// its entries selectable. Registries are the only global state in rllm.
package registry

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/rllm-org/rllm-go/internal/suggest"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Arg describes one accepted argument of an entry. Type is one of int,
// float, string, bool, list, "list of strings", map, "map of strings" or
// any (whatever the config holds). Entries usually declare their
// arguments as an args struct (Entry.Params, see ArgsOf) rather than by
// hand.
type Arg struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Default any    `json:"default"`
	// Range bounds a number: "[1,64]", "(0,1]", "[0,)".
	Range string `json:"range,omitempty"`
	Doc   string `json:"doc"`
	// FromTask lets a task row's column of the same name override the
	// configured value (rLLM's {**env_args, **task}).
	FromTask bool `json:"from_task,omitempty"`

	rng *bounds
}

// Entry is one registered thing: its name, a one-line description, the
// arguments it accepts and the value a caller uses to build it (usually a
// factory function).
type Entry[T any] struct {
	Name        string
	Description string
	Args        []Arg
	// Params, when set, is a value of the entry's args struct: its field
	// tags declare Args (see ArgsOf) and the factory reads the resolved
	// values back with As. Set Params or Args, not both.
	Params any
	New    T
	// Validate, when set, checks resolved args further (ranges, nested
	// maps) so that mistakes surface when the config is loaded rather
	// than in the middle of a rollout.
	Validate func(Values) error
}

// Info is what `rllm list` prints about an entry.
type Info struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Args        []Arg  `json:"args"`
}

// Registry is a set of entries of one kind ("agent", "env", ...). It is
// safe for concurrent use.
type Registry[T any] struct {
	kind    string
	mu      sync.RWMutex
	entries map[string]Entry[T]
}

// New returns an empty registry; kind names it in error messages and is
// the config section its names come from (agent.name, env.name, ...).
func New[T any](kind string) *Registry[T] {
	return &Registry[T]{kind: kind, entries: map[string]Entry[T]{}}
}

// Register adds e. Registering an empty name, a duplicate name or a
// malformed argument list is a programming error caught at init time, so
// it panics like sql.Register does.
func (r *Registry[T]) Register(e Entry[T]) {
	if e.Name == "" {
		panic(fmt.Sprintf("registry: %s registered without a name", r.kind))
	}
	if e.Params != nil {
		if e.Args != nil {
			panic(fmt.Sprintf("registry: %s %q sets both Args and Params", r.kind, e.Name))
		}
		args, err := ArgsOf(e.Params)
		if err != nil {
			panic(fmt.Sprintf("registry: %s %q: %v", r.kind, e.Name, err))
		}
		e.Args = args
	}
	seen := map[string]bool{}
	for i, a := range e.Args {
		if a.Name == "" || seen[a.Name] {
			panic(fmt.Sprintf("registry: %s %q has an empty or duplicate argument name %q", r.kind, e.Name, a.Name))
		}
		if !knownType(a.Type) {
			panic(fmt.Sprintf("registry: %s %q argument %q has unknown type %q", r.kind, e.Name, a.Name, a.Type))
		}
		if a.Range != "" && a.rng == nil {
			b, err := parseRange(a.Range)
			if err != nil {
				panic(fmt.Sprintf("registry: %s %q argument %q: %v", r.kind, e.Name, a.Name, err))
			}
			e.Args[i].rng = b
		}
		seen[a.Name] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.entries[e.Name]; dup {
		panic(fmt.Sprintf("registry: %s %q registered twice", r.kind, e.Name))
	}
	r.entries[e.Name] = e
}

// Lookup finds name. The error names the config key (e.g. "agent.name"),
// lists what exists and suggests the closest name.
func (r *Registry[T]) Lookup(name string) (Entry[T], error) {
	r.mu.RLock()
	e, ok := r.entries[name]
	r.mu.RUnlock()
	if ok {
		return e, nil
	}
	names := r.Names()
	key := r.kind + ".name"
	if name == "" {
		return e, &usererr.Error{Subject: key, Msg: "is empty; set it to one of: " + strings.Join(names, ", ")}
	}
	msg := fmt.Sprintf("%q is not a registered %s", name, r.kind)
	if s := Suggest(name, names); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	} else {
		msg += fmt.Sprintf("; known: %s", strings.Join(names, ", "))
	}
	return e, &usererr.Error{Subject: key, Msg: msg}
}

// Names lists registered names in sorted order.
func (r *Registry[T]) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.entries))
}

// List describes every entry, sorted by name.
func (r *Registry[T]) List() []Info {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Info, 0, len(r.entries))
	for _, e := range r.entries {
		out = append(out, e.Info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Info describes e for listings.
func (e Entry[T]) Info() Info {
	args := e.Args
	if args == nil {
		args = []Arg{}
	}
	return Info{Name: e.Name, Description: e.Description, Args: args}
}

// Resolve checks args against the entry's declared arguments and returns
// them with defaults filled in. keyPrefix is the config path of the args
// map (e.g. "agent.args") and appears in every error.
func (e Entry[T]) Resolve(keyPrefix string, args map[string]any) (Values, error) {
	v, err := resolve(e.Args, keyPrefix, args)
	if err != nil {
		return nil, err
	}
	if e.Validate != nil {
		if err := e.Validate(v); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// Resolve finds an entry by name and resolves args
// against it in one go: the usual way a caller builds an entry.
func (r *Registry[T]) Resolve(name, keyPrefix string, args map[string]any) (Entry[T], Values, error) {
	e, err := r.Lookup(name)
	if err != nil {
		return e, nil, err
	}
	v, err := e.Resolve(keyPrefix, args)
	return e, v, err
}

// Build resolves args against entry name of r and calls its factory: the
// way to build an entry whose factory takes nothing but its resolved
// arguments (reward functions, tools).
func Build[R any, F ~func(Values) (R, error)](r *Registry[F], name, keyPrefix string, args map[string]any) (R, error) {
	e, v, err := r.Resolve(name, keyPrefix, args)
	if err != nil {
		var zero R
		return zero, err
	}
	return e.New(v)
}

// Suggest returns the candidate closest to name by edit distance, or ""
// when nothing is close enough to be a plausible typo.
func Suggest(name string, candidates []string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		d := suggest.Distance(strings.ToLower(name), strings.ToLower(c))
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	limit := suggest.Near(len(name))
	if bestDist < 0 || bestDist > limit {
		// A prefix or substring match still deserves a hint
		// ("frozen" for "frozenlake").
		for _, c := range candidates {
			if len(name) >= 3 && (strings.Contains(c, name) || strings.Contains(name, c)) {
				return c
			}
		}
		return ""
	}
	return best
}
