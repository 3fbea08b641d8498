package code

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/json"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

//go:embed harness.py
var harnessPy []byte

// tokensFile is the request file holding one token a test (see
// harness.py); the harness removes it before any test runs.
const tokensFile = ".rllm-tokens"

// batchable reports whether tests can run in one sandbox through the
// harness: all stdin tests, all function tests of one function, or all
// assert-style tests, in a language with a harness.
func batchable(tests []Test, lang Language) bool {
	if !lang.Harness || len(tests) < 2 {
		return false
	}
	k, fn := tests[0].Kind, tests[0].FnName
	for _, t := range tests[1:] {
		if t.Kind != k || t.FnName != fn {
			return false
		}
	}
	return true
}

// harnessSpec is tests.json, read by harness.py.
type harnessSpec struct {
	Kind        Kind    `json:"kind"`
	Fn          string  `json:"fn"`
	Marker      string  `json:"marker"`
	Prelude     string  `json:"prelude"`
	TimeoutS    float64 `json:"timeout_s"`
	CPUS        int64   `json:"cpu_s"`
	OutCap      int64   `json:"out_cap"`
	StopOnError bool    `json:"stop_on_error"`
	// Isolated: the sandbox has its own PID namespace, so the harness
	// kills every other process of it after each test.
	Isolated bool `json:"isolated"`
	// Inputs are each test's stdin, function arguments (one JSON value
	// a line) or test code (assert-style).
	Inputs []string `json:"inputs"`
}

// harnessResult is one test's entry in the harness's output.
type harnessResult struct {
	Took    float64 `json:"took"`
	Out     string  `json:"out"`
	Err     string  `json:"err"`
	Exit    int     `json:"exit"`
	Over    bool    `json:"over"`
	Timeout bool    `json:"timeout"`
	// CPU is the CPU seconds the test's process used (a SIGKILL at the
	// CPU rlimit is a CPU time limit, not a crash).
	CPU float64 `json:"cpu"`
	// Seal is the test's token, written by the harness: a line without
	// it was not.
	Seal string `json:"seal"`
	// Proof is what the test's process wrote to the proof pipe: the
	// token when the test ran to its end.
	Proof string `json:"proof"`
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
	per := harnessTimeout(o, limits)
	var spent time.Duration
	for start := 0; start < len(tests); {
		if o.TotalTimeout > 0 && spent >= o.TotalTimeout {
			out.fail(start, tests[start], "", "total time limit exceeded (env.args.total_timeout_s)", o.DebugChars)
			return out, nil
		}
		rest := tests[start:]
		results, tokens, res, err := runHarness(ctx, r, code, rest, o, limits, per)
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
				got, reason, took, err = runTest(ctx, r, code, t, o, per)
				if err != nil {
					return out, err
				}
				spent += took
			} else {
				got, reason = judge(t, hr, tokens[i], limits, per)
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

// harnessTimeout is a test's timeout in the harness: it must fit in a
// run with room to start the sandbox.
func harnessTimeout(o GradeOptions, limits sandbox.Limits) time.Duration {
	if per := min(o.TestTimeout, limits.WallTime-time.Second); per > 0 {
		return per
	}
	return o.TestTimeout
}

// runHarness runs harness.py once over tests and returns the results of
// the tests it finished, in order, with each test's token.
func runHarness(ctx context.Context, r sandbox.Runner, code string, tests []Test, o GradeOptions, limits sandbox.Limits, per time.Duration) ([]harnessResult, []string, sandbox.Result, error) {
	// Each result is its output and a stderr tail, JSON-escaped (up to
	// 6 bytes a byte); all of them must fit the run's output limit.
	outCap := (limits.OutputBytes*9/10/int64(len(tests)) - 6*256 - 200) / 6
	outCap = max(outCap, 256)
	spec := harnessSpec{Kind: tests[0].Kind, Fn: tests[0].FnName, Marker: marker, Prelude: o.Language.Prelude, TimeoutS: per.Seconds(),
		CPUS: int64((per + time.Second - 1) / time.Second), OutCap: outCap, StopOnError: !o.All, Isolated: o.Isolated}
	tokens := make([]string, len(tests))
	var tok strings.Builder
	for i, t := range tests {
		switch t.Kind {
		case Function:
			spec.Inputs = append(spec.Inputs, argsText(t))
		case Program:
			spec.Inputs = append(spec.Inputs, t.Script)
		default:
			spec.Inputs = append(spec.Inputs, t.Input)
		}
		tokens[i] = rand.Text()
		tok.WriteString(tokens[i] + "\n")
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, sandbox.Result{}, err
	}
	res, err := r.Run(ctx, sandbox.Request{
		Command: []string{"python3", "harness.py"},
		Files: map[string][]byte{o.Language.File: []byte(code), "harness.py": harnessPy, "tests.json": js,
			tokensFile: []byte(tok.String())},
	})
	if err != nil {
		return nil, nil, res, err
	}
	var results []harnessResult
	for line := range strings.SplitSeq(string(res.Stdout), "\n") {
		var hr harnessResult
		if line == "" || json.Unmarshal([]byte(line), &hr) != nil || hr.Seal != tokens[len(results)] {
			// A line cut by the end of the run, or one the harness did
			// not write (a program can reach the sandbox's stdout).
			continue
		}
		results = append(results, hr)
		if len(results) == len(tests) {
			break
		}
	}
	return results, tokens, res, nil
}

// judge turns a harness result into got and a failure reason. A function
// or assert-style test passes only when its process wrote its token,
// which only the code after the test's last statement does.
func judge(t Test, hr harnessResult, token string, limits sandbox.Limits, per time.Duration) (got, reason string) {
	res := sandbox.Result{ExitCode: hr.Exit, Stdout: []byte(hr.Out), Stderr: []byte(hr.Err)}
	if hr.Timeout {
		res.Limit, res.ExitCode = sandbox.LimitWallTime, 137
	} else {
		l := limits
		l.CPUTime = per
		sandbox.Classify(&res, time.Duration(hr.CPU*float64(time.Second)), l)
	}
	if res.OK() && t.Kind != Stdin && hr.Proof != token {
		return string(res.Stdout), notFinished
	}
	return checkResult(t, res)
}

// notFinished is the reason of a test whose process ended well before
// its last statement ran (os._exit(0), sys.exit(0) and the like).
const notFinished = "the test did not run to its end (the program exited before the test's last statement)"

// argsText is a function test's arguments, one JSON value a line.
func argsText(t Test) string {
	var b strings.Builder
	for _, a := range t.Args {
		b.Write(a)
		b.WriteByte('\n')
	}
	return b.String()
}
