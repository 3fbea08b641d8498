package code

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

// The reply's harness, the judge and the messages between them
// (docs/code.md, "Reward hacking").
var (
	//go:embed harness.py
	harnessPy []byte
	//go:embed judge.py
	judgePy []byte
	//go:embed rllm_wire.py
	wirePy []byte
)

// wireFile is rllm_wire.py's name in both sandboxes.
const wireFile = "rllm_wire.py"

// graceTime is how long past a test's timeout rllm waits for a harness
// to report the test before it stops the harness (which then broke, or
// was stopped by the program): the harnesses enforce the timeout.
const graceTime = 5 * time.Second

// errPeerEnded is what writing to a harness that ended returns.
var errPeerEnded = errors.New("the harness ended")

// peer is one harness running in a sandbox, a conversation over its
// stdin and stdout.
type peer struct {
	in    *io.PipeWriter
	lines chan peerLine
	quit  chan struct{}
	done  chan struct{} // closed when the run ended; res and err are then set
	res   sandbox.Result
	err   error
}

// peerLine is one line a harness wrote, or why there is none: a line
// that breaks the protocol, or io.EOF at the end of its output.
type peerLine struct {
	m   map[string]any
	err error
}

// startPeer starts req with a stream; its lines longer than maxLine
// bytes break the protocol.
func startPeer(ctx context.Context, r sandbox.Runner, req sandbox.Request, maxLine int) *peer {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	req.Stream = &sandbox.Stream{In: inR, Out: outW}
	p := &peer{in: inW, lines: make(chan peerLine, 8), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		p.res, p.err = r.Run(ctx, req)
		outW.Close()
		inR.CloseWithError(errPeerEnded)
		close(p.done)
	}()
	go func() {
		br := bufio.NewReaderSize(outR, 64<<10)
		for {
			var pl peerLine
			line, err := readLine(br, maxLine)
			if err == nil {
				pl.m, err = decodeMsg(line)
			}
			pl.err = err
			select {
			case p.lines <- pl:
			case <-p.quit:
				err = io.EOF
			}
			if err != nil {
				_, _ = io.Copy(io.Discard, outR)
				return
			}
		}
	}()
	return p
}

func (p *peer) send(m any) error {
	_, err := p.in.Write(encodeMsg(m))
	return err
}

// stop ends the conversation (the harness reads the end of its stdin and
// exits) and waits for the run to end.
func (p *peer) stop() {
	p.in.Close()
	close(p.quit)
	<-p.done
}

// replyConfig is the first line the reply's harness reads.
type replyConfig struct {
	// Name is the program's __name__: "__main__" but for function tests.
	Name string `json:"name"`
	// Prelude runs before the program (assert-style tests).
	Prelude  string  `json:"prelude"`
	TimeoutS float64 `json:"timeout_s"`
	CPUS     int64   `json:"cpu_s"`
	// OutCap bounds a stdin test's output.
	OutCap int64 `json:"out_cap"`
	// Isolated: the sandbox has its own PID namespace, so the harness
	// kills what a test left there before the next.
	Isolated bool `json:"isolated"`
}

// judgeConfig is the first line the judge reads.
type judgeConfig struct {
	Prelude  string   `json:"prelude"`
	Tests    []string `json:"tests"`
	TimeoutS float64  `json:"timeout_s"`
	CPUS     int64    `json:"cpu_s"`
}

// gone is the reply's harness's report of a test's process once it ended
// and what it left was removed.
type gone struct {
	Took    float64 `json:"took"`
	CPU     float64 `json:"cpu"`
	Exit    int     `json:"exit"`
	Timeout bool    `json:"timeout"`
	Out     string  `json:"out"`
	Over    bool    `json:"over"`
	Err     string  `json:"err"`
	// Broke says why the harness stopped the process for what it wrote.
	Broke string `json:"broke"`
}

// judgeResult is the test's process's verdict; judgeDone the judge's
// report of that process once it ended.
type judgeResult struct {
	Result bool   `json:"result"`
	Why    string `json:"why"`
}

type judgeDone struct {
	Took    float64 `json:"took"`
	CPU     float64 `json:"cpu"`
	Exit    int     `json:"exit"`
	Timeout bool    `json:"timeout"`
	Err     string  `json:"err"`
}

// as decodes a checked message (or part of one) into v.
func as(m any, v any) error {
	b, err := json.Marshal(m)
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		return protocolErr("a malformed report: %v", err)
	}
	return nil
}

// session is one sandbox run of the reply's harness (and, for
// assert-style tests, one of the judge) over which tests run one after
// another.
type session struct {
	code   string
	kind   Kind
	per    time.Duration
	limits sandbox.Limits
	cancel context.CancelFunc
	reply  *peer
	judge  *peer
	// broken says the session can run no further test.
	broken bool
	closed bool
	err    error
}

// testEnd is how one test of a session ended.
type testEnd struct {
	got, reason string
	took        time.Duration
	// finished is false when the session ended before the test did (its
	// harness was killed, its run cut short): the test runs again in a
	// new session, or, first of its session, fails with the run's reason.
	finished bool
}

// openSession starts the harnesses for tests (all of one kind) on r.
func openSession(ctx context.Context, r sandbox.Runner, code string, tests []Test, o GradeOptions, limits sandbox.Limits, per time.Duration) (*session, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &session{code: code, kind: tests[0].Kind, per: per, limits: limits, cancel: cancel}
	cpu := int64((per + time.Second - 1) / time.Second)
	maxLine := int(8*limits.OutputBytes) + 1<<20
	cfg := replyConfig{Name: "__main__", TimeoutS: per.Seconds(), CPUS: cpu, OutCap: limits.OutputBytes, Isolated: o.Isolated}
	switch s.kind {
	case Function:
		cfg.Name = "solution"
	case Program:
		cfg.Prelude = o.Language.Prelude
	}
	s.reply = startPeer(ctx, r, sandbox.Request{Command: []string{"python3", "harness.py"},
		Files: map[string][]byte{o.Language.File: []byte(code), "harness.py": harnessPy, wireFile: wirePy}}, maxLine)
	if s.kind == Program {
		jc := judgeConfig{Prelude: o.Language.Prelude, TimeoutS: per.Seconds(), CPUS: cpu}
		for _, t := range tests {
			jc.Tests = append(jc.Tests, t.Script)
		}
		s.judge = startPeer(ctx, r, sandbox.Request{Command: []string{"python3", "judge.py"},
			Files: map[string][]byte{"judge.py": judgePy, wireFile: wirePy}}, maxLine)
		if err := s.judge.send(jc); err != nil {
			s.broken = true
		}
	}
	if err := s.reply.send(cfg); err != nil {
		s.broken = true
	}
	return s, nil
}

// close ends the harnesses (killing them when the session broke) and
// returns the runs' errors, but ctx's end, which closing causes.
func (s *session) close() error {
	if s.closed {
		return s.err
	}
	s.closed = true
	if s.broken {
		s.cancel()
	}
	var errs []error
	for _, p := range []*peer{s.reply, s.judge} {
		if p == nil {
			continue
		}
		p.stop()
		if p.err != nil && !errors.Is(p.err, context.Canceled) {
			errs = append(errs, p.err)
		}
	}
	s.cancel()
	s.err = errors.Join(errs...)
	return s.err
}

// runReason is why a session's runs ended before a test did: the limit
// or exit status of the run that ended first.
func (s *session) runReason() string {
	for _, p := range []*peer{s.reply, s.judge} {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
			if reason := p.res.Reason(); reason != "" {
				return reason
			}
		default:
		}
	}
	return "the program broke the test harness"
}

// run runs test i of the session (t).
func (s *session) run(i int, t Test) testEnd {
	if s.broken {
		return testEnd{}
	}
	start := time.Now()
	var end testEnd
	switch t.Kind {
	case Stdin:
		end = s.stdinTest(t, start)
	case Function:
		end = s.functionTest(t, start)
	default:
		end = s.programTest(i, t, start)
	}
	end.took = time.Since(start)
	if !end.finished {
		s.broken = true
	}
	return end
}

// result is the sandbox.Result of a test's process from its report.
func (s *session) result(g gone) sandbox.Result {
	res := sandbox.Result{ExitCode: g.Exit, Stdout: []byte(g.Out), Stderr: []byte(g.Err)}
	switch {
	case g.Timeout:
		res.Limit, res.ExitCode = sandbox.LimitWallTime, 137
	case g.Over:
		res.Limit, res.ExitCode = sandbox.LimitOutput, 137
	default:
		l := s.limits
		l.CPUTime = s.per
		sandbox.Classify(&res, time.Duration(g.CPU*float64(time.Second)), l)
	}
	return res
}

// goneReason is the reason of a test whose process ended before the test
// did.
func (s *session) goneReason(g gone) string {
	if g.Broke != "" {
		return "the program broke the test protocol: " + g.Broke
	}
	if res := s.result(g); !res.OK() {
		return res.Reason()
	}
	return notFinished
}

// notFinished is the reason of a test whose process exited (status 0)
// before the test ended (os._exit(0), sys.exit(0) and the like).
const notFinished = "the program exited before the test ended"

// brokeBy fails the test for a line that broke the protocol: the reply's
// (its process can write anything to its harness) or the judge's.
func (s *session) brokeBy(judge bool, err error) testEnd {
	s.broken = true
	if errors.Is(err, io.EOF) {
		return testEnd{} // the harness ended: the run's reason
	}
	if judge {
		return testEnd{reason: "the test harness failed: " + err.Error(), finished: true}
	}
	return testEnd{reason: "the program broke the test protocol: " + err.Error(), finished: true}
}

// timedOut fails a test whose harness did not report it in time.
func (s *session) timedOut() testEnd {
	s.broken = true
	return testEnd{reason: sandbox.Result{Limit: sandbox.LimitWallTime}.Reason(), finished: true}
}

// replyLine waits for the reply harness's next line until deadline.
func (s *session) replyLine(deadline time.Time) (peerLine, bool) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case pl := <-s.reply.lines:
		return pl, true
	case <-timer.C:
		return peerLine{}, false
	}
}

// waitGone waits for the reply harness's report of the test's process.
func (s *session) waitGone(deadline time.Time) (gone, *testEnd) {
	for {
		pl, ok := s.replyLine(deadline)
		if !ok {
			e := s.timedOut()
			return gone{}, &e
		}
		if pl.err != nil {
			e := s.brokeBy(false, pl.err)
			return gone{}, &e
		}
		if g, ok := pl.m["gone"]; ok {
			var r gone
			if err := as(g, &r); err != nil {
				e := s.brokeBy(false, err)
				return gone{}, &e
			}
			return r, nil
		}
		// Lines of a process that is ending (an answer nobody waits
		// for) are dropped; only its harness's report counts.
		if _, err := checkAnswer(pl.m); err != nil {
			e := s.brokeBy(false, err)
			return gone{}, &e
		}
	}
}

func (s *session) stdinTest(t Test, start time.Time) testEnd {
	if err := s.reply.send(map[string]any{"load": map[string]any{"stdin": t.Input}}); err != nil {
		return testEnd{}
	}
	g, e := s.waitGone(start.Add(s.per + graceTime))
	if e != nil {
		return *e
	}
	got, reason := checkResult(t, s.result(g))
	return testEnd{got: got, reason: reason, finished: true}
}

// functionTest calls the function with the test's arguments (rLLM's
// LiveCodeBench runner: Solution().f when the program has a class
// Solution, else the program's f) and compares its result with the
// expected one here: rllm is the test.
func (s *session) functionTest(t Test, start time.Time) testEnd {
	deadline := start.Add(s.per + graceTime)
	if err := s.reply.send(map[string]any{"load": map[string]any{"serve": true}}); err != nil {
		return testEnd{}
	}
	a := &asking{s: s, deadline: deadline}
	got, reason := a.function(t)
	if a.end != nil {
		return *a.end
	}
	if a.gone != nil {
		return testEnd{reason: s.goneReason(*a.gone), finished: true}
	}
	if err := s.reply.send(map[string]any{"end": true}); err != nil {
		return testEnd{}
	}
	if _, e := s.waitGone(deadline); e != nil {
		return *e
	}
	if reason != "" {
		return testEnd{reason: reason, finished: true}
	}
	var want any
	if decodeNumbers(t.Expected, &want) != nil || !pyEqual(got, want) {
		return testEnd{got: showJSON(got), reason: "wrong answer", finished: true}
	}
	return testEnd{finished: true}
}

// asking is rllm asking the reply's process, as a function test does.
// Once a request failed for the session (end) or the process ended
// (gone), every later request fails too.
type asking struct {
	s        *session
	deadline time.Time
	gone     *gone
	end      *testEnd
}

// function returns the function's result for t's arguments, or why
// there is none.
func (a *asking) function(t Test) (any, string) {
	names := []any{t.FnName}
	if strings.Contains(a.s.code, "class Solution") {
		names = append(names, "Solution")
	}
	v, reason := a.ask(map[string]any{"op": "names", "names": names})
	if reason != "" {
		return nil, reason
	}
	found := namesOf(v)
	fn, ok := found[t.FnName]
	if sol, isSol := found["Solution"]; isSol && handleOf(sol) != nil {
		obj, reason := a.ask(map[string]any{"op": "call", "h": handleOf(sol)})
		if reason != "" {
			return nil, reason
		}
		if handleOf(obj) == nil {
			return nil, "Solution() is not an object"
		}
		if fn, reason = a.ask(map[string]any{"op": "get", "h": handleOf(obj), "name": t.FnName}); reason != "" {
			return nil, reason
		}
		ok = true
	}
	if !ok {
		return nil, "the program defines no " + t.FnName
	}
	if handleOf(fn) == nil {
		return nil, t.FnName + " is not a function"
	}
	args := make([]any, len(t.Args))
	for i, raw := range t.Args {
		v, err := jsonArg(raw)
		if err != nil {
			return nil, "the test's argument is not JSON: " + err.Error()
		}
		args[i] = v
	}
	v, reason = a.ask(map[string]any{"op": "call", "h": handleOf(fn), "args": args})
	if reason != "" {
		return nil, reason
	}
	return resultJSON(v), ""
}

// ask sends one request and returns the value answered, or the reason
// it failed: the program raised, its process ended, the session broke.
func (a *asking) ask(req map[string]any) (any, string) {
	if a.end != nil || a.gone != nil {
		return nil, "the program's process ended"
	}
	if err := a.s.reply.send(req); err != nil {
		a.end = &testEnd{}
		return nil, "the test harness ended"
	}
	for {
		pl, ok := a.s.replyLine(a.deadline)
		if !ok {
			e := a.s.timedOut()
			a.end = &e
			return nil, e.reason
		}
		if pl.err != nil {
			e := a.s.brokeBy(false, pl.err)
			a.end = &e
			return nil, "the test harness ended"
		}
		if g, ok := pl.m["gone"]; ok {
			var r gone
			if err := as(g, &r); err != nil {
				e := a.s.brokeBy(false, err)
				a.end = &e
				return nil, e.reason
			}
			a.gone = &r
			return nil, "the program's process ended"
		}
		ans, err := checkAnswer(pl.m)
		if err != nil {
			// A request of the program's (rllm passed it no function to
			// call) or garbage.
			e := a.s.brokeBy(false, err)
			a.end = &e
			return nil, e.reason
		}
		if r, ok := ans["raise"].([]any); ok {
			return nil, fmt.Sprintf("the program raised %s: %s", r[0], r[1])
		}
		return ans["ret"], ""
	}
}

// namesOf reads the answer to a "names" request: a dict of name to value.
func namesOf(v any) map[string]any {
	out := map[string]any{}
	m, _ := v.(map[string]any)
	pairs, _ := m["d"].([]any)
	for _, p := range pairs {
		kv := p.([]any) // checked: pairs
		if k, ok := kv[0].(string); ok {
			out[k] = kv[1]
		}
	}
	return out
}

// handleOf is the number of a reply's handle ({"h": n}), nil for a
// plain value.
func handleOf(v any) any {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return nil
	}
	return m["h"]
}

// programTest runs assert-style test i in the judge: the test's process
// there calls the program's names, each call relayed to the reply's
// process and its answer back, checked and written again here; the judge
// alone says whether the test passed.
func (s *session) programTest(i int, t Test, start time.Time) testEnd {
	deadline := start.Add(s.per + graceTime)
	if s.reply.send(map[string]any{"load": map[string]any{"serve": true}}) != nil || s.judge.send(map[string]any{"test": i}) != nil {
		return testEnd{}
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	// waits holds, innermost last, who waits for an answer: true the
	// judge (for the reply's), false the reply (for the judge's, to a
	// request of the reply's: calling a function the test passed it).
	var waits []bool
	var g *gone
	var result *judgeResult
	var done *judgeDone
	goneFirst, endSent := false, false
	// settle answers the judge's innermost request when the reply's
	// process is gone: no answer will come.
	settle := func() error {
		for g != nil && len(waits) > 0 && waits[len(waits)-1] {
			waits = waits[:len(waits)-1]
			if err := s.judge.send(map[string]any{"dead": s.goneReason(*g)}); err != nil {
				return err
			}
		}
		return nil
	}
	for done == nil || g == nil {
		if done != nil && g == nil && !endSent {
			if s.reply.send(map[string]any{"end": true}) != nil {
				return testEnd{}
			}
			endSent = true
		}
		var pl peerLine
		fromJudge := false
		select {
		case pl = <-s.reply.lines:
		case pl = <-s.judge.lines:
			fromJudge = true
		case <-timer.C:
			return s.timedOut()
		}
		if pl.err != nil {
			return s.brokeBy(fromJudge, pl.err)
		}
		m := pl.m
		top := len(waits) > 0
		judgeWaits := top && waits[len(waits)-1]
		var err error
		switch {
		case fromJudge && has(m, "op"):
			var req map[string]any
			if req, err = checkRequest(m, false); err == nil && judgeWaits {
				err = protocolErr("a request while one waits")
			}
			if err == nil && g != nil {
				err = s.judge.send(map[string]any{"dead": s.goneReason(*g)})
			} else if err == nil {
				waits = append(waits, true)
				if s.reply.send(req) != nil {
					return testEnd{}
				}
			}
		case fromJudge && (has(m, "ret") || has(m, "raise")):
			var ans map[string]any
			if ans, err = checkAnswer(m); err == nil && (!top || judgeWaits) {
				err = protocolErr("an answer nobody asked for")
			}
			if err == nil {
				waits = waits[:len(waits)-1]
				if g == nil && s.reply.send(ans) != nil {
					return testEnd{}
				}
				err = settle()
			}
		case fromJudge && has(m, "result"):
			result = &judgeResult{}
			err = as(m, result)
		case fromJudge && has(m, "done"):
			done = &judgeDone{}
			err = as(m["done"], done)
		case fromJudge:
			err = protocolErr("a line of the judge's with keys %v", keys(m))
		case has(m, "gone"):
			g = &gone{}
			if err = as(m["gone"], g); err == nil {
				goneFirst = result == nil && done == nil
				err = settle()
			}
		case g != nil:
			err = protocolErr("a line after the process's end")
		case has(m, "op"):
			var req map[string]any
			if req, err = checkRequest(m, true); err == nil && !judgeWaits {
				err = protocolErr("a request nobody waits on")
			}
			if err == nil {
				waits = append(waits, false)
				if s.judge.send(req) != nil {
					return testEnd{}
				}
			}
		default:
			var ans map[string]any
			if ans, err = checkAnswer(m); err == nil && !judgeWaits {
				err = protocolErr("an answer nobody asked for")
			}
			if err == nil {
				waits = waits[:len(waits)-1]
				if s.judge.send(ans) != nil {
					return testEnd{}
				}
			}
		}
		if err != nil {
			return s.brokeBy(fromJudge, err)
		}
	}
	switch {
	case goneFirst:
		return testEnd{reason: s.goneReason(*g), finished: true}
	case result != nil && result.Result:
		return testEnd{finished: true}
	case result != nil:
		return testEnd{reason: result.Why, finished: true}
	case done.Timeout:
		return testEnd{reason: sandbox.Result{Limit: sandbox.LimitWallTime}.Reason(), finished: true}
	}
	res := sandbox.Result{ExitCode: done.Exit, Stderr: []byte(done.Err)}
	l := s.limits
	l.CPUTime = s.per
	sandbox.Classify(&res, time.Duration(done.CPU*float64(time.Second)), l)
	if reason := res.Reason(); reason != "" {
		return testEnd{reason: "the test " + reason, finished: true}
	}
	return testEnd{reason: "the test's process ended without a verdict", finished: true}
}

func has(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

func keys(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}
