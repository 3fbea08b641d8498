package code

import (
	"context"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

// batchable reports whether tests can run in one session: all stdin
// tests, all function tests of one function, or all assert-style tests,
// in a language with a harness.
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

// gradeBatch runs the tests in as few sessions as it can: the sandboxes
// are set up once per session and each test is a process forked from a
// harness's warm interpreter, bounded by its own timeout. A session is
// bounded by the pool's wall time; when it is cut short (or its harness
// was killed) the tests it finished are kept and the rest go to the
// next session; a test that was the first of its session fails with the
// run's reason.
func gradeBatch(ctx context.Context, r sandbox.Runner, code string, tests []Test, o GradeOptions, limits sandbox.Limits) (Outcome, error) {
	out := Outcome{Total: len(tests)}
	per := harnessTimeout(o, limits)
	var spent time.Duration
	for start := 0; start < len(tests); {
		if o.TotalTimeout > 0 && spent >= o.TotalTimeout {
			out.fail(start, tests[start], "", "total time limit exceeded (env.args.total_timeout_s)", o.DebugChars)
			return out, nil
		}
		n, stop, err := gradeSession(ctx, r, code, tests, start, o, limits, per, &out, &spent)
		if err != nil || stop {
			return out, err
		}
		start += n
	}
	return out, nil
}

// gradeSession runs tests[start:] in one session until one fails (but
// with o.All) or the session ends; it returns how many it graded and
// whether grading stops.
func gradeSession(ctx context.Context, r sandbox.Runner, code string, tests []Test, start int, o GradeOptions, limits sandbox.Limits, per time.Duration, out *Outcome, spent *time.Duration) (int, bool, error) {
	rest := tests[start:]
	n, stop := 0, false
	runs := 1
	if rest[0].Kind == Program {
		runs = 2 // the reply's harness and the judge, which talk while they run
	}
	err := together(ctx, r, runs, func(r sandbox.Runner) error {
		s, err := openSession(ctx, r, code, rest, o, limits, per)
		if err != nil {
			return err
		}
		for i, t := range rest {
			if o.TotalTimeout > 0 && *spent >= o.TotalTimeout {
				break
			}
			end := s.run(i, t)
			*spent += end.took
			if !end.finished {
				if i > 0 {
					break // the rest in a new session
				}
				s.broken = true
				if cerr := s.close(); cerr != nil {
					return cerr
				}
				end = testEnd{reason: s.runReason(), finished: true}
			}
			n++
			out.Run++
			if end.reason == "" {
				out.Passed++
			} else {
				out.fail(start+i, t, end.got, end.reason, o.DebugChars)
				if !o.All {
					stop = true
					break
				}
			}
			if s.broken {
				break
			}
		}
		return s.close()
	})
	return n, stop, err
}

// together calls f with a runner on which n runs can run at once: the
// pool's slots taken together (sandbox.Pool.Together), or r itself.
func together(ctx context.Context, r sandbox.Runner, n int, f func(sandbox.Runner) error) error {
	if t, ok := r.(interface {
		Together(context.Context, int, func(sandbox.Runner) error) error
	}); ok && n > 1 {
		return t.Together(ctx, n, f)
	}
	return f(r)
}

// harnessTimeout is a test's timeout in the harness: it must fit in a
// run with room to start the sandbox.
func harnessTimeout(o GradeOptions, limits sandbox.Limits) time.Duration {
	if per := min(o.TestTimeout, limits.WallTime-time.Second); per > 0 {
		return per
	}
	return o.TestTimeout
}
