package code

import (
	"context"
	_ "embed"
	"encoding/json"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

//go:embed harness.py
var harnessPy []byte

// batchable reports whether tests can run in one sandbox through the
// harness: all stdin tests, or all function tests of one function, in a
// language with a harness.
func batchable(tests []Test, lang Language) bool {
	if !lang.Harness || len(tests) < 2 {
		return false
	}
	k, fn := tests[0].Kind, tests[0].FnName
	if k != Stdin && k != Function {
		return false
	}
	for _, t := range tests[1:] {
		if t.Kind != k || t.FnName != fn {
			return false
		}
	}
	return true
}

// harnessSpec is tests.json, read by harness.py.
type harnessSpec struct {
	Kind        Kind     `json:"kind"`
	Fn          string   `json:"fn"`
	Marker      string   `json:"marker"`
	TimeoutS    float64  `json:"timeout_s"`
	CPUS        int64    `json:"cpu_s"`
	OutCap      int64    `json:"out_cap"`
	StopOnError bool     `json:"stop_on_error"`
	Inputs      []string `json:"inputs"`
}

// harnessResult is one test's entry in the harness's output.
type harnessResult struct {
	Took    float64 `json:"took"`
	Out     string  `json:"out"`
	Err     string  `json:"err"`
	Exit    int     `json:"exit"`
	Over    bool    `json:"over"`
	Timeout bool    `json:"timeout"`
}

// gradeBatch runs the tests in as few sandbox runs as it can: the
// sandbox is set up once per run and each test is a process forked from
// the harness's warm interpreter, bounded by its own timeout. A run is
// bounded by the pool's wall time; when it is cut short the tests it
// finished are kept and the rest go to the next run. A test whose output
// overflows its share of the run's output limit is run again alone
// (runTest) with the whole limit.
func gradeBatch(ctx context.Context, r sandbox.Runner, code string, tests []Test, o GradeOptions, limits sandbox.Limits) (Outcome, error) {
	out := Outcome{Total: len(tests)}
	// A test must fit in a run with room to start the sandbox.
	per := min(o.TestTimeout, limits.WallTime-time.Second)
	if per <= 0 {
		per = o.TestTimeout
	}
	var spent time.Duration
	for start := 0; start < len(tests); {
		if o.TotalTimeout > 0 && spent >= o.TotalTimeout {
			out.fail(start, tests[start], "", "total time limit exceeded (env.args.total_timeout_s)", o.DebugChars)
			return out, nil
		}
		rest := tests[start:]
		results, res, err := runHarness(ctx, r, code, rest, o, limits, per)
		if err != nil {
			return out, err
		}
		if len(results) == 0 {
			// No test ended: a program that broke the harness (killed it,
			// filled its output) or starved it.
			reason := res.Reason()
			if reason == "" {
				reason = "the program broke the test harness"
			}
			out.Run++
			out.fail(start, rest[0], "", reason, o.DebugChars)
			return out, nil
		}
		for i, hr := range results {
			t := rest[i]
			spent += time.Duration(hr.Took * float64(time.Second))
			var got, reason string
			if hr.Over && !hr.Timeout {
				// Too long for its share: run it alone with the whole limit.
				var took time.Duration
				got, reason, took, err = runTest(ctx, r, code, t, o.Language, per)
				if err != nil {
					return out, err
				}
				spent += took
			} else {
				got, reason = judge(t, hr, limits, per)
			}
			out.Run++
			if reason == "" {
				out.Passed++
				continue
			}
			out.fail(start+i, t, got, reason, o.DebugChars)
			if !o.All {
				return out, nil
			}
		}
		start += len(results)
		if start < len(tests) && res.Limit == sandbox.LimitNone && res.ExitCode == 0 && o.All {
			// The harness ended by itself before the last test (a fork
			// that failed): what it reported is all there is.
			out.fail(start, tests[start], "", "the test harness stopped early", o.DebugChars)
			return out, nil
		}
	}
	return out, nil
}

// runHarness runs harness.py once over tests and returns the results of
// the tests it finished, in order.
func runHarness(ctx context.Context, r sandbox.Runner, code string, tests []Test, o GradeOptions, limits sandbox.Limits, per time.Duration) ([]harnessResult, sandbox.Result, error) {
	// Each result is its output and a stderr tail, JSON-escaped (up to
	// 6 bytes a byte); all of them must fit the run's output limit.
	outCap := (limits.OutputBytes*9/10/int64(len(tests)) - 6*256 - 200) / 6
	outCap = max(outCap, 256)
	spec := harnessSpec{Kind: tests[0].Kind, Fn: tests[0].FnName, Marker: marker, TimeoutS: per.Seconds(),
		CPUS: int64((per + time.Second - 1) / time.Second), OutCap: outCap, StopOnError: !o.All}
	for _, t := range tests {
		in := t.Input
		if t.Kind == Function {
			in = argsText(t)
		}
		spec.Inputs = append(spec.Inputs, in)
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, sandbox.Result{}, err
	}
	res, err := r.Run(ctx, sandbox.Request{
		Command: []string{"python3", "harness.py"},
		Files:   map[string][]byte{o.Language.File: []byte(code), "harness.py": harnessPy, "tests.json": js},
	})
	if err != nil {
		return nil, res, err
	}
	var results []harnessResult
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		var hr harnessResult
		if line == "" || json.Unmarshal([]byte(line), &hr) != nil {
			break // a line cut by the end of the run, or not the harness's
		}
		results = append(results, hr)
		if len(results) == len(tests) {
			break
		}
	}
	return results, res, nil
}

// judge turns a harness result into got and a failure reason.
func judge(t Test, hr harnessResult, limits sandbox.Limits, per time.Duration) (got, reason string) {
	res := sandbox.Result{ExitCode: hr.Exit, Stdout: []byte(hr.Out), Stderr: []byte(hr.Err)}
	if hr.Timeout {
		res.Limit, res.ExitCode = sandbox.LimitWallTime, 137
	} else {
		l := limits
		l.CPUTime = per
		sandbox.Classify(&res, 0, l)
	}
	return checkResult(t, res)
}

// argsText is a function test's arguments, one JSON value a line.
func argsText(t Test) string {
	var b strings.Builder
	for _, a := range t.Args {
		b.Write(a)
		b.WriteByte('\n')
	}
	return b.String()
}
