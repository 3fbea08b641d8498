package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler/samplertest"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

func TestScriptedEpisode(t *testing.T) {
	s := samplertest.Texts("50", "I say 25", "hmm", "37")
	w, err := workflow.New("multi_turn", map[string]any{"gamma": 0.5}, workflow.Deps{
		Sampler: s, MaxSteps: 10,
		Agent: workflow.Component{Name: "guesser"},
		Env:   workflow.Component{Name: "hot_cold", Args: map[string]any{"step_penalty": -0.1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := w.Run(context.Background(), episode.Task{"secret": 37}, "s:0")
	if err != nil {
		t.Fatal(err)
	}
	steps := ep.Trajectories[0].Steps
	if ep.TerminationReason != episode.TerminationEnvDone || !ep.IsCorrect || len(steps) != 4 {
		t.Fatalf("%s correct=%v steps=%d", ep.TerminationReason, ep.IsCorrect, len(steps))
	}
	if steps[2].Info["format_error"] != "no number" {
		t.Errorf("step 3 info %v", steps[2].Info)
	}
	// Rewards −0.1, −0.1, −0.1, 1; returns with gamma 0.5:
	// G3 = 1, G2 = −0.1+0.5 = 0.4, G1 = −0.1+0.2 = 0.1, G0 = −0.1+0.05 = −0.05.
	for i, want := range []float64{-0.05, 0.1, 0.4, 1} {
		if math.Abs(steps[i].MCReturn-want) > 1e-12 {
			t.Errorf("step %d return %v, want %v", i, steps[i].MCReturn, want)
		}
	}
	if got := s.Requests[1].Messages[2].Content; got != "50 is too high; lower. Answer with a number only." {
		t.Errorf("second observation %q", got)
	}
}

func TestRunWithStandInPolicy(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, bisector{}, []int{1, 100, 64}, nil); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("output:\n%s", out.String())
	}
	for _, l := range lines {
		// Bisection finds any number in [1, 100] within 7 guesses.
		if !strings.Contains(l, "env_done") || !strings.Contains(l, "correct true") {
			t.Errorf("line %q", l)
		}
	}
}

func TestConfigMistakes(t *testing.T) {
	for args, want := range map[string]map[string]any{
		"env.args.lo (5) must not exceed env.args.hi (2)":                            {"lo": 5, "hi": 2},
		`env.args.lo: must be an int, got "abc"`:                                     {"lo": "abc"},
		"env.args.l0: is not an accepted argument; did you mean env.args.lo?":        {"l0": 3},
		"env.args.step_penalty: must be in [-1,0], got 2":                            {"step_penalty": 2},
		"env.args.secrt: is not an accepted argument; did you mean env.args.secret?": {"secrt": 3},
	} {
		err := run(context.Background(), &bytes.Buffer{}, bisector{}, []int{1}, want)
		if err == nil || !strings.Contains(err.Error(), args) {
			t.Errorf("err %v, want %q", err, args)
		}
	}
}

// The registered agent and env train end to end through pkg/trainer:
// episodes run, the update runs, a checkpoint is written.
func TestTrainThroughTrainer(t *testing.T) {
	var log bytes.Buffer
	dir := t.TempDir()
	if err := train(context.Background(), &log, 2, dir, map[string]any{"hi": 32}); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "trained 2 steps") {
		t.Errorf("log:\n%s", log.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "global_step_2", "trainer_state.json")); err != nil {
		t.Error(err)
	}
}
