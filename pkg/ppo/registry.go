package ppo

import (
	"maps"
	"slices"
	"strings"
	"sync"
)

// Level says what an estimator produces.
type Level int

const (
	// Outcome estimators give one advantage per sequence (Output.Sequence),
	// from one reward per sequence and group ids; Broadcast spreads it
	// over tokens.
	Outcome Level = iota
	// Token estimators give per-token advantages and returns
	// (Output.Advantages, Output.Returns) from per-token rewards.
	Token
)

// Input is everything any registered estimator may read; each reads only
// its part (see its doc).
type Input struct {
	// Outcome level: one reward per sequence, dense group ids (the trainer numbers
	// task groups 0..G-1), and response lengths (opo, and
	// reinforce_plus_plus_baseline under ReferenceVerl).
	Rewards   []float64
	Groups    []int
	NumGroups int
	Lengths   []float64
	// Token level.
	Tokens TokenInput
}

// Output receives an estimator's results in caller-owned buffers.
type Output struct {
	Sequence   []float64 // len = sequences (Outcome)
	Advantages []float64 // len = tokens (Token)
	Returns    []float64 // len = tokens (Token)
}

// Estimator is an advantage estimator selectable by name, as
// algorithm.adv_estimator selects them in verl and rLLM.
type Estimator struct {
	Name    string
	Level   Level
	Compute func(in *Input, cfg *Config, ws *Workspace, out *Output) error
}

var registry = struct {
	sync.RWMutex
	byName map[string]Estimator
}{byName: map[string]Estimator{}}

// Register adds an estimator; a name can be registered once.
func Register(e Estimator) error {
	if e.Name == "" || e.Compute == nil {
		return configError("adv_estimator", "an estimator needs a name and a Compute function")
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.byName[e.Name]; dup {
		return configError("adv_estimator", "estimator \""+e.Name+"\" is already registered")
	}
	registry.byName[e.Name] = e
	return nil
}

// Lookup returns the estimator registered under name.
func Lookup(name string) (Estimator, error) {
	registry.RLock()
	e, ok := registry.byName[name]
	registry.RUnlock()
	if !ok {
		return Estimator{}, configError("algorithm.adv_estimator", "unknown estimator \""+name+"\"; known: "+strings.Join(Names(), ", "))
	}
	return e, nil
}

// Names lists the registered estimators, sorted.
func Names() []string {
	registry.RLock()
	defer registry.RUnlock()
	return slices.Sorted(maps.Keys(registry.byName))
}

// RoleEstimators picks an estimator per trajectory name (role), as rLLM's
// algorithm.estimator_map does; roles not in ByRole use Default. Each
// role's trajectories form their own batch (rLLM computes advantages role
// by role, so batch-level statistics never mix roles).
type RoleEstimators struct {
	Default string
	ByRole  map[string]string
}

// For returns the estimator of role.
func (r RoleEstimators) For(role string) (Estimator, error) {
	if name, ok := r.ByRole[role]; ok {
		return Lookup(name)
	}
	return Lookup(r.Default)
}

// Validate checks that every named estimator exists.
func (r RoleEstimators) Validate() error {
	if _, err := Lookup(r.Default); err != nil {
		return err
	}
	for role, name := range r.ByRole {
		if _, err := Lookup(name); err != nil {
			return rekey(err, "algorithm.estimator_map."+role)
		}
	}
	return nil
}

func init() {
	builtins := []Estimator{
		{Name: "grpo", Level: Outcome, Compute: func(in *Input, cfg *Config, ws *Workspace, out *Output) error {
			return GRPO(in.Rewards, in.Groups, in.NumGroups, cfg.NormAdvByStd, cfg.Epsilon, cfg.Reference, ws, out.Sequence)
		}},
		{Name: "drgrpo", Level: Outcome, Compute: func(in *Input, cfg *Config, ws *Workspace, out *Output) error {
			return GRPO(in.Rewards, in.Groups, in.NumGroups, false, cfg.Epsilon, cfg.Reference, ws, out.Sequence)
		}},
		{Name: "rloo", Level: Outcome, Compute: func(in *Input, cfg *Config, ws *Workspace, out *Output) error {
			return RLOO(in.Rewards, in.Groups, in.NumGroups, ws, out.Sequence)
		}},
		{Name: "reinforce", Level: Outcome, Compute: func(in *Input, cfg *Config, ws *Workspace, out *Output) error {
			return Reinforce(in.Rewards, out.Sequence)
		}},
		{Name: "reinforce_plus_plus_baseline", Level: Outcome, Compute: func(in *Input, cfg *Config, ws *Workspace, out *Output) error {
			return ReinforcePPBaseline(in.Rewards, in.Groups, in.NumGroups, in.Lengths, cfg.Epsilon, cfg.Reference, ws, out.Sequence)
		}},
		{Name: "opo", Level: Outcome, Compute: func(in *Input, cfg *Config, ws *Workspace, out *Output) error {
			return OPO(in.Rewards, in.Groups, in.NumGroups, in.Lengths, ws, out.Sequence)
		}},
		{Name: "reinforce_plus_plus", Level: Token, Compute: func(in *Input, cfg *Config, ws *Workspace, out *Output) error {
			return ReinforcePP(&in.Tokens, cfg, out.Advantages, out.Returns)
		}},
		{Name: "gae", Level: Token, Compute: func(in *Input, cfg *Config, ws *Workspace, out *Output) error {
			return GAE(&in.Tokens, cfg, out.Advantages, out.Returns)
		}},
	}
	for _, e := range builtins {
		compute := e.Compute
		e.Compute = func(in *Input, cfg *Config, ws *Workspace, out *Output) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			return compute(in, cfg, ws, out)
		}
		if err := Register(e); err != nil {
			panic(err) // a duplicate built-in is a bug in this file
		}
	}
}
