// Package solverjudge is rLLM's solver-judge workflow on countdown tasks
// (workflow.name=solver_judge): a solver samples n_solutions candidate
// answers to the task, a judge reads them and picks one. Every candidate
// is its own "solver" trajectory, rewarded by the countdown reward of its
// answer; the judge's "judge" trajectory is rewarded by the countdown
// reward of the candidate it picked. The trainer groups trajectories by
// task and name, so solvers are compared with the other solvers of their
// task and judges with the other judges (algorithm.adv_estimator_by_role
// gives each role its own estimator).
//
// The behaviour follows rLLM's examples/solver_judge/solver_judge_flow.py
// (SolverJudgeWorkflow, Solver, Judge) with rllm/rewards/countdown_reward.py
// (countdown_reward_fn) at rllm-org/rllm commit 7982c508: the solver's
// action is its first <answer>...</answer>, or "No solution found"; the
// judge's is the candidate whose 1-based index its first <answer> holds,
// or nothing; a wrong but well-formed equation earns 0, not verl's 0.1.
// The prompts are worded here.
package solverjudge

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/reward"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/usererr"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// Name is the workflow's registered name.
const Name = "solver_judge"

// Trajectory names: the roles the trainer groups by.
const (
	RoleSolver = "solver"
	RoleJudge  = "judge"
)

// NoSolution is the solver's action when its reply has no answer tag.
const NoSolution = "No solution found"

// Params are workflow.args of solver_judge (rLLM's workflow_args).
type Params struct {
	NSolutions  int     `arg:"n_solutions" default:"2" range:"[1,16]" doc:"candidate solutions the solver samples per episode, each its own solver trajectory; the judge picks one of them"`
	FormatScore float64 `arg:"format_score" default:"0" range:"[0,1]" doc:"reward of a present but wrong answer (rLLM's countdown_reward_fn: 0; verl's countdown score: 0.1); a correct equation earns 1"`
}

func init() {
	workflow.Register(workflow.Definition{
		Name:        Name,
		Description: "rLLM's solver-judge on countdown tasks: n_solutions solver trajectories, each rewarded for its answer, and a judge trajectory rewarded for the answer it picks; advantages per task and role",
		Params:      Params{},
		New: func(args registry.Values, deps workflow.Deps) (workflow.Workflow, error) {
			return New(registry.As[Params](args), deps)
		},
	})
}

// Workflow runs one solver-judge episode.
type Workflow struct {
	p      Params
	deps   workflow.Deps
	reward reward.Countdown
}

// New builds the workflow. It refuses what it would otherwise ignore:
// tools (neither role calls any) and a Go program's own env. Rows that
// are not countdown tasks (env.name=arith's generated ones) fail their
// episode with a message saying so.
func New(p Params, deps workflow.Deps) (*Workflow, error) {
	if deps.Sampler == nil {
		return nil, errors.New("solver_judge: Deps.Sampler is nil")
	}
	if p.NSolutions < 1 {
		return nil, &usererr.Error{Subject: "workflow.args.n_solutions", Msg: fmt.Sprintf("is %d; the judge needs at least 1 candidate", p.NSolutions)}
	}
	if !deps.ToolConfig.Empty() || deps.Toolbox != nil || len(deps.Tools) > 0 {
		return nil, &usererr.Error{Subject: "tools", Msg: "are set, but the solver_judge workflow's solver and judge call no tools", Fix: "remove tools.builtin and tools.mcp"}
	}
	if deps.NewEnv != nil {
		return nil, &usererr.Error{Subject: "env.name", Msg: fmt.Sprintf("is %s, but solver_judge solves countdown tasks (rows with target and nums) and scores them with the countdown reward", "a Go program's own env"),
			Fix: "set env.name=countdown (its generator makes the tasks when data.train_files is empty)"}
	}
	return &Workflow{p: p, deps: deps, reward: reward.Countdown{Score: 1, FormatScore: p.FormatScore}}, nil
}

// SolverPrompt is what the solver is asked: the task's question and the
// answer format.
func SolverPrompt(question string) string {
	return strings.TrimSpace(question) + " Give the final answer within <answer> </answer>."
}

// judgeHeader opens every judge prompt; FormatExample recognises judge
// prompts by it.
const judgeHeader = "You are checking candidate solutions to a countdown problem."

// JudgePrompt asks the judge to pick one of the candidates (the solvers'
// actions) by its 1-based number.
func JudgePrompt(question string, candidates []string) string {
	var b strings.Builder
	b.WriteString(judgeHeader)
	b.WriteString("\nProblem: ")
	b.WriteString(strings.TrimSpace(question))
	b.WriteString("\n")
	for i, c := range candidates {
		fmt.Fprintf(&b, "Solution %d: %s\n", i+1, c)
	}
	b.WriteString("A correct solution uses each given number exactly once, only + - * / and parentheses, and equals the target. " +
		"Reply with the number of a correct solution in <answer> </answer>, e.g. <answer>1</answer>; if several are correct, the first of them.")
	return b.String()
}

// reAnswer is the first answer tag of a reply, as rLLM's solver and judge
// parse it (re.IGNORECASE | re.DOTALL).
var reAnswer = regexp.MustCompile(`(?is)<answer>(.*?)</answer>`)

// SolverAction is the solver's answer as the judge and the reward see it:
// its first answer tag, trimmed, or NoSolution.
func SolverAction(reply string) string {
	if m := reAnswer.FindStringSubmatch(reply); m != nil {
		return "<answer>" + strings.TrimSpace(m[1]) + "</answer>"
	}
	return NoSolution
}

// JudgeChoice is the 1-based candidate number in the judge's first answer
// tag, or 0 when it names none of the n candidates. (rLLM indexes a Python
// list with it, where 0 and negative numbers wrap around to the last
// candidates; here they pick nothing.)
func JudgeChoice(reply string, n int) int {
	m := reAnswer.FindStringSubmatch(reply)
	if m == nil {
		return 0
	}
	k, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(m[1]), "+"))
	if err != nil || k < 1 || k > n {
		return 0
	}
	return k
}

// Run plays one episode: the solver's n_solutions calls, one after the
// other (so that seeded runs are reproducible), then the judge's call.
func (w *Workflow) Run(ctx context.Context, task episode.Task, episodeID string) (*episode.Episode, error) {
	ep := &episode.Episode{ID: episodeID, Task: task, TerminationReason: episode.TerminationUnknown, Metrics: map[string]float64{}}
	question, _ := task["question"].(string)
	if question == "" {
		question, _ = task["problem"].(string)
	}
	if question == "" {
		return workflow.Fail(ep, ctx, usererr.Errorf("solver_judge: task %s has no question (or problem) column to ask", taskName(task, episodeID)))
	}
	if err := reward.CheckCountdownTask(task); err != nil {
		return workflow.Fail(ep, ctx, usererr.Errorf("solver_judge: task %s is not a countdown task (%v); its rows need target and nums columns", taskName(task, episodeID), err))
	}

	cut := false
	defer func() {
		w.finish(ep, cut)
	}()
	candidates := make([]string, 0, w.p.NSolutions)
	for i := range w.p.NSolutions {
		st, ok, err := w.call(ctx, SolverPrompt(question))
		if err != nil {
			return workflow.Fail(ep, ctx, fmt.Errorf("solver %d: %w", i+1, err))
		}
		if !ok {
			ep.TerminationReason = episode.TerminationMaxPromptLength
			return ep, nil
		}
		action := SolverAction(st.ModelResponse)
		res := w.reward.Grade(task, action)
		st.Action = episode.Action{Content: action}
		st.Reward, st.Done = res.Reward, true
		st.Info = map[string]any{"is_correct": res.IsCorrect}
		cut = cut || st.FinishReason == "length"
		candidates = append(candidates, action)
		ep.Trajectories = append(ep.Trajectories, episode.Trajectory{
			ID: fmt.Sprintf("%s/%s%d", episodeID, RoleSolver, i), Name: RoleSolver, Task: task,
			Steps: []episode.Step{*st}, Reward: res.Reward,
		})
	}

	st, ok, err := w.call(ctx, JudgePrompt(question, candidates))
	if err != nil {
		return workflow.Fail(ep, ctx, fmt.Errorf("judge: %w", err))
	}
	if !ok {
		ep.TerminationReason = episode.TerminationMaxPromptLength
		return ep, nil
	}
	choice := JudgeChoice(st.ModelResponse, len(candidates))
	picked := ""
	if choice > 0 {
		picked = candidates[choice-1]
	}
	res := w.reward.Grade(task, picked)
	st.Action = episode.Action{Content: picked, Fields: map[string]any{"choice": choice}}
	st.Reward, st.Done = res.Reward, true
	st.Info = map[string]any{"is_correct": res.IsCorrect, "choice": choice}
	cut = cut || st.FinishReason == "length"
	ep.Trajectories = append(ep.Trajectories, episode.Trajectory{
		ID: episodeID + "/" + RoleJudge, Name: RoleJudge, Task: task,
		Steps: []episode.Step{*st}, Reward: res.Reward,
	})
	ep.IsCorrect = res.IsCorrect
	ep.TerminationReason = episode.TerminationEnvDone
	return ep, nil
}

// call asks the model one question. ok is false when the prompt does not
// fit the model (the episode then ends with max_prompt_length_exceeded).
func (w *Workflow) call(ctx context.Context, prompt string) (*episode.Step, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	msgs := []episode.Message{{Role: "user", Content: prompt}}
	resp, err := w.deps.Sampler.Sample(ctx, sampler.Request{
		Messages: msgs, Params: w.deps.Params, ChatTemplateKwargs: w.deps.ChatTemplateKwargs,
	})
	if errors.Is(err, sampler.ErrPromptTooLong) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	st := &episode.Step{
		ChatCompletions: append(msgs, episode.Message{Role: "assistant", Content: resp.Text, Reasoning: resp.Reasoning}),
		Observation:     prompt,
		Thought:         resp.Reasoning,
		ModelResponse:   resp.Text,
	}
	workflow.RecordSample(st, resp)
	return st, true, nil
}

// finish sets the returns, the termination of an episode whose reply was
// cut, and the metrics: solver_acc (the mean solver reward) and
// judge_acc, as rLLM reports them.
func (w *Workflow) finish(ep *episode.Episode, cut bool) {
	if cut && ep.TerminationReason == episode.TerminationEnvDone {
		ep.TerminationReason = episode.TerminationMaxResponseLength
	}
	if ep.TerminationReason == episode.TerminationError || ep.TerminationReason == episode.TerminationTimeout {
		ep.IsCorrect = false
	}
	solvers, solved := 0, 0.0
	for i := range ep.Trajectories {
		tr := &ep.Trajectories[i]
		for j := range tr.Steps {
			tr.Steps[j].MCReturn = tr.Steps[j].Reward // one step: its return is its reward
		}
		if tr.Name == RoleSolver {
			solvers++
			solved += tr.Reward
		}
	}
	if solvers > 0 {
		ep.Metrics["solver_acc"] = solved / float64(solvers)
	}
	if ep.TerminationReason == episode.TerminationEnvDone || ep.TerminationReason == episode.TerminationMaxResponseLength {
		ep.Metrics["judge_acc"] = 0
		if ep.IsCorrect {
			ep.Metrics["judge_acc"] = 1
		}
	}
	ep.Metrics["steps"] = float64(len(ep.Trajectories))
}

func taskName(task episode.Task, episodeID string) string {
	if id, ok := task["id"]; ok {
		return fmt.Sprint(id)
	}
	return episodeID
}

// FormatExample writes a warm-up reply for a solver_judge prompt
// (backend.local.warmup_steps): to a judge prompt, the number of a
// random candidate in <answer> </answer>; to a solver prompt, countdown's
// format example (solver, given), so the embedded policy starts RL
// knowing both roles' answer formats and neither role's answers.
func FormatExample(solver func(string, *rand.Rand) string) func(string, *rand.Rand) string {
	return func(prompt string, rng *rand.Rand) string {
		i := strings.LastIndex(prompt, judgeHeader)
		if i < 0 {
			return solver(prompt, rng)
		}
		n := strings.Count(prompt[i:], "\nSolution ")
		return fmt.Sprintf("<answer>%d</answer>", 1+rng.IntN(max(n, 1)))
	}
}
