package code

import (
	"context"
	"fmt"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

// Language is how the sandbox runs a program in one language.
type Language struct {
	// File is the program's file name in the work directory.
	File string
	// Run is the argv that runs File.
	Run []string
	// Prelude runs before assert-style tests, in the judge, and before
	// the program they test (rLLM's BASE_IMPORTS, in short).
	Prelude string
	// Harness says whether harness.py runs the language's programs: it
	// runs function and assert-style tests (always) and batches of
	// tests (env.args.batch).
	Harness bool
}

// Languages are the env.args.language values. The sandbox runs what the
// host's /usr (or the docker image) has: python3 for python.
var Languages = map[string]Language{
	"python": {
		File: "solution.py", Run: []string{"python3", "solution.py"}, Harness: true,
		Prelude: "from typing import *\nimport math, re, sys, collections, itertools, functools, heapq, bisect, string\nfrom collections import *\n",
	},
}

// LanguageNames lists Languages' keys.
func LanguageNames() []string { return []string{"python"} }

// GradeOptions shape one grading.
type GradeOptions struct {
	Language Language
	// TestTimeout bounds each test (wall time; CPU time too).
	TestTimeout time.Duration
	// TotalTimeout bounds the whole grading; tests not run by then fail.
	TotalTimeout time.Duration
	// All runs every test (partial credit) instead of stopping at the
	// first failure as rLLM does.
	All bool
	// DebugChars bounds the input, expected and got kept of a failure.
	DebugChars int
	// Batch runs a reply's tests of one kind in one session (see
	// gradeBatch) rather than one a test; Limits are the pool's limits.
	Batch  bool
	Limits sandbox.Limits
	// Isolated says the runner's sandboxes have their own PID namespace
	// (bwrap, docker): the reply's harness then kills the processes, and
	// removes the files, a test left before the next test.
	Isolated bool
}

// Failure is the first failed test, for debugging from the episode.
type Failure struct {
	Index    int    `json:"index"`
	Kind     Kind   `json:"kind"`
	Input    string `json:"input"`
	Expected string `json:"expected,omitempty"`
	Got      string `json:"got"`
	Reason   string `json:"reason"`
}

// Outcome is a grading's result.
type Outcome struct {
	Passed int `json:"passed"`
	// Run counts the tests attempted (rLLM's total_tests); Total all.
	Run     int      `json:"run"`
	Total   int      `json:"total"`
	Failure *Failure `json:"first_failure,omitempty"`
}

// Grade runs code against tests in the sandbox. A program that fails is
// an Outcome; an error is the sandbox failing (or ctx ending). The total
// timeout counts the time tests ran, not the time they waited for a
// sandbox slot, so a busy pool does not fail a reply.
func Grade(ctx context.Context, r sandbox.Runner, code string, tests []Test, o GradeOptions) (Outcome, error) {
	if o.Batch && batchable(tests, o.Language) {
		return gradeBatch(ctx, r, code, tests, o, o.Limits.OrDefaults())
	}
	out := Outcome{Total: len(tests)}
	var spent time.Duration
	for i, t := range tests {
		per := o.TestTimeout
		if o.TotalTimeout > 0 {
			left := o.TotalTimeout - spent
			if left <= 0 {
				out.fail(i, t, "", "total time limit exceeded (env.args.total_timeout_s)", o.DebugChars)
				break
			}
			per = min(per, left)
		}
		got, reason, took, err := runTest(ctx, r, code, t, o, per)
		if err != nil {
			return out, err
		}
		spent += took
		out.Run++
		if reason == "" {
			out.Passed++
			continue
		}
		out.fail(i, t, got, reason, o.DebugChars)
		if !o.All {
			break
		}
	}
	return out, nil
}

func (o *Outcome) fail(i int, t Test, got, reason string, n int) {
	if o.Failure != nil {
		return
	}
	if n <= 0 {
		n = 200
	}
	f := &Failure{Index: i, Kind: t.Kind, Input: clip(t.Show(), n), Got: clip(got, n), Reason: clip(reason, n)}
	if t.Kind != Program {
		f.Expected = clip(t.Expected, n)
	}
	o.Failure = f
}

// runTest runs one test; reason is empty when it passed. A stdin test
// runs the program itself; a function or assert-style test runs in a
// session of its own (the reply's harness, and the judge).
func runTest(ctx context.Context, r sandbox.Runner, code string, t Test, o GradeOptions, timeout time.Duration) (got, reason string, took time.Duration, err error) {
	switch t.Kind {
	case Stdin:
	case Function, Program:
		if !o.Language.Harness {
			return "", "", 0, fmt.Errorf("%s tests need a language with a test harness", t.Kind)
		}
		limits := o.Limits.OrDefaults()
		var out Outcome
		o.DebugChars = 1 << 30 // Grade cuts them
		if _, _, err := gradeSession(ctx, r, code, []Test{t}, 0, o, limits, min(timeout, harnessTimeout(o, limits)), &out, &took); err != nil {
			return "", "", 0, err
		}
		if f := out.Failure; f != nil {
			return f.Got, f.Reason, took, nil
		}
		return "", "", took, nil
	default:
		return "", "", 0, fmt.Errorf("unknown test kind %q", t.Kind)
	}
	res, err := r.Run(ctx, sandbox.Request{Command: o.Language.Run, Files: map[string][]byte{o.Language.File: []byte(code)},
		Stdin: []byte(t.Input), Limits: sandbox.Limits{WallTime: timeout, CPUTime: timeout}})
	if err != nil {
		return "", "", 0, err
	}
	got, reason = checkResult(t, res)
	return got, reason, res.Time, nil
}

// checkResult judges a stdin test's run: its limit or exit status, then
// its output against the expected one.
func checkResult(t Test, res sandbox.Result) (got, reason string) {
	out := string(res.Stdout)
	if res.Limit != sandbox.LimitNone || res.ExitCode != 0 {
		return out, res.Reason()
	}
	if !OutputsMatch(out, t.Expected) {
		return out, "wrong answer"
	}
	return "", ""
}
