package solverjudge

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/sampler/samplertest"
	"github.com/rllm-org/rllm-go/pkg/tool"
	"github.com/rllm-org/rllm-go/pkg/usererr"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// task is a countdown row: 2*3+4 = 10 solves it.
var task = episode.Task{"id": "cd-1", "question": "Using the numbers [2, 3, 4], create an equation that equals 10.", "target": 10, "nums": []any{2, 3, 4}}

func build(t *testing.T, args map[string]any, smp sampler.Sampler) workflow.Workflow {
	t.Helper()
	w, err := workflow.New(Name, args, workflow.Deps{Sampler: smp, Env: workflow.Component{Name: "countdown"}})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestEpisodeRolesAndRewards(t *testing.T) {
	for _, tt := range []struct {
		name    string
		args    map[string]any
		replies []string
		solver  []float64 // each solver trajectory's reward
		actions []string
		choice  int
		judge   float64
	}{
		{name: "judge picks the correct one", replies: []string{"<think>hm</think><answer> 2*3+4 </answer>", "<answer>2+3+4</answer>", "<answer>1</answer>"},
			solver: []float64{1, 0}, actions: []string{"<answer>2*3+4</answer>", "<answer>2+3+4</answer>"}, choice: 1, judge: 1},
		{name: "judge picks the wrong one", replies: []string{"<answer>2*3+4</answer>", "<answer>2+3+4</answer>", "I pick <ANSWER> 2 </ANSWER>"},
			solver: []float64{1, 0}, actions: []string{"<answer>2*3+4</answer>", "<answer>2+3+4</answer>"}, choice: 2, judge: 0},
		{name: "the first answer tag counts", replies: []string{"<answer>2+3+4</answer> no: <answer>2*3+4</answer>", "(2*3)+4", "<answer>1</answer> or <answer>2</answer>"},
			solver: []float64{0, 0}, actions: []string{"<answer>2+3+4</answer>", NoSolution}, choice: 1, judge: 0},
		{name: "no candidate number picks nothing", replies: []string{"<answer>4+3*2</answer>", "<answer>2*3+4</answer>", "<answer>0</answer>"},
			solver: []float64{1, 1}, actions: []string{"<answer>4+3*2</answer>", "<answer>2*3+4</answer>"}, choice: 0, judge: 0},
		{name: "a number past the candidates picks nothing", replies: []string{"<answer>4+3*2</answer>", "<answer>2*3+4</answer>", "<answer>3</answer>"},
			solver: []float64{1, 1}, actions: []string{"<answer>4+3*2</answer>", "<answer>2*3+4</answer>"}, choice: 0, judge: 0},
		{name: "format_score pays wrong answers, not missing ones", args: map[string]any{"format_score": 0.1},
			replies: []string{"<answer>2+3+4</answer>", "none", "<answer>1</answer>"},
			solver:  []float64{0.1, 0}, actions: []string{"<answer>2+3+4</answer>", NoSolution}, choice: 1, judge: 0.1},
		{name: "three candidates", args: map[string]any{"n_solutions": 3},
			replies: []string{"<answer>2+3</answer>", "<answer>2+3+4</answer>", "<answer>(2*3)+4</answer>", "<answer>3</answer>"},
			solver:  []float64{0, 0, 1}, actions: []string{"<answer>2+3</answer>", "<answer>2+3+4</answer>", "<answer>(2*3)+4</answer>"}, choice: 3, judge: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			smp := samplertest.Texts(tt.replies...)
			ep, err := build(t, tt.args, smp).Run(context.Background(), task, "cd-1:0")
			if err != nil {
				t.Fatal(err)
			}
			n := len(tt.solver)
			if len(ep.Trajectories) != n+1 || smp.Calls() != n+1 {
				t.Fatalf("%d trajectories from %d calls, want %d", len(ep.Trajectories), smp.Calls(), n+1)
			}
			ids := map[string]bool{}
			for i, tr := range ep.Trajectories {
				want := RoleSolver
				if i == n {
					want = RoleJudge
				}
				if tr.Name != want || len(tr.Steps) != 1 {
					t.Fatalf("trajectory %d: %s with %d steps, want %s with 1", i, tr.Name, len(tr.Steps), want)
				}
				st := tr.Steps[0]
				if len(st.ResponseIDs) == 0 || len(st.LossMask) != len(st.ResponseIDs) || len(st.PromptIDs) == 0 || st.Reward != tr.Reward || st.MCReturn != tr.Reward {
					t.Errorf("trajectory %d: step %+v does not carry its tokens and reward %g", i, st, tr.Reward)
				}
				ids[tr.ID] = true
			}
			if len(ids) != n+1 {
				t.Errorf("trajectory ids %v are not distinct", ids)
			}
			for i, want := range tt.solver {
				tr := ep.Trajectories[i]
				if tr.Reward != want || tr.Steps[0].Action.Content != tt.actions[i] {
					t.Errorf("solver %d: reward %g, action %q; want %g, %q", i, tr.Reward, tr.Steps[0].Action.Content, want, tt.actions[i])
				}
				if p := smp.Requests[i].Messages[0].Content; !strings.HasPrefix(p, task["question"].(string)) || !strings.Contains(p, "<answer>") {
					t.Errorf("solver prompt %q", p)
				}
			}
			judge := ep.Trajectories[n]
			if judge.Reward != tt.judge || judge.Steps[0].Info["choice"] != tt.choice {
				t.Errorf("judge: reward %g, choice %v; want %g, %d", judge.Reward, judge.Steps[0].Info["choice"], tt.judge, tt.choice)
			}
			prompt := smp.Requests[n].Messages[0].Content
			for i, a := range tt.actions {
				if !strings.Contains(prompt, fmt.Sprintf("Solution %d: %s\n", i+1, a)) {
					t.Errorf("judge prompt lacks candidate %d %q:\n%s", i+1, a, prompt)
				}
			}
			if ep.IsCorrect != (tt.judge == 1) || ep.TerminationReason != episode.TerminationEnvDone {
				t.Errorf("episode correct %v, termination %s", ep.IsCorrect, ep.TerminationReason)
			}
			acc := 0.0
			for _, r := range tt.solver {
				acc += r
			}
			if ep.Metrics["solver_acc"] != acc/float64(n) || ep.Metrics["judge_acc"] != map[bool]float64{true: 1}[ep.IsCorrect] {
				t.Errorf("metrics %v", ep.Metrics)
			}
		})
	}
}

func TestEpisodeEndings(t *testing.T) {
	tooLong := fmt.Errorf("local: %w", sampler.ErrPromptTooLong)
	for _, tt := range []struct {
		name    string
		replies []samplertest.Reply
		term    episode.TerminationReason
		trajs   int
		err     bool
	}{
		{"a cut reply", []samplertest.Reply{{Text: "<answer>2*3+4</answer>"}, {Text: "<answer>2+", FinishReason: "length"}, {Text: "<answer>1</answer>"}},
			episode.TerminationMaxResponseLength, 3, false},
		{"a judge prompt too long", []samplertest.Reply{{Text: "<answer>2*3+4</answer>"}, {Text: "x"}, {Err: tooLong}},
			episode.TerminationMaxPromptLength, 2, false},
		{"a failing sampler", []samplertest.Reply{{Text: "<answer>2*3+4</answer>"}, {Err: errors.New("server down")}},
			episode.TerminationError, 1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ep, err := build(t, nil, samplertest.New(tt.replies...)).Run(context.Background(), task, "cd-1:0")
			if (err != nil) != tt.err || ep == nil {
				t.Fatalf("err %v, episode %v", err, ep)
			}
			if ep.TerminationReason != tt.term || len(ep.Trajectories) != tt.trajs {
				t.Errorf("termination %s with %d trajectories, want %s with %d", ep.TerminationReason, len(ep.Trajectories), tt.term, tt.trajs)
			}
			if ep.Trajectories[0].Reward != 1 {
				t.Errorf("the first solver's reward %g is lost", ep.Trajectories[0].Reward)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	smp := samplertest.Texts()
	for _, tt := range []struct {
		name string
		args map[string]any
		deps workflow.Deps
		want string
	}{
		{"no candidates", map[string]any{"n_solutions": 0}, workflow.Deps{}, "workflow.args.n_solutions"},
		{"an unknown arg", map[string]any{"n_solution": 2}, workflow.Deps{}, "n_solution"},
		{"tools", nil, workflow.Deps{ToolConfig: tool.Config{Builtin: []string{"python"}}}, "tools"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.deps.Sampler = smp
			_, err := workflow.New(Name, tt.args, tt.deps)
			var ue *usererr.Error
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want a user error naming %s", err, tt.want)
			}
		})
	}
	// A row that is not a countdown task fails its episode before any call.
	s := samplertest.Texts("<answer>1</answer>")
	ep, err := build(t, nil, s).Run(context.Background(), episode.Task{"question": "What is 2 + 2?", "ground_truth": "4"}, "q:0")
	if err == nil || !strings.Contains(err.Error(), "target") || ep.TerminationReason != episode.TerminationError || s.Calls() != 0 {
		t.Errorf("non-countdown row: err %v, termination %s, %d calls", err, ep.TerminationReason, s.Calls())
	}
}

func TestFormatExample(t *testing.T) {
	solver := func(string, *rand.Rand) string { return "<answer> 2 + 3 + 4 </answer>" }
	f := FormatExample(solver)
	rng := rand.New(rand.NewPCG(1, 2))
	if got := f("<|im_start|>user\n"+SolverPrompt(task["question"].(string)), rng); got != "<answer> 2 + 3 + 4 </answer>" {
		t.Errorf("solver prompt answered %q", got)
	}
	judge := JudgePrompt(task["question"].(string), []string{"<answer>1</answer>", NoSolution, "<answer>2+3</answer>"})
	seen := map[string]bool{}
	for range 200 {
		seen[f("<|im_start|>user\n"+judge+"<|im_end|>", rng)] = true
	}
	if len(seen) != 3 || !seen["<answer>1</answer>"] || !seen["<answer>2</answer>"] || !seen["<answer>3</answer>"] {
		t.Errorf("judge prompt answered %v, want each of the 3 candidates' numbers", seen)
	}
}
