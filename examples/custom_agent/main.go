// Command custom_agent shows how a Go program brings its own agent and
// environment to rllm: it defines both, registers them by name with their
// arguments (as built-ins do), and runs episodes through the multi_turn
// workflow. The game: find a hidden number in [lo, hi]; the env answers
// "higher" or "lower".
//
// A real program hands the workflow the rollout engine's sampler (a vLLM
// server, Tinker, the embedded policy); this one uses a stand-in policy
// that bisects, so it runs anywhere. With -train N it trains the embedded
// policy on the game through pkg/trainer instead.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/trainer"
	"github.com/rllm-org/rllm-go/pkg/usererr"
	"github.com/rllm-org/rllm-go/pkg/workflow"

	_ "github.com/rllm-org/rllm-go/pkg/backend/local" // the embedded policy, backend.name=local
)

func init() {
	agent.Register(agent.Definition{
		Name:        "guesser",
		Description: "guesses a hidden number, one guess per turn",
		Params:      GuesserArgs{},
		New: func(args registry.Values) (agent.Agent, error) {
			return &Guesser{Style: registry.As[GuesserArgs](args).Style}, nil
		},
	})
	env.Register(env.Definition{
		Name:        "hot_cold",
		Description: "hidden number in [lo, hi]; says higher or lower; reward 1 when found",
		Params:      HotColdArgs{},
		Validate: func(v registry.Values) error {
			if a := registry.As[HotColdArgs](v); a.Lo > a.Hi {
				return &usererr.Error{Subject: "env.args.lo", Msg: fmt.Sprintf("env.args.lo (%d) must not exceed env.args.hi (%d)", a.Lo, a.Hi)}
			}
			return nil
		},
		New: func(_ episode.Task, args registry.Values) (env.Env, error) {
			a := registry.As[HotColdArgs](args)
			return &HotCold{Lo: a.Lo, Hi: a.Hi, Secret: a.Secret, Penalty: a.StepPenalty}, nil
		},
	})
}

// GuesserArgs are the agent's arguments: each field's tags give its name,
// default and the line `rllm list --args guesser` prints.
type GuesserArgs struct {
	Style string `arg:"style" default:"Answer with a number only." doc:"instruction appended to each observation"`
}

// HotColdArgs are the env's arguments. task:"true" lets a task row's
// column of the same name override the configured value.
type HotColdArgs struct {
	Lo          int     `arg:"lo" default:"1" doc:"smallest possible number"`
	Hi          int     `arg:"hi" default:"100" doc:"largest possible number"`
	Secret      int     `arg:"secret" default:"42" task:"true" doc:"the number to find (task rows usually set it)"`
	StepPenalty float64 `arg:"step_penalty" default:"0" range:"[-1,0]" doc:"reward added to every wrong guess, e.g. -0.01"`
}

// Guesser embeds agent.Base for the message and trajectory bookkeeping.
type Guesser struct {
	agent.Base
	Style string
}

// UpdateFromEnv shows the env's feedback to the model.
func (g *Guesser) UpdateFromEnv(obs any, _ float64, done bool, _ map[string]any) {
	if !done {
		g.AddUser(agent.ObservationText(obs) + " " + g.Style)
	}
}

var number = regexp.MustCompile(`-?\d+`)

// UpdateFromModel takes the last number in the reply as the guess. A
// reply without a number becomes an empty action; the env explains.
func (g *Guesser) UpdateFromModel(resp sampler.Response) episode.Action {
	all := number.FindAllString(resp.Text, -1)
	act := episode.Action{}
	if len(all) > 0 {
		act.Content = all[len(all)-1]
	}
	g.RecordModel(resp, act)
	return act
}

// HotCold is the environment.
type HotCold struct {
	Lo, Hi, Secret int
	Penalty        float64
}

// Reset states the game.
func (h *HotCold) Reset(context.Context) (any, map[string]any, error) {
	return fmt.Sprintf("I am thinking of a number between %d and %d.", h.Lo, h.Hi), nil, nil
}

// Step judges a guess.
func (h *HotCold) Step(_ context.Context, a episode.Action) (env.StepResult, error) {
	n, err := strconv.Atoi(a.Content)
	switch {
	case err != nil:
		return env.StepResult{Observation: "That was not a number.", Reward: h.Penalty, Info: map[string]any{"format_error": "no number"}}, nil
	case n < h.Secret:
		return env.StepResult{Observation: fmt.Sprintf("%d is too low; higher.", n), Reward: h.Penalty}, nil
	case n > h.Secret:
		return env.StepResult{Observation: fmt.Sprintf("%d is too high; lower.", n), Reward: h.Penalty}, nil
	}
	return env.StepResult{Observation: "Found it!", Reward: 1, Done: true, Info: map[string]any{"is_correct": true}}, nil
}

// Close has nothing to release.
func (h *HotCold) Close() error { return nil }

// bisector is the stand-in policy: it reads the bounds from the
// conversation and guesses the middle.
type bisector struct{}

func (bisector) Sample(_ context.Context, req sampler.Request) (sampler.Response, error) {
	lo, hi := 1, 100
	for _, m := range req.Messages {
		nums := number.FindAllString(m.Content, -1)
		switch {
		case strings.HasPrefix(m.Content, "I am thinking") && len(nums) >= 2:
			lo, _ = strconv.Atoi(nums[0])
			hi, _ = strconv.Atoi(nums[1])
		case strings.Contains(m.Content, "higher") && len(nums) > 0:
			n, _ := strconv.Atoi(nums[0])
			lo = n + 1
		case strings.Contains(m.Content, "lower") && len(nums) > 0:
			n, _ := strconv.Atoi(nums[0])
			hi = n - 1
		}
	}
	return sampler.Response{Text: fmt.Sprintf("My guess: %d", (lo+hi)/2), FinishReason: "stop"}, nil
}

// run plays one episode per secret and prints a line per episode.
func run(ctx context.Context, out io.Writer, s sampler.Sampler, secrets []int, envArgs map[string]any) error {
	for i, secret := range secrets {
		// One workflow per episode, as the rollout engine does.
		w, err := workflow.New("multi_turn", map[string]any{"gamma": 0.9}, workflow.Deps{
			Sampler:  s,
			Params:   sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 32},
			MaxSteps: 10,
			Agent:    workflow.Component{Name: "guesser"},
			Env:      workflow.Component{Name: "hot_cold", Args: envArgs},
		})
		if err != nil {
			return err
		}
		ep, err := w.Run(ctx, episode.Task{"secret": secret}, episode.EpisodeID("secret-"+strconv.Itoa(secret), i))
		if err != nil {
			return err
		}
		traj := ep.Trajectories[0]
		fmt.Fprintf(out, "%s: %s after %d guesses, reward %.2f, correct %v\n", ep.ID, ep.TerminationReason, len(traj.Steps), traj.Reward, ep.IsCorrect)
	}
	return nil
}

func main() {
	hi := flag.Int("hi", 100, "largest number")
	steps := flag.Int("train", 0, "train the embedded policy on the game for this many RL steps instead of playing with the bisector")
	flag.Parse()
	var err error
	if *steps > 0 {
		err = train(context.Background(), os.Stderr, *steps, "checkpoints/custom_agent", map[string]any{"hi": *hi})
	} else {
		err = run(context.Background(), os.Stdout, bisector{}, []int{1, 42, 77, *hi}, map[string]any{"hi": *hi, "step_penalty": -0.01})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "custom_agent:", err)
		os.Exit(1)
	}
}

// train is rLLM's AgentTrainer(agent_class, env_class, agent_args,
// env_args, config, train_dataset) in Go: the agent and env are selected
// by the names registered above, the configuration is a dot-key map (a
// list of "key=value" strings works too, through config.FromOverrides),
// and the tasks are rows handed over directly. The embedded policy is tiny
// and the game has long conversations, so this shows the wiring, not a
// policy that wins.
func train(ctx context.Context, log io.Writer, steps int, dir string, envArgs map[string]any) error {
	cfg, err := config.FromMap(map[string]any{
		"agent.name":                   "guesser",
		"agent.max_steps":              4,
		"env.name":                     "hot_cold",
		"env.args":                     envArgs,
		"workflow.name":                "multi_turn",
		"data.train_batch_size":        4,
		"rollout.n":                    4,
		"rollout.max_tokens":           4,
		"trainer.total_training_steps": steps,
		"trainer.test_freq":            -1,
		"trainer.val_before_train":     false,
		"trainer.default_local_dir":    dir,
	})
	if err != nil {
		return err
	}
	var tasks []episode.Task
	for secret := 1; secret <= 32; secret++ {
		tasks = append(tasks, episode.Task{"secret": secret, "data_source": "hot_cold"})
	}
	t, err := trainer.New(ctx, cfg, trainer.Options{Log: log, TrainTasks: tasks, ValTasks: tasks[:4]})
	if err != nil {
		return err
	}
	defer t.Close()
	res, err := t.Train(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "trained %d steps; last mean score %.3f\n", res.Steps, res.Last["critic/score/mean"])
	return nil
}
