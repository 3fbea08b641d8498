package program

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/internal/childenv"
	"github.com/rllm-org/rllm-go/internal/procgroup"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Serve mode (workflow.args.mode=serve): rllm starts the program once
// (workflow.args.processes copies) and hands it episodes as JSON lines on
// stdin,
//
//	{"episode_id": ID, "task": {row}, "env": {"OPENAI_BASE_URL": ..., "OPENAI_API_KEY": ..., ...}}
//
// each with the variables a per-episode program would get; the program
// answers one stdout line per episode, {"episode_id": ID, "answer": ...}
// or {"episode_id": ID, "reward": x}, in any order, or
// {"episode_id": ID, "error": "why"} to fail it. Other stdout lines are
// ignored. An episode past workflow.args.timeout_s (or its call
// limit) ends, its session closes and the program gets
// {"episode_id": ID, "cancel": true}; closing stdin means no more
// episodes. A program that dies fails the episodes it held and is
// started again for the next ones.

// Modes of workflow.args.mode.
const (
	ModePerEpisode = "per_episode"
	ModeServe      = "serve"
)

// Defaults of the serve-mode keys, used when they are not set.
const (
	defaultProcesses   = 1
	defaultConcurrency = 256
)

// MaxServeLine bounds one stdout line of a serving program, as the
// per-episode mode keeps the last 1 MiB of stdout: an answer line longer
// than this fails its episode, any other is dropped.
const MaxServeLine = 1 << 20

// setMode reads workflow.args.mode and the keys of serve mode, refusing
// those that do nothing in the mode chosen.
func (w *Program) setMode(p Params) error {
	switch p.Mode {
	case ModePerEpisode:
		for _, k := range []struct {
			key string
			v   int
		}{{"processes", p.Processes}, {"concurrency", p.Concurrency}} {
			if k.v != 0 {
				return usererr.Errorf("workflow.args.%s=%d only acts with workflow.args.mode=serve (a program per episode runs one episode per process); set mode=serve or remove it", k.key, k.v)
			}
		}
	case ModeServe:
		if p.Sandbox != "" {
			return usererr.Errorf("workflow.args.sandbox=%s only acts with workflow.args.mode=per_episode (each episode's process in a sandbox of its own); a serving program runs on the host: remove sandbox or use mode=per_episode", p.Sandbox)
		}
		w.serve = true
		w.processes, w.concurrency = defaultProcesses, defaultConcurrency
		if p.Processes > 0 {
			w.processes = p.Processes
		}
		if p.Concurrency > 0 {
			w.concurrency = p.Concurrency
		}
	default:
		return usererr.Errorf("workflow.args.mode is %q; use per_episode (a process per episode) or serve (the program starts once and serves episodes over stdin)", p.Mode)
	}
	return nil
}

// serveCloseGrace is how long a serving program may take to exit after
// its stdin closes before its process group is killed.
const serveCloseGrace = 2 * time.Second

var servers struct {
	mu  sync.Mutex
	all map[string]*server
}

// serverFor is the process-wide server for w's program and settings,
// shared by every episode of every phase (training, validation, eval):
// the sessions, not the processes, are per episode and per sampler.
func serverFor(w *Program) *server {
	key, _ := json.Marshal([]any{w.argv, w.dir, w.passEnv, w.processes, w.concurrency})
	servers.mu.Lock()
	defer servers.mu.Unlock()
	if servers.all == nil {
		servers.all = map[string]*server{}
	}
	if s, ok := servers.all[string(key)]; ok {
		return s
	}
	s := &server{w: w, procs: make([]*serveProc, w.processes), slots: make(chan struct{}, w.processes*w.concurrency)}
	servers.all[string(key)] = s
	return s
}

// CloseServers stops every serving program: stdin is closed (no more
// episodes), and after a short grace each process group is killed. Call
// it at the end of a run; it returns in bounded time.
func CloseServers() {
	servers.mu.Lock()
	all := servers.all
	servers.all = nil
	servers.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Go(s.close)
	}
	wg.Wait()
}

// ServeStats are a serving program's counts, over every process started
// for one setting.
type ServeStats struct {
	Started int64 // processes started (restarts included)
	Ignored int64 // stdout lines for unknown or finished episodes
	Other   int64 // stdout lines that are not answers (logs), ignored
	TooLong int64 // stdout lines over MaxServeLine
}

// OpenServers counts the serving programs started and not yet stopped by
// CloseServers.
func OpenServers() int {
	servers.mu.Lock()
	defer servers.mu.Unlock()
	return len(servers.all)
}

// ServersStats sums the counts of the serving programs alive.
func ServersStats() ServeStats {
	servers.mu.Lock()
	defer servers.mu.Unlock()
	var t ServeStats
	for _, s := range servers.all {
		t.Started += s.started.Load()
		t.Ignored += s.ignored.Load()
		t.Other += s.other.Load()
		t.TooLong += s.tooLong.Load()
	}
	return t
}

// server runs the processes of one serving program.
type server struct {
	w     *Program
	slots chan struct{} // a token per episode in flight, processes × concurrency
	seq   atomic.Uint64

	mu     sync.Mutex
	procs  []*serveProc
	closed bool

	started, ignored, other, tooLong atomic.Int64
}

// acquire waits for room for one more episode and returns the live
// process with the fewest, starting or restarting one where a slot is
// empty or its process has died.
func (s *server) acquire(ctx context.Context) (*serveProc, error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		<-s.slots
		return nil, errors.New("the run is ending; the serving program was stopped")
	}
	best := -1
	for i, p := range s.procs {
		if p == nil || p.isDead() {
			np, err := s.start()
			if err != nil {
				<-s.slots
				return nil, err
			}
			s.procs[i], p = np, np
		}
		if best < 0 || p.load < s.procs[best].load {
			best = i
		}
	}
	p := s.procs[best]
	p.load++
	return p, nil
}

func (s *server) release(p *serveProc) {
	s.mu.Lock()
	p.load--
	s.mu.Unlock()
	<-s.slots
}

func (s *server) close() {
	s.mu.Lock()
	s.closed = true
	procs := append([]*serveProc(nil), s.procs...)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		if p != nil {
			wg.Go(p.stop)
		}
	}
	wg.Wait()
}

// start runs one copy of the program (s.mu held).
func (s *server) start() (*serveProc, error) {
	w := s.w
	cmd := exec.Command(w.argv[0], w.argv[1:]...)
	cmd.Dir = w.dir
	cmd.Env = childenv.FromProcess(w.passEnv, map[string]string{"RLLM_PROGRAM_MODE": ModeServe})
	procgroup.Configure(cmd, 0)
	// As per episode: nothing it starts outlives it or rllm (kill -9 too).
	procgroup.Supervise(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p := &serveProc{s: s, cmd: cmd, stdin: stdin, stderr: procgroup.NewTail(64 << 10),
		waiting: map[string]chan served{}, writes: make(chan []byte, 1024), dead: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = outW, p.stderr
	err = cmd.Start()
	outW.Close()
	if err != nil {
		outR.Close()
		return nil, fmt.Errorf("%s could not start: %v", w.name(), err)
	}
	s.started.Add(1)
	p.name = fmt.Sprintf("%s (serving, pid %d)", w.name(), cmd.Process.Pid)
	readDone := make(chan struct{})
	go func() { defer close(readDone); p.read(outR) }()
	go p.writeLoop()
	go func() {
		err := cmd.Wait()
		// Whatever the program left in its group goes with it.
		_ = procgroup.Kill(cmd)
		select {
		case <-readDone:
		case <-time.After(procgroup.DefaultWaitDelay):
			// A descendant that left the group holds stdout open.
		}
		outR.Close()
		p.die(err)
	}()
	return p, nil
}

// served is what ends an episode held by a process: its answer line, or
// the process's death.
type served struct {
	line []byte
	err  error
}

// serveProc is one running copy of a serving program.
type serveProc struct {
	s      *server
	cmd    *exec.Cmd
	name   string
	stdin  io.WriteCloser
	stderr *procgroup.Tail
	load   int // episodes in flight (server.mu)

	mu      sync.Mutex
	waiting map[string]chan served
	exitErr error
	gone    bool

	writes   chan []byte
	dead     chan struct{}
	dieOnce  sync.Once
	stopOnce sync.Once
}

func (p *serveProc) isDead() bool {
	select {
	case <-p.dead:
		return true
	default:
		return false
	}
}

// send registers id and queues its line; the channel gets the answer or
// the process's death. When expired fires first it returns errNotSent.
func (p *serveProc) send(ctx context.Context, expired <-chan time.Time, id string, line []byte) (<-chan served, error) {
	ch := make(chan served, 1)
	p.mu.Lock()
	if p.gone {
		p.mu.Unlock()
		return nil, errors.New(p.deathText())
	}
	p.waiting[id] = ch
	p.mu.Unlock()
	select {
	case p.writes <- line:
		return ch, nil
	case <-p.dead:
		return ch, nil // the death is delivered on ch
	case <-expired:
		p.forget(id)
		return nil, errNotSent
	case <-ctx.Done():
		p.forget(id)
		return nil, context.Cause(ctx)
	}
}

// errNotSent: the episode's time ran out before the program took its
// line (it does not read its stdin).
var errNotSent = errors.New("the program did not read the episode's line in time")

// forget stops waiting for id: a later line for it is ignored.
func (p *serveProc) forget(id string) {
	p.mu.Lock()
	delete(p.waiting, id)
	p.mu.Unlock()
}

// cancel tells the program to stop working on id, without waiting: a
// program that does not read its stdin does not hold anyone up.
func (p *serveProc) cancel(id string) {
	p.forget(id)
	b, _ := json.Marshal(map[string]any{"episode_id": id, "cancel": true})
	select {
	case p.writes <- append(b, '\n'):
	default:
	}
}

// maxStdinBatch bounds the lines writeLoop joins into one write.
const maxStdinBatch = 256 << 10

// writeLoop writes the queued lines to the program's stdin in order. The
// lines queued together (a step's episodes start at once) go in one
// write, so the program reads them in one wake-up rather than one each.
func (p *serveProc) writeLoop() {
	var buf []byte
	for {
		select {
		case b := <-p.writes:
			buf = append(buf[:0], b...)
		more:
			for len(buf) < maxStdinBatch {
				select {
				case b := <-p.writes:
					buf = append(buf, b...)
				default:
					break more
				}
			}
			if _, err := p.stdin.Write(buf); err != nil {
				// stdin is closed or the program is gone: the death
				// (or close) ends what it held.
				return
			}
			if cap(buf) > 4*maxStdinBatch {
				buf = nil // a long task's line is not kept for the run
			}
		case <-p.dead:
			return
		}
	}
}

// idPrefix finds the episode id at the start of an answer line cut by
// the line limit, as the helpers print it ({"episode_id": ... first).
var idPrefix = regexp.MustCompile(`^\s*\{\s*"episode_id"\s*:\s*"((?:[^"\\]|\\.){1,512})"`)

// read dispatches the program's stdout lines to the episodes waiting.
func (p *serveProc) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	lr := boundedio.NewLineReader(br, "stdout", MaxServeLine)
	for {
		line, err := lr.ReadLine()
		var tooLarge *boundedio.TooLargeError
		switch {
		case errors.As(err, &tooLarge):
			p.s.tooLong.Add(1)
			head, err := lr.SkipLine()
			p.failLong(head)
			if err != nil {
				return
			}
			continue
		case err != nil:
			return
		}
		p.dispatch(line)
	}
}

// failLong fails the episode whose answer line was over the limit, when
// the line's start names one that is waiting: its answer is lost.
func (p *serveProc) failLong(head []byte) {
	m := idPrefix.FindSubmatch(head)
	if m == nil {
		return
	}
	var id string
	if json.Unmarshal(append(append([]byte{'"'}, m[1]...), '"'), &id) != nil {
		return
	}
	p.mu.Lock()
	ch, ok := p.waiting[id]
	delete(p.waiting, id)
	p.mu.Unlock()
	if ok {
		ch <- served{err: fmt.Errorf("%s printed an answer line for this episode longer than the limit of %s", p.name, boundedio.Size(MaxServeLine))}
	}
}

func (p *serveProc) dispatch(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		p.s.other.Add(1)
		return
	}
	var head struct {
		EpisodeID *string         `json:"episode_id"`
		Answer    json.RawMessage `json:"answer"`
		Reward    json.RawMessage `json:"reward"`
		Error     *string         `json:"error"`
	}
	if err := json.Unmarshal(line, &head); err != nil || head.EpisodeID == nil || (head.Answer == nil && head.Reward == nil && head.Error == nil) {
		p.s.other.Add(1)
		return
	}
	p.mu.Lock()
	ch, ok := p.waiting[*head.EpisodeID]
	delete(p.waiting, *head.EpisodeID)
	p.mu.Unlock()
	if !ok {
		p.s.ignored.Add(1)
		return
	}
	if head.Error != nil {
		ch <- served{err: fmt.Errorf("%s failed this episode: %s", p.name, clip(*head.Error, 500))}
		return
	}
	ch <- served{line: bytes.Clone(line)}
}

// die ends every episode the process held.
func (p *serveProc) die(err error) {
	p.dieOnce.Do(func() {
		p.mu.Lock()
		p.exitErr, p.gone = err, true
		held := p.waiting
		p.waiting = map[string]chan served{}
		msg := p.deathText()
		p.mu.Unlock()
		close(p.dead)
		for _, ch := range held {
			ch <- served{err: errors.New(msg)}
		}
	})
}

// deathText says how the process ended, with its last stderr line
// (p.mu held, or after death).
func (p *serveProc) deathText() string {
	how := "exited with status 0"
	var ee *exec.ExitError
	if errors.As(p.exitErr, &ee) {
		how = exitText(ee)
	} else if p.exitErr != nil {
		how = "ended: " + p.exitErr.Error()
	}
	last := "; it wrote nothing to stderr"
	if l := p.stderr.LastLine(); l != "" {
		last = "; its stderr ends: " + clip(l, 300)
	}
	return p.name + " " + how + " while it held this episode" + last + " (it is started again for the next episodes)"
}

// stop closes stdin (no more episodes), waits a little for the program
// to exit, then kills its process group.
func (p *serveProc) stop() {
	p.stopOnce.Do(func() {
		_ = p.stdin.Close()
		select {
		case <-p.dead:
		case <-time.After(serveCloseGrace):
		}
		_ = procgroup.Kill(p.cmd)
		<-p.dead
	})
}

// runServed runs one episode on the serving program.
func (w *Program) runServed(ctx context.Context, task episode.Task, episodeID string) (*episode.Episode, error) {
	ep := &episode.Episode{ID: episodeID, Task: task, TerminationReason: episode.TerminationUnknown, Metrics: map[string]float64{}}
	g := w.gateway
	if g == nil {
		var err error
		if g, err = Shared(); err != nil {
			return fail(ep, err)
		}
	}
	srv := serverFor(w)
	proc, err := srv.acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return stopped(ep, w, ctx)
		}
		return fail(ep, err)
	}
	defer srv.release(proc)

	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	sess, err := g.OpenSession(ctx, w.deps, w.maxCalls, func() { stop(errMaxCalls) }, map[string]any{"episode_id": episodeID})
	if err != nil {
		return fail(ep, fmt.Errorf("opening a gateway session: %w", err))
	}
	defer g.GW.Close(sess.ID)

	// The id on the wire is unique to this attempt, so a late answer to
	// an attempt that timed out is never taken for its retry's.
	id := episodeID + "#" + strconv.FormatUint(srv.seq.Add(1), 10)
	line, err := json.Marshal(map[string]any{"episode_id": id, "task": map[string]any(task), "env": sessionEnv(g.Base+"/sessions/"+sess.ID, sess, episodeID)})
	if err != nil {
		return fail(ep, fmt.Errorf("encoding the task as JSON: %w", err))
	}
	began := time.Now()
	timedOut := func() (*episode.Episode, error) {
		proc.cancel(id)
		w.attach(ep, sess.Traces(), episodeID)
		ep.Metrics["program_seconds"] = time.Since(began).Seconds()
		ep.TerminationReason = episode.TerminationTimeout
		ep.Error = fmt.Sprintf("%s did not answer within workflow.args.timeout_s=%g; it was told to cancel the episode%s", proc.name, w.timeout.Seconds(), stderrTail(proc))
		return ep, errors.New(ep.Error)
	}
	// The timeout counts from here: a program that stops reading its
	// stdin times its episodes out as one that never answers does.
	timer := time.NewTimer(w.timeout)
	defer timer.Stop()
	ch, err := proc.send(runCtx, timer.C, id, append(line, '\n'))
	switch {
	case errors.Is(err, errNotSent):
		return timedOut()
	case err != nil:
		if ctx.Err() != nil {
			return stopped(ep, w, ctx)
		}
		return fail(ep, err)
	}
	var got served
	select {
	case got = <-ch:
	case <-timer.C:
		return timedOut()
	case <-runCtx.Done():
		proc.cancel(id)
		w.attach(ep, sess.Traces(), episodeID)
		if ctx.Err() != nil {
			return stopped(ep, w, ctx)
		}
		return fail(ep, fmt.Errorf("%s made more than workflow.args.max_calls=%d model calls for this episode; it was told to cancel it%s", proc.name, w.maxCalls, stderrTail(proc)))
	}
	ep.Metrics["program_seconds"] = time.Since(began).Seconds()
	traces := sess.Traces()
	st := sess.Stats()
	ep.Metrics["model_calls"] = float64(len(traces))
	w.attach(ep, traces, episodeID)
	if got.err != nil {
		if st.PromptTooLong > 0 {
			ep.TerminationReason = episode.TerminationMaxPromptLength
			ep.Error = st.LastError
			return ep, nil
		}
		return fail(ep, fmt.Errorf("%v%s", got.err, gatewayNote(st)))
	}
	if len(traces) == 0 {
		return fail(ep, fmt.Errorf("%s answered episode %s without a model call through its session (the env's OPENAI_BASE_URL or ANTHROPIC_BASE_URL), so there is nothing to train on%s", proc.name, id, gatewayNote(st)))
	}
	res, err := w.result(task, string(got.line))
	if err != nil {
		return fail(ep, fmt.Errorf("%s: %v", proc.name, strings.Replace(err.Error(), "its last stdout line must be", "its answer line must be", 1)))
	}
	w.reward(ep, res)
	ep.TerminationReason = episode.TerminationEnvDone
	if last := traces[len(traces)-1]; last.FinishReason == "length" {
		ep.TerminationReason = episode.TerminationMaxResponseLength
	}
	return ep, nil
}

// stopped ends an episode whose run was stopped from outside (the
// engine's deadline, Ctrl-C): not the program's fault.
func stopped(ep *episode.Episode, w *Program, ctx context.Context) (*episode.Episode, error) {
	ep.TerminationReason = episode.TerminationError
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		ep.TerminationReason = episode.TerminationTimeout
	}
	ep.Error = fmt.Sprintf("%s stopped: %v", w.name(), ctx.Err())
	return ep, ctx.Err()
}

func stderrTail(p *serveProc) string {
	if l := p.stderr.LastLine(); l != "" {
		return "; its stderr ends: " + clip(l, 300)
	}
	return ""
}
