package code

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Instruction is the code agent's default instruction, appended to the
// question.
const Instruction = "Write your complete solution as a Python program in one ```python code block."

func init() {
	agent.RegisterPrompt("code", "asks the task's question (question, problem, prompt or question_content) and asks for the program in a fenced code block", agent.PromptParams{Instruction: Instruction})
	env.Register(env.Definition{
		Name:        "code",
		Description: "single turn: runs the reply's last fenced code block in the sandbox (sandbox.*) against ground_truth's tests; 1 when all pass",
		Params:      Params{},
		Validate:    validate,
		New: func(task episode.Task, args registry.Values) (env.Env, error) {
			return New(task, registry.As[Params](args))
		},
	})
	env.MarkSingleTurn("code")
}

// Params are the code env's arguments (env.args).
type Params struct {
	Language      string  `arg:"language" default:"python" task:"true" doc:"language of the reply's program: python (run with the sandbox's python3)"`
	Partial       bool    `arg:"partial" default:"false" doc:"reward the fraction of tests passed instead of 1 only when all pass (rLLM's default)"`
	TimeoutS      float64 `arg:"timeout_s" default:"6" range:"(0,600]" doc:"wall and CPU seconds of each test (rLLM's LiveCodeBench runner: 6)"`
	TotalTimeoutS float64 `arg:"total_timeout_s" default:"0" range:"[0,86400]" doc:"seconds for all of a reply's tests; tests not run by then fail (0: timeout_s × tests + 5, rLLM's bound)"`
	Batch         bool    `arg:"batch" default:"true" doc:"run a reply's tests of one kind (stdin, function, assert-style) in one sandbox run, each test a process forked from a warm interpreter, instead of one sandbox per test"`
	DebugChars    int     `arg:"debug_chars" default:"200" range:"[1,100000]" doc:"characters of the first failing test's input, expected and got output kept in the episode"`
}

func validate(v registry.Values) error {
	p := registry.As[Params](v)
	if _, ok := Languages[p.Language]; !ok {
		return &usererr.Error{Subject: "env.args.language", Msg: fmt.Sprintf("%q is not a language the code env runs; use one of: %s", p.Language, strings.Join(LanguageNames(), ", "))}
	}
	// A code task never starts without a sandbox to run replies in.
	_, err := sandbox.Shared(context.Background())
	return err
}

// Env is one code episode.
type Env struct {
	Task   episode.Task
	Tests  []Test
	Params Params
	Runner sandbox.Runner
	// Limits are the runner's limits (the pool's).
	Limits sandbox.Limits
	// Isolated: the runner's sandboxes have their own PID namespace
	// (every backend but unsafe-host).
	Isolated bool
	lang     Language
}

// New builds the env of one task: its tests are read now, so a
// malformed row fails before any sampling.
func New(task episode.Task, p Params) (*Env, error) {
	lang, ok := Languages[p.Language]
	if !ok {
		return nil, taskErr(task, "asks for language %q, which the code env cannot run; use one of: %s", p.Language, strings.Join(LanguageNames(), ", "))
	}
	tests, err := ParseTests(task)
	if err != nil {
		return nil, err
	}
	pool, err := sandbox.Shared(context.Background())
	if err != nil {
		return nil, err
	}
	return &Env{Task: task, Tests: tests, Params: p, Runner: pool, Limits: pool.Limits(), Isolated: pool.Backend() != sandbox.BackendUnsafeHost, lang: lang}, nil
}

// Reset shows the question.
func (e *Env) Reset(context.Context) (any, map[string]any, error) {
	return map[string]any{"question": question(e.Task)}, nil, nil
}

// Step grades the reply's last code block.
func (e *Env) Step(ctx context.Context, action episode.Action) (env.StepResult, error) {
	res := env.StepResult{Observation: map[string]any{}, Done: true, Info: map[string]any{"is_correct": false}}
	code, _, ok := Extract(action.Content)
	if !ok {
		res.Info["format_error"] = "the reply has no fenced code block (```python ... ```)"
		return res, nil
	}
	out, err := Grade(ctx, e.Runner, code, e.Tests, e.options())
	if err != nil {
		return res, fmt.Errorf("%s: %w", taskName(e.Task), err)
	}
	res.Info["tests_passed"] = out.Passed
	res.Info["tests_run"] = out.Run
	res.Info["tests_total"] = out.Total
	if out.Failure != nil {
		f := out.Failure
		res.Info["first_failure"] = map[string]any{"index": f.Index, "kind": string(f.Kind), "input": f.Input,
			"expected": f.Expected, "got": f.Got, "reason": f.Reason}
	}
	allPass := out.Passed == out.Total
	res.Info["is_correct"] = allPass
	switch {
	case allPass:
		res.Reward = 1
	case e.Params.Partial:
		res.Reward = float64(out.Passed) / float64(out.Total)
	}
	return res, nil
}

func (e *Env) options() GradeOptions {
	per := time.Duration(e.Params.TimeoutS * float64(time.Second))
	total := time.Duration(e.Params.TotalTimeoutS * float64(time.Second))
	if total <= 0 {
		total = per*time.Duration(len(e.Tests)) + 5*time.Second
	}
	return GradeOptions{Language: e.lang, TestTimeout: per, TotalTimeout: total, All: e.Params.Partial, DebugChars: e.Params.DebugChars,
		Batch: e.Params.Batch, Limits: e.Limits, Isolated: e.Isolated}
}

// Close does nothing: the sandbox pool is shared.
func (e *Env) Close() error { return nil }
