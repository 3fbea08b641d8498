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
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

func init() {
	env.Register(env.Definition{
		Name:        "frozenlake",
		Description: "Gymnasium FrozenLake on rLLM's random maps: reach G without falling into a hole; task rows set seed, size, p",
		Params:      Params{},
		Validate: func(v registry.Values) error {
			if n := registry.As[Params](v).MapName; n != "" {
				if _, ok := Maps[n]; !ok {
					return usererr.Errorf("env.args.map_name %q is not a Gymnasium map; use 4x4 or 8x8", n)
				}
			}
			return nil
		},
		New: func(_ episode.Task, args registry.Values) (env.Env, error) { return NewEnv(registry.As[Params](args)) },
	})
}

// Params are the env's arguments; a task row may set any of them.
type Params struct {
	Size       int      `arg:"size" default:"4" range:"[2,64]" task:"true" doc:"side of a random map"`
	P          float64  `arg:"p" default:"0.8" range:"(0,1]" task:"true" doc:"probability that a cell of a random map is frozen (not a hole)"`
	Seed       int      `arg:"seed" default:"0" task:"true" doc:"seeds the map and the slips"`
	IsSlippery bool     `arg:"is_slippery" default:"false" task:"true" doc:"intended move with probability 1/3, else one of the two perpendicular ones (rLLM's default is false, Gymnasium's true)"`
	GoalDist   int      `arg:"goal_distance" default:"6" range:"[0,)" task:"true" doc:"random maps: S and G on random cells, G at most this many moves from S (rLLM's layout); 0: S top-left, G bottom-right (Gymnasium's)"`
	MaxSteps   int      `arg:"max_steps" default:"100" range:"[1,)" task:"true" doc:"moves before the episode is truncated (Gymnasium's 4x4 time limit)"`
	MapName    string   `arg:"map_name" task:"true" doc:"a fixed Gymnasium map, \"4x4\" or \"8x8\" (empty: random map)"`
	Desc       []string `arg:"desc" task:"true" doc:"a fixed map as rows of S/F/H/G, e.g. [\"SF\",\"HG\"]"`
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
func NewEnv(args Params) (*Env, error) {
	seed := uint64(args.Seed)
	var desc []string
	switch {
	case len(args.Desc) > 0:
		desc = args.Desc
	case args.MapName != "":
		m, ok := Maps[args.MapName]
		if !ok {
			return nil, usererr.Errorf("frozenlake map_name %q is not a Gymnasium map; use 4x4 or 8x8", args.MapName)
		}
		desc = m
	default:
		var err error
		desc, err = GenerateMap(args.Size, args.P, args.GoalDist, rand.New(rand.NewPCG(seed, 0)))
		if err != nil {
			return nil, err
		}
	}
	lake, err := NewLake(desc, args.IsSlippery)
	if err != nil {
		return nil, err
	}
	if args.MaxSteps <= 0 {
		return nil, fmt.Errorf("frozenlake max_steps %d must be positive", args.MaxSteps)
	}
	return &Env{Lake: lake, MaxSteps: args.MaxSteps, rng: rand.New(rand.NewPCG(seed, 1))}, nil
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
