// Package exec is the `exec` environment: an environment written in any
// language, run as a child process that speaks JSON lines over its stdin
// and stdout. The messages are OpenEnv's WebSocket frames plus an episode
// id, so one environment can serve both:
//
//	rllm → {"id": "<episode>", "type": "reset", "data": {"task": {<row>}, "seed": N}}
//	rllm → {"id": ..., "type": "step", "data": {"action": "<agent reply>"}}
//	rllm → {"id": ..., "type": "close"}
//	env  → {"id": ..., "type": "observation", "data": {"observation": <any>, "reward": number|null, "done": bool, "info": {...}}}
//	env  → {"id": ..., "type": "error", "data": {"message": "..."}}
//
// One process may hold many episodes at once; env.args.processes starts a
// pool of them and spreads episodes over it. A process that dies is
// restarted for later episodes. A line that cannot be tied to an episode
// is logged and dropped; the episode waiting for it ends by its timeout.
package exec

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	osexec "os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rllm-org/rllm-go/internal/childenv"
	"github.com/rllm-org/rllm-go/internal/procgroup"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Params are the exec env's arguments. None of them comes from a task
// row, and none of them travels to the child in a reset: the row alone
// does.
type Params struct {
	Command      []string          `arg:"command" doc:"program and arguments, run without a shell, e.g. [python3, my_env.py]"`
	Dir          string            `arg:"dir" doc:"working directory of the child (empty: rllm's)"`
	EnvVars      map[string]string `arg:"env_vars" doc:"variables set in the child's environment, e.g. {LEVEL: hard}"`
	PassEnv      []string          `arg:"pass_env" doc:"names of rllm's variables passed on to the child (besides PATH, HOME, LANG, TMPDIR and what Python/node installs need)"`
	Processes    int               `arg:"processes" default:"1" range:"[1,1024]" doc:"child processes in the pool; episodes are spread over them"`
	StepTimeoutS float64           `arg:"step_timeout_s" default:"60" range:"(0,86400]" doc:"seconds the child may take to answer one reset or step"`
}

func init() {
	env.Register(env.Definition{
		Name:        "exec",
		Description: "an environment in another process (any language): JSON lines over stdin/stdout with OpenEnv's message shapes plus an episode id",
		Params:      Params{},
		Validate:    func(v registry.Values) error { return check(registry.As[Params](v)) },
		New: func(task episode.Task, v registry.Values) (env.Env, error) {
			p := registry.As[Params](v)
			pool, err := poolFor(p)
			if err != nil {
				return nil, err
			}
			return pool.newEpisode(task), nil
		},
	})
}

func check(p Params) error {
	if len(p.Command) == 0 || p.Command[0] == "" {
		return usererr.Errorf("env.args.command is empty; set it to the program and its arguments, e.g. env.args.command=[python3,my_env.py]")
	}
	for _, k := range p.PassEnv {
		if err := childenv.CheckName(k); err != nil {
			return usererr.Errorf("env.args.pass_env: %v", err)
		}
	}
	for k := range p.EnvVars {
		if err := childenv.CheckName(k); err != nil {
			return usererr.Errorf("env.args.env_vars: %v", err)
		}
	}
	return nil
}

// maxLine bounds one protocol line; a longer one is dropped and logged.
const maxLine = 32 << 20

// Logger receives what the children write to stderr and the lines that
// break the protocol. The CLI may replace it.
var Logger = slog.Default()

// frame is one protocol message, either way.
type frame struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data,omitempty"`
}

// ObservationData is the data of an observation frame (OpenEnv's, plus
// info). Reward may be a number, a bool (OpenEnv allows it) or null.
type ObservationData struct {
	Observation any             `json:"observation"`
	Reward      json.RawMessage `json:"reward"`
	Done        bool            `json:"done"`
	Info        map[string]any  `json:"info"`
}

// ParseReward reads OpenEnv's reward: a number, a bool (1 or 0) or null
// (0). ok is false for anything else.
func ParseReward(raw json.RawMessage) (float64, bool) {
	s := strings.TrimSpace(string(raw))
	switch s {
	case "", "null", "false":
		return 0, true
	case "true":
		return 1, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// DecodeObservation turns an observation frame's data into a step result.
func DecodeObservation(data json.RawMessage) (env.StepResult, error) {
	var od ObservationData
	if err := json.Unmarshal(data, &od); err != nil {
		return env.StepResult{}, fmt.Errorf("observation data is not an object with observation, reward, done and info: %v", err)
	}
	r, ok := ParseReward(od.Reward)
	if !ok {
		return env.StepResult{}, fmt.Errorf("observation reward %s is not a number, a bool or null", od.Reward)
	}
	return env.StepResult{Observation: od.Observation, Reward: r, Done: od.Done, Info: od.Info}, nil
}

// ErrorMessage reads an error frame's data.message (and code).
func ErrorMessage(data json.RawMessage) string {
	var ed struct {
		Message string `json:"message"`
		Code    string `json:"code"`
	}
	if err := json.Unmarshal(data, &ed); err != nil || ed.Message == "" {
		return "error frame without a message: " + truncate(string(data), 200)
	}
	if ed.Code != "" {
		return ed.Code + ": " + ed.Message
	}
	return ed.Message
}

var (
	poolsMu sync.Mutex
	pools   = map[string]*Pool{}
)

// poolFor returns the pool of processes for p, started lazily and shared
// by every episode with the same settings.
func poolFor(p Params) (*Pool, error) {
	if err := check(p); err != nil {
		return nil, err
	}
	key, _ := json.Marshal(p)
	poolsMu.Lock()
	defer poolsMu.Unlock()
	if pl, ok := pools[string(key)]; ok {
		return pl, nil
	}
	pl := NewPool(p)
	pools[string(key)] = pl
	return pl, nil
}

// OpenPools counts the pools started and not yet closed by CloseAll.
func OpenPools() int {
	poolsMu.Lock()
	defer poolsMu.Unlock()
	return len(pools)
}

// CloseAll stops every pool's processes: the end of a run.
func CloseAll() {
	poolsMu.Lock()
	all := pools
	pools = map[string]*Pool{}
	poolsMu.Unlock()
	for _, pl := range all {
		pl.Close()
	}
}

// Pool is the set of child processes serving one exec env config.
type Pool struct {
	p      Params
	name   string
	env    []string
	mu     sync.Mutex
	procs  []*process
	closed bool
	seq    atomic.Uint64
	// Errors counts episodes that ended because the child misbehaved.
	Errors   atomic.Int64
	Restarts atomic.Int64
}

// NewPool makes a pool for p; processes start with the first episode.
func NewPool(p Params) *Pool {
	return &Pool{
		p:     p,
		name:  "exec env [" + strings.Join(p.Command, " ") + "]",
		env:   childenv.FromProcess(p.PassEnv, p.EnvVars),
		procs: make([]*process, p.Processes),
	}
}

// Close stops the processes, all at once: stdin is closed (the child
// should exit on EOF) and after a grace period each process group is
// killed. It returns in bounded time, even when a grandchild holds the
// child's pipes open.
func (pl *Pool) Close() {
	pl.mu.Lock()
	pl.closed = true
	procs := append([]*process(nil), pl.procs...)
	pl.mu.Unlock()
	var wg sync.WaitGroup
	for _, pr := range procs {
		if pr != nil {
			wg.Add(1)
			go func() { defer wg.Done(); pr.stop(closeGrace) }()
		}
	}
	wg.Wait()
}

// closeGrace is how long Close lets a child exit on its own after its
// stdin closes; then its process group is killed. Close returns within
// closeGrace + procgroup.DefaultWaitDelay.
const closeGrace = 2 * time.Second

// acquire picks the live process with the fewest episodes, starting or
// restarting one where a slot is empty or dead.
func (pl *Pool) acquire() (*process, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.closed {
		return nil, fmt.Errorf("%s: the pool is closed", pl.name)
	}
	best := -1
	for i, pr := range pl.procs {
		if pr == nil || pr.isDead() {
			if pr != nil {
				pl.Restarts.Add(1)
			}
			np, err := pl.start()
			if err != nil {
				return nil, err
			}
			pl.procs[i] = np
			pr = np
		}
		if best < 0 || pr.load() < pl.procs[best].load() {
			best = i
		}
	}
	pr := pl.procs[best]
	pr.active.Add(1)
	return pr, nil
}

func (pl *Pool) start() (*process, error) {
	cmd := osexec.Command(pl.p.Command[0], pl.p.Command[1:]...)
	cmd.Dir = pl.p.Dir
	cmd.Env = pl.env
	// Its own process group, killed as a whole: with a wrapper (sh run.sh,
	// uv run, npm start) the real environment is a grandchild. Wait is
	// bounded even while a descendant holds stdout or stderr open.
	procgroup.Configure(cmd, 0)
	// Under a supervisor: whatever the wrapper left (`(sleep 120 &)`, a
	// setsid daemon) dies when the child ends, and all of it when rllm
	// does, even by SIGKILL.
	procgroup.Supervise(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// stdout goes through a pipe of ours, which is closed once Wait has
	// returned, so the reader ends even if a grandchild keeps the child's
	// end open.
	stdoutR, stdoutW := io.Pipe()
	cmd.Stdout = stdoutW
	pr := &process{
		pool: pl, cmd: cmd, stdin: stdin,
		waiters: map[string]chan frame{},
		writes:  make(chan []byte, 256),
		dead:    make(chan struct{}),
		tail:    procgroup.NewTail(stderrTail),
	}
	// stderr is drained whatever it holds (no line limit: a tqdm bar
	// redrawn with \r, a huge traceback), logged line by line and kept as
	// a bounded tail for crash messages.
	stderr := &procgroup.LineLog{Tail: pr.tail, Log: func(line string) { Logger.Info(pr.name + " stderr: " + line) }}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, usererr.Errorf("env.args.command: cannot start %q: %v; check the program exists and is executable (the child's PATH is rllm's)", pl.p.Command[0], err)
	}
	pr.name = fmt.Sprintf("%s pid %d", pl.name, cmd.Process.Pid)
	pr.lastRead.Store(time.Now().UnixNano())
	stdoutDone := make(chan struct{})
	go func() { defer close(stdoutDone); pr.readStdout(stdoutR) }()
	go pr.writeLoop()
	go func() {
		err := cmd.Wait()
		// The child is gone; whatever it left in its group goes too.
		_ = procgroup.Kill(cmd)
		stdoutW.Close()
		<-stdoutDone
		stderr.Flush()
		pr.die(err)
	}()
	return pr, nil
}

// stderrTail is how much of a child's stderr is kept for crash messages.
const stderrTail = 8 << 10

// process is one running child.
type process struct {
	pool   *Pool
	cmd    *osexec.Cmd
	stdin  io.WriteCloser
	name   string
	active atomic.Int64

	mu       sync.Mutex
	waiters  map[string]chan frame
	tail     *procgroup.Tail // the end of stderr, for crash messages
	exitErr  error
	lastRead atomic.Int64 // unix nanos of the last stdout line
	// silentTimeouts counts timeouts since the last stdout line.
	silentTimeouts atomic.Int32
	killed         atomic.Bool

	writes   chan []byte
	dead     chan struct{}
	dieOnce  sync.Once
	stopOnce sync.Once
}

func (pr *process) load() int64 { return pr.active.Load() }

func (pr *process) isDead() bool {
	if pr.killed.Load() {
		return true
	}
	select {
	case <-pr.dead:
		return true
	default:
		return false
	}
}

func (pr *process) readStdout(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br)
		if len(bytes.TrimSpace(line)) > 0 {
			pr.lastRead.Store(time.Now().UnixNano())
			pr.silentTimeouts.Store(0)
			pr.dispatch(line)
		}
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				Logger.Warn(pr.name+": dropped a stdout line longer than the limit", "limit_bytes", maxLine)
				continue
			}
			return
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line of at most maxLine bytes; a longer line is
// consumed and reported as errLineTooLong.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > maxLine {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				return nil, err
			}
			return nil, errLineTooLong
		}
		buf = append(buf, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, err
	}
}

func (pr *process) dispatch(line []byte) {
	var f frame
	if err := json.Unmarshal(line, &f); err != nil || f.ID == "" || f.Type == "" {
		Logger.Warn(pr.name+": dropped a stdout line that is not a protocol frame with id and type (print logs to stderr, not stdout)", "line", truncate(string(bytes.TrimSpace(line)), 300))
		return
	}
	pr.mu.Lock()
	ch, ok := pr.waiters[f.ID]
	if ok {
		delete(pr.waiters, f.ID)
	}
	pr.mu.Unlock()
	if !ok {
		Logger.Warn(pr.name+": dropped a frame for an episode that is not waiting for one", "id", f.ID, "line", truncate(string(bytes.TrimSpace(line)), 300))
		return
	}
	ch <- f // buffered, one frame per request
}

func (pr *process) writeLoop() {
	for {
		select {
		case b := <-pr.writes:
			if _, err := pr.stdin.Write(b); err != nil {
				pr.kill()
				return
			}
		case <-pr.dead:
			return
		}
	}
}

func (pr *process) die(err error) {
	pr.dieOnce.Do(func() {
		pr.mu.Lock()
		pr.exitErr = err
		pr.mu.Unlock()
		close(pr.dead)
	})
}

// exitText says how the process ended, with its last stderr lines.
func (pr *process) exitText() string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	s := "exited"
	if pr.exitErr != nil {
		s += " (" + pr.exitErr.Error() + ")"
	} else {
		s += " (status 0)"
	}
	if lines := pr.tail.Lines(10); len(lines) > 0 {
		for i, l := range lines {
			lines[i] = truncate(l, 500)
		}
		s += "; its last stderr lines: " + strings.Join(lines, " | ")
	}
	return s
}

func (pr *process) kill() {
	pr.killed.Store(true)
	_ = procgroup.Kill(pr.cmd)
}

func (pr *process) stop(grace time.Duration) {
	pr.stopOnce.Do(func() {
		_ = pr.stdin.Close()
		select {
		case <-pr.dead:
		case <-time.After(grace):
			pr.kill()
			<-pr.dead
		}
	})
}

// send writes a frame, bounded by the step timeout (a child that stops
// reading fills the pipe).
func (pr *process) send(ctx context.Context, f frame, timeout time.Duration) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case pr.writes <- b:
		return nil
	case <-pr.dead:
		return fmt.Errorf("%s %s before rllm could send %s", pr.name, pr.exitText(), f.Type)
	case <-t.C:
		return fmt.Errorf("%s: %w: it did not read %s within %s", pr.name, env.ErrTimeout, f.Type, timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// request sends f and waits for the frame answering it.
func (pr *process) request(ctx context.Context, f frame, timeout time.Duration) (frame, error) {
	ch := make(chan frame, 1)
	pr.mu.Lock()
	pr.waiters[f.ID] = ch
	pr.mu.Unlock()
	forget := func() {
		pr.mu.Lock()
		delete(pr.waiters, f.ID)
		pr.mu.Unlock()
	}
	sent := time.Now().UnixNano()
	t := time.NewTimer(timeout)
	defer t.Stop()
	if err := pr.send(ctx, f, timeout); err != nil {
		forget()
		return frame{}, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-pr.dead:
		forget()
		select { // the answer may have come just before the end
		case r := <-ch:
			return r, nil
		default:
		}
		return frame{}, fmt.Errorf("%s %s during %s of episode %s", pr.name, pr.exitText(), f.Type, f.ID)
	case <-t.C:
		forget()
		if pr.lastRead.Load() < sent && pr.silentTimeouts.Add(1) >= 2 {
			// Two requests in a row got no line at all: the whole
			// process is stuck, not one episode. Kill it so that later
			// episodes get a fresh one.
			Logger.Warn(pr.name+": killed after two step timeouts in a row without printing anything", "timeout", timeout.String())
			pr.kill()
		}
		return frame{}, fmt.Errorf("%s: %w: no answer to %s of episode %s within %s (env.args.step_timeout_s)", pr.name, env.ErrTimeout, f.Type, f.ID, timeout)
	case <-ctx.Done():
		forget()
		return frame{}, ctx.Err()
	}
}

// Episode is one episode of an exec env, on one process of its pool.
type Episode struct {
	pool *Pool
	task episode.Task
	id   string
	proc *process
	seed int64
	open bool
}

func (pl *Pool) newEpisode(task episode.Task) *Episode {
	n := pl.seq.Add(1)
	id := fmt.Sprintf("ep-%d", n)
	if tid, ok := task["id"]; ok {
		id = fmt.Sprintf("%v~%d", tid, n) // a retry gets a new number
	}
	return &Episode{pool: pl, task: task, id: id, seed: seedOf(task, id)}
}

// seedOf is the row's integral seed column, else a hash of the episode
// id.
func seedOf(task episode.Task, id string) int64 {
	if s, ok := RowSeed(task); ok {
		return s
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return int64(h.Sum32())
}

// ID is the episode id sent in every frame.
func (e *Episode) ID() string { return e.id }

func (e *Episode) timeout() time.Duration {
	return time.Duration(e.pool.p.StepTimeoutS * float64(time.Second))
}

// Reset starts the episode on the least loaded process.
func (e *Episode) Reset(ctx context.Context) (any, map[string]any, error) {
	if e.proc == nil {
		pr, err := e.pool.acquire()
		if err != nil {
			return nil, nil, err
		}
		e.proc = pr
	}
	data, err := json.Marshal(map[string]any{"task": map[string]any(e.task), "seed": e.seed})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: the task row cannot be sent as JSON: %v", e.pool.name, err)
	}
	e.open = true
	res, err := e.roundTrip(ctx, frame{ID: e.id, Type: "reset", Data: data})
	if err != nil {
		return nil, nil, err
	}
	return res.Observation, res.Info, nil
}

// Step sends the agent's reply as data.action: the text, or the
// structured action when the agent made one.
func (e *Episode) Step(ctx context.Context, a episode.Action) (env.StepResult, error) {
	if e.proc == nil {
		return env.StepResult{}, fmt.Errorf("%s: step before reset", e.pool.name)
	}
	var action any = a.Content
	if len(a.Fields) > 0 {
		action = a.Fields
	}
	data, err := json.Marshal(map[string]any{"action": action})
	if err != nil {
		return env.StepResult{}, err
	}
	return e.roundTrip(ctx, frame{ID: e.id, Type: "step", Data: data})
}

func (e *Episode) roundTrip(ctx context.Context, f frame) (env.StepResult, error) {
	r, err := e.proc.request(ctx, f, e.timeout())
	if err != nil {
		if ctx.Err() == nil {
			e.pool.Errors.Add(1)
		}
		return env.StepResult{}, err
	}
	switch r.Type {
	case "observation":
		res, err := DecodeObservation(r.Data)
		if err != nil {
			e.pool.Errors.Add(1)
			return res, fmt.Errorf("%s answered %s of episode %s with a bad frame: %v", e.proc.name, f.Type, e.id, err)
		}
		return res, nil
	case "error":
		e.pool.Errors.Add(1)
		return env.StepResult{}, fmt.Errorf("%s reported an error for %s of episode %s: %s", e.proc.name, f.Type, e.id, ErrorMessage(r.Data))
	}
	e.pool.Errors.Add(1)
	return env.StepResult{}, fmt.Errorf("%s answered %s of episode %s with a frame of type %q; expected observation or error", e.proc.name, f.Type, e.id, r.Type)
}

// Close tells the child the episode is over (no answer is expected) and
// frees the process slot.
func (e *Episode) Close() error {
	if e.proc == nil {
		return nil
	}
	if e.open && !e.proc.isDead() {
		_ = e.proc.send(context.Background(), frame{ID: e.id, Type: "close"}, e.timeout())
	}
	e.proc.active.Add(-1)
	e.proc = nil
	return nil
}

// RowSeed is a task row's seed column when it holds a whole number.
func RowSeed(task episode.Task) (int64, bool) {
	switch s := task["seed"].(type) {
	case int:
		return int64(s), true
	case int64:
		return s, true
	case float64:
		if s == math.Trunc(s) && math.Abs(s) < 1<<53 {
			return int64(s), true
		}
	}
	return 0, false
}

// Truncate shortens s to n bytes for a message, marking the cut.
func Truncate(s string, n int) string { return truncate(s, n) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
