package frozenlake

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
)

func init() {
	env.Register(env.Definition{
		Name:        "frozenlake",
		Description: "Gymnasium FrozenLake: reach G without falling into a hole; task rows set seed, size, p",
		Args: []registry.Arg{
			{Name: "size", Type: "int", Default: 4, Doc: "side of a random map"},
			{Name: "p", Type: "float", Default: 0.8, Doc: "probability that a cell of a random map is frozen (not a hole)"},
			{Name: "seed", Type: "int", Default: 0, Doc: "seeds the map and the slips"},
			{Name: "is_slippery", Type: "bool", Default: true, Doc: "intended move with probability 1/3, else one of the two perpendicular ones"},
			{Name: "max_steps", Type: "int", Default: 100, Doc: "moves before the episode is truncated (Gymnasium's 4x4 time limit)"},
			{Name: "map_name", Type: "string", Default: "", Doc: `a fixed Gymnasium map, "4x4" or "8x8" (empty: random map)`},
			{Name: "desc", Type: "list", Default: []any(nil), Doc: `a fixed map as rows of S/F/H/G, e.g. ["SF","HG"]`},
		},
		New: func(_ episode.Task, args registry.Values) (env.Env, error) { return NewEnv(args) },
	})
}

// Env is one FrozenLake episode.
type Env struct {
	Lake     *Lake
	State    int
	Steps    int
	MaxSteps int
	rng      *rand.Rand
	done     bool
}

// NewEnv builds the env from resolved args (env.args merged with the row).
func NewEnv(args registry.Values) (*Env, error) {
	seed := uint64(args.Int("seed"))
	var desc []string
	switch {
	case len(args.List("desc")) > 0:
		for _, r := range args.List("desc") {
			s, ok := r.(string)
			if !ok {
				return nil, fmt.Errorf("frozenlake desc holds %v; each row must be a string", r)
			}
			desc = append(desc, s)
		}
	case args.String("map_name") != "":
		m, ok := Maps[args.String("map_name")]
		if !ok {
			return nil, &registry.ConfigError{Key: "env.args.map_name", Msg: fmt.Sprintf("env.args.map_name %q is not a Gymnasium map; use 4x4 or 8x8", args.String("map_name"))}
		}
		desc = m
	default:
		var err error
		desc, err = GenerateMap(args.Int("size"), args.Float("p"), rand.New(rand.NewPCG(seed, 0)))
		if err != nil {
			return nil, err
		}
	}
	lake, err := NewLake(desc, args.Bool("is_slippery"))
	if err != nil {
		return nil, err
	}
	maxSteps := args.Int("max_steps")
	if maxSteps <= 0 {
		return nil, fmt.Errorf("frozenlake max_steps %d must be positive", maxSteps)
	}
	return &Env{Lake: lake, MaxSteps: maxSteps, rng: rand.New(rand.NewPCG(seed, 1))}, nil
}

// Reset puts the player on S.
func (e *Env) Reset(context.Context) (any, map[string]any, error) {
	e.State, e.Steps, e.done = e.Lake.Start(), 0, false
	return e.Lake.Render(e.State), map[string]any{"state": e.State}, nil
}

// ParseAction reads a move written as a name (left, Down, ...) or as
// rLLM's numbers 1 Left, 2 Down, 3 Right, 4 Up. ok is false otherwise.
func ParseAction(s string) (int, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	for a, name := range ActionNames {
		if s == strings.ToLower(name) {
			return a, true
		}
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 1 && n <= 4 {
		return n - 1, true
	}
	return 0, false
}

// Step applies the move in action.Content. An unreadable move changes
// nothing, earns 0 and is reported in Info["format_error"]; it still
// counts towards max_steps.
func (e *Env) Step(_ context.Context, action episode.Action) (env.StepResult, error) {
	if e.done {
		return env.StepResult{}, fmt.Errorf("frozenlake: step after the episode ended")
	}
	e.Steps++
	info := map[string]any{}
	var res env.StepResult
	if a, ok := ParseAction(action.Content); !ok {
		info["format_error"] = fmt.Sprintf("%q is not a move; answer Left, Down, Right or Up", action.Content)
		info["action_is_valid"] = false
	} else {
		t := e.Lake.Sample(e.State, a, e.rng.Float64())
		info["action_is_valid"] = true
		info["moved"] = t.Next != e.State
		e.State = t.Next
		res.Reward, res.Done = t.Reward, t.Done
	}
	cell := e.Lake.Desc[e.State/e.Lake.Cols][e.State%e.Lake.Cols]
	info["is_correct"] = cell == 'G'
	info["state"] = e.State
	if e.Steps >= e.MaxSteps {
		res.Done = true
		info["truncated"] = !(cell == 'G' || cell == 'H')
	}
	e.done = res.Done
	res.Observation, res.Info = e.Lake.Render(e.State), info
	return res, nil
}

// Close does nothing.
func (e *Env) Close() error { return nil }
