package harbor

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
)

// CheckResult is what checking one task found: Problem is empty for a
// task whose oracle scores 1 and whose untouched container scores 0.
type CheckResult struct {
	Task           *Task
	OracleReward   float64
	NullReward     float64
	Problem        string
	OracleSeconds  float64
	NullSeconds    float64
	ImageSeconds   float64
	VerifierOutput string
}

// OK reports a task that passed.
func (c CheckResult) OK() bool { return c.Problem == "" }

// Check runs the oracle (solution/solve.sh, then the verifier: the reward
// must be 1) and the null agent (nothing done, then the verifier: the
// reward must be 0) of every task, parallel tasks at once, each in fresh
// containers removed afterwards. An error is the engine failing or ctx
// ending; a broken task is a CheckResult with its Problem.
func Check(ctx context.Context, e *Engine, tasks []*Task, parallel int) ([]CheckResult, error) {
	out := make([]CheckResult, len(tasks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for i, t := range tasks {
		g.Go(func() error {
			r, err := checkOne(gctx, e, t)
			out[i] = r
			return err
		})
	}
	return out, g.Wait()
}

func checkOne(ctx context.Context, e *Engine, t *Task) (CheckResult, error) {
	res := CheckResult{Task: t}
	began := time.Now()
	if _, err := e.Image(ctx, t); err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		res.Problem = err.Error()
		return res, nil
	}
	res.ImageSeconds = time.Since(began).Seconds()
	if !t.HasSolution {
		res.Problem = fmt.Sprintf("has no %s, so its oracle cannot be run; write the solution there", SolveScript)
		return res, nil
	}
	// The oracle.
	began = time.Now()
	v, oracleRun, err := e.episode(ctx, t, true)
	res.OracleSeconds = time.Since(began).Seconds()
	if err != nil {
		return res, err
	}
	res.OracleReward = v.Reward
	res.VerifierOutput, _ = v.Info["verifier_output"].(string)
	switch {
	case oracleRun != "":
		res.Problem = oracleRun
		return res, nil
	case v.Info["reward_error"] != nil:
		res.Problem = fmt.Sprintf("after its oracle (%s): %v", SolveScript, v.Info["reward_error"])
		return res, nil
	case v.Reward != 1:
		res.Problem = fmt.Sprintf("its oracle (%s) scores %g, not 1: the solution or the verifier is wrong%s", SolveScript, v.Reward, lastLines(res.VerifierOutput))
		return res, nil
	}
	// The null agent.
	began = time.Now()
	v, _, err = e.episode(ctx, t, false)
	res.NullSeconds = time.Since(began).Seconds()
	if err != nil {
		return res, err
	}
	res.NullReward = v.Reward
	switch {
	case v.Info["reward_error"] != nil:
		res.Problem = fmt.Sprintf("with nothing done (the null agent): %v", v.Info["reward_error"])
	case v.Reward != 0:
		res.Problem = fmt.Sprintf("scores %g with nothing done (the null agent), not 0: the verifier passes an untouched container", v.Reward)
	}
	return res, nil
}

// episode opens a container of t, runs the oracle when oracle is set,
// then the verifier, and removes the container. oracleProblem says why
// the oracle itself failed.
func (e *Engine) episode(ctx context.Context, t *Task, oracle bool) (v Verdict, oracleProblem string, err error) {
	run, err := e.Open(ctx, t)
	if err != nil {
		if ctx.Err() != nil {
			return v, "", ctx.Err()
		}
		return v, err.Error(), nil
	}
	defer run.Close()
	if oracle {
		res, err := run.Oracle(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return v, "", ctx.Err()
			}
			return v, fmt.Sprintf("its oracle (%s) could not run: %v", SolveScript, err), nil
		}
		if !res.OK() {
			return v, fmt.Sprintf("its oracle (%s) failed: %s", SolveScript, res.Reason()), nil
		}
	}
	v, err = run.Verify(ctx)
	return v, "", err
}

func lastLines(s string) string {
	if s == "" {
		return ""
	}
	return "; the verifier's output ends: " + clip(lastLine(s), 200)
}

func lastLine(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			return s[i+1:]
		}
	}
	return s
}
