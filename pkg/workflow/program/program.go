// Package program is the workflow that trains agent programs: any
// process, in any language, that calls an OpenAI- or Anthropic-compatible
// API. Each episode runs the program once with the task as one JSON
// object on stdin and, in its environment, OPENAI_BASE_URL and
// ANTHROPIC_BASE_URL pointing at a fresh session of the recording gateway
// (pkg/gateway), OPENAI_API_KEY and ANTHROPIC_API_KEY set to that
// session's token, and RLLM_SESSION_ID. The program's last stdout line,
// {"answer": ...} or {"reward": x}, is scored; the session's traces become
// the episode's trajectories with their exact token ids.
//
// Select it with workflow.name=program and workflow.args.command.
package program

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/internal/childenv"
	"github.com/rllm-org/rllm-go/internal/procgroup"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/usererr"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// Params are workflow.args of the program workflow.
type Params struct {
	Command  any      `arg:"command" doc:"the agent program: a command line run by /bin/sh -c (\"python3 agent.py\"), or a list [prog, arg...] run as is"`
	TimeoutS float64  `arg:"timeout_s" default:"300" range:"(0,)" doc:"seconds an episode may take; then it ends with timeout (per episode: the program's process group is killed; served: the program is told to cancel it)"`
	MaxCalls int      `arg:"max_calls" default:"64" range:"[1,)" doc:"model calls a program may make per episode; the next one gets 429 and the program is stopped"`
	Dir      string   `arg:"dir" doc:"working directory of the program; empty: rllm's"`
	PassEnv  []string `arg:"pass_env" doc:"names of environment variables passed on to the program besides the minimal set (PATH, HOME, locale, virtualenv...)"`
	Gamma    float64  `arg:"gamma" default:"1" range:"[0,1]" doc:"discount of the Monte Carlo return stored in each step"`
	Sandbox  string   `arg:"sandbox" doc:"bwrap or docker: run the program in a sandbox whose only network is its session (its directory read-only, /work writable); empty: on the host"`
	// Serve mode (serve.go).
	Mode        string `arg:"mode" default:"per_episode" doc:"per_episode: a process per episode, the task on stdin; serve: the program starts once and takes episodes as JSON lines on stdin (docs/gateway.md)"`
	Processes   int    `arg:"processes" range:"[0,256]" doc:"mode=serve only: copies of the program started; 0: 1"`
	Concurrency int    `arg:"concurrency" range:"[0,4096]" doc:"mode=serve only: episodes one copy of the program runs at once; 0: 256"`
}

// Name is the workflow's registered name.
const Name = "program"

func init() {
	workflow.Register(workflow.Definition{
		Name:        Name,
		Description: "runs an agent program per episode (task JSON on stdin, OPENAI_BASE_URL/ANTHROPIC_BASE_URL to a recording gateway session); trains on the exact tokens it sampled",
		Params:      Params{},
		New: func(args registry.Values, deps workflow.Deps) (workflow.Workflow, error) {
			return New(registry.As[Params](args), deps)
		},
	})
}

// Program runs one agent program per episode.
type Program struct {
	argv     []string
	display  string
	timeout  time.Duration
	maxCalls int
	dir      string
	passEnv  []string
	gamma    float64
	sandbox  string
	// tasks is the task env's hook (env.name=task): the program runs in
	// the task's container and the task's verifier scores it there.
	tasks env.Workspaces
	// serve mode: processes × concurrency episodes at once (serve.go).
	serve                  bool
	processes, concurrency int
	deps                   workflow.Deps
	score                  func(task episode.Task, answer string) (float64, bool, map[string]any, error)
	// gateway serves the sessions; nil means the process-wide one.
	gateway *Gateway
}

// Bound names the key that ends an episode the program never finishes
// (rollout.Bounder).
func (w *Program) Bound() string {
	return fmt.Sprintf("workflow.args.timeout_s=%g ends each of %s's episodes", w.timeout.Seconds(), w.name())
}

// Gateway is a running gateway and the base URL programs reach it at.
type Gateway struct {
	GW   *gateway.Gateway
	Base string
}

// OpenSession opens the gateway session of one episode: the workflow's
// sampler and parameters, the episode's sampling stream (so its samples
// do not depend on the order calls arrive in), and at most maxCalls
// calls; the call past them runs onLimit.
func (g *Gateway) OpenSession(ctx context.Context, deps workflow.Deps, maxCalls int, onLimit func(), metadata map[string]any) (*gateway.Session, error) {
	params := deps.Params
	return g.GW.Open(gateway.SessionConfig{Sampler: deps.Sampler, Params: &params, ChatTemplateKwargs: deps.ChatTemplateKwargs,
		MaxCalls: maxCalls, OnLimit: onLimit, Metadata: metadata, Stream: sampler.Stream(ctx)})
}

// New builds the workflow, checking its arguments.
func New(p Params, deps workflow.Deps) (*Program, error) {
	if deps.Sampler == nil {
		return nil, errors.New("workflow program: Deps.Sampler is nil")
	}
	argv, display, err := commandLine(p.Command)
	if err != nil {
		return nil, err
	}
	if err := checkProgram(argv, display, p.Dir); err != nil {
		return nil, err
	}
	for _, name := range p.PassEnv {
		if err := childenv.CheckName(name); err != nil {
			return nil, usererr.Errorf("workflow.args.pass_env: %v", err)
		}
	}
	if !slices.Contains(Sandboxes, p.Sandbox) {
		return nil, usererr.Errorf("workflow.args.sandbox %q: use bwrap or docker, or leave it empty to run the program on the host", p.Sandbox)
	}
	w := &Program{argv: argv, display: display, timeout: time.Duration(p.TimeoutS * float64(time.Second)),
		maxCalls: p.MaxCalls, dir: p.Dir, passEnv: p.PassEnv, gamma: p.Gamma, sandbox: p.Sandbox, deps: deps}
	if err := w.setMode(p); err != nil {
		return nil, err
	}
	if deps.Workspaces != nil {
		// env.name=task: the program works in the task's container.
		switch {
		case w.serve:
			return nil, usererr.Errorf("workflow.args.mode=serve cannot run in a task's container (env.name=%s); use mode=per_episode, whose program runs in each episode's container", deps.Env.Name)
		case p.Sandbox == "bwrap":
			return nil, usererr.Errorf("workflow.args.sandbox=bwrap: env.name=%s runs each episode in its task's Docker container; set workflow.args.sandbox=docker or leave it empty", deps.Env.Name)
		}
		w.tasks, w.sandbox = deps.Workspaces, "docker"
	}
	if deps.Env.Name != "" {
		score, err := AnswerScorer(deps.Env)
		if err != nil {
			return nil, err
		}
		w.score = score
	}
	return w, nil
}

// AnswerScorer scores a final answer with env.name's reward function (a
// single-turn env: arith, countdown, math...): the program and harness
// workflows score answers with it.
func AnswerScorer(c workflow.Component) (func(task episode.Task, answer string) (float64, bool, map[string]any, error), error) {
	d, v, err := env.Resolve(c.Name, c.Args)
	if err != nil {
		return nil, err
	}
	name := c.Name
	return func(task episode.Task, answer string) (float64, bool, map[string]any, error) {
		if !env.IsSingleTurn(name) {
			return 0, false, nil, fmt.Errorf("env.name=%s does not score a single answer; the program must print {\"reward\": x}, or use a scored env (arith, countdown, math...)", name)
		}
		e, err := env.Build(d, v, task)
		if err != nil {
			return 0, false, nil, err
		}
		defer e.Close()
		if _, _, err := e.Reset(context.Background()); err != nil {
			return 0, false, nil, err
		}
		res, err := e.Step(context.Background(), episode.Action{Content: answer})
		if err != nil {
			return 0, false, nil, err
		}
		correct, _ := res.Info["is_correct"].(bool)
		return res.Reward, correct, res.Info, nil
	}, nil
}

// WithGateway makes the workflow open its sessions on g instead of the
// process-wide gateway.
func (w *Program) WithGateway(g *Gateway) *Program { w.gateway = g; return w }

// commandLine reads workflow.args.command: a string runs under /bin/sh
// -c, a list runs as is.
func commandLine(v any) ([]string, string, error) {
	switch c := v.(type) {
	case string:
		if strings.TrimSpace(c) == "" {
			break
		}
		return []string{"/bin/sh", "-c", c}, c, nil
	case []any:
		argv := make([]string, 0, len(c))
		for i, a := range c {
			s, ok := a.(string)
			if !ok {
				return nil, "", usererr.Errorf("workflow.args.command[%d] is %v, not a string; write the command as a list of strings", i, a)
			}
			argv = append(argv, s)
		}
		if len(argv) > 0 && argv[0] != "" {
			return argv, strings.Join(argv, " "), nil
		}
	case []string:
		if len(c) > 0 && c[0] != "" {
			return c, strings.Join(c, " "), nil
		}
	}
	return nil, "", usererr.Errorf("workflow.args.command is not set: give the agent program as a command line (workflow.args.command='python3 agent.py') or a list ([node, agent.mjs])")
}

// checkProgram checks that the program of the command exists: argv[0]
// of a list, the first word of a string that is a simple command (see
// shellProgram; a string the shell alone resolves is left to the shell).
func checkProgram(argv []string, display, dir string) error {
	prog, what := argv[0], argv[0]
	if len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c" && argv[2] == display {
		p, ok := shellProgram(display)
		if !ok {
			return nil
		}
		prog, what = p, fmt.Sprintf("%s (the program of %q)", p, display)
	}
	bin := prog
	if dir != "" && strings.Contains(bin, "/") && !filepath.IsAbs(bin) {
		bin = filepath.Join(dir, bin) // the program starts in dir
	}
	if _, err := exec.LookPath(bin); err != nil {
		return usererr.Errorf("workflow.args.command: %s is not an executable file or a program on PATH; give its path", what)
	}
	return nil
}

// name is the program as error messages name it.
func (w *Program) name() string {
	d := w.display
	if len(d) > 80 {
		d = d[:77] + "..."
	}
	return "program `" + d + "`"
}

var errMaxCalls = errors.New("max calls")

// Run runs the program once for task.
func (w *Program) Run(ctx context.Context, task episode.Task, episodeID string) (*episode.Episode, error) {
	if w.serve {
		return w.runServed(ctx, task, episodeID)
	}
	ep := &episode.Episode{ID: episodeID, Task: task, TerminationReason: episode.TerminationUnknown, Metrics: map[string]float64{}}
	g := w.gateway
	if g == nil {
		var err error
		if g, err = Shared(); err != nil {
			return fail(ep, err)
		}
	}
	// The program's time: workflow.args.timeout_s, or a task's own bound
	// of the agent's time when that is smaller.
	limit, limitKey := w.timeout, fmt.Sprintf("workflow.args.timeout_s=%g", w.timeout.Seconds())
	if at, ok := w.tasks.(env.AgentTimer); ok {
		d, err := at.AgentTimeout(task)
		if err != nil {
			return fail(ep, fmt.Errorf("the task's agent timeout: %w", err))
		}
		if d > 0 && d < limit {
			limit, limitKey = d, fmt.Sprintf("the task's [agent] timeout_sec = %g", d.Seconds())
		}
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, limit, errTimeout)
	defer cancel()
	runCtx, stop := context.WithCancelCause(runCtx)
	defer stop(nil)
	sess, err := g.OpenSession(ctx, w.deps, w.maxCalls, func() { stop(errMaxCalls) }, map[string]any{"episode_id": episodeID})
	if err != nil {
		return fail(ep, fmt.Errorf("opening a gateway session: %w", err))
	}
	defer g.GW.Close(sess.ID)

	in, err := json.Marshal(map[string]any(task))
	if err != nil {
		return fail(ep, fmt.Errorf("encoding the task as JSON: %w", err))
	}
	stdout, stderr := procgroup.NewTail(1<<20), procgroup.NewTail(64<<10)
	began := time.Now()
	var runErr error
	var verdict *outcome // the task's verifier's, when the program ran in a task's container
	if w.sandbox != "" {
		var net *sandbox.NetReport
		net, verdict, runErr = w.runSandboxed(runCtx, g, sess, task, episodeID, in, stdout, stderr)
		if net != nil {
			ep.Metrics["denied_connections"] = float64(net.Denied)
		}
	} else {
		cmd := procgroup.Command(runCtx, w.argv[0], w.argv[1:]...)
		cmd.Dir = w.dir
		cmd.Env = childenv.FromProcess(w.passEnv, sessionEnv(g.Base+"/sessions/"+sess.ID, sess, episodeID))
		cmd.Stdin = bytes.NewReader(append(in, '\n'))
		// Nothing the program starts outlives it or rllm (killed by SIGKILL too).
		procgroup.Supervise(cmd)
		runErr = runGroup(cmd, stdout, stderr)
	}
	ep.Metrics["program_seconds"] = time.Since(began).Seconds()

	traces := sess.Traces()
	st := sess.Stats()
	ep.Metrics["model_calls"] = float64(len(traces))
	w.attach(ep, traces, episodeID)

	stderrLine := func() string {
		if l := stderr.LastLine(); l != "" {
			return "; its stderr ends: " + clip(l, 300)
		}
		return "; it wrote nothing to stderr"
	}
	switch cause := context.Cause(runCtx); {
	case ctx.Err() != nil:
		// The engine's own deadline or a stop: not the program's fault.
		ep.TerminationReason = episode.TerminationError
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			ep.TerminationReason = episode.TerminationTimeout
		}
		ep.Error = fmt.Sprintf("%s stopped: %v", w.name(), ctx.Err())
		return ep, ctx.Err()
	case errors.Is(cause, errMaxCalls):
		return fail(ep, fmt.Errorf("%s made more than workflow.args.max_calls=%d model calls and was stopped%s", w.name(), w.maxCalls, stderrLine()))
	case errors.Is(cause, errTimeout):
		ep.TerminationReason = episode.TerminationTimeout
		ep.Error = fmt.Sprintf("%s ran longer than %s and was killed with its process group%s", w.name(), limitKey, stderrLine())
		return ep, errors.New(ep.Error)
	}
	if runErr != nil {
		if st.PromptTooLong > 0 {
			// The conversation outgrew the model: an ending, not a failure.
			ep.TerminationReason = episode.TerminationMaxPromptLength
			ep.Error = st.LastError
			return ep, nil
		}
		var ee *exec.ExitError
		if errors.As(runErr, &ee) {
			return fail(ep, fmt.Errorf("%s %s%s%s", w.name(), exitText(ee), stderrLine(), gatewayNote(st)))
		}
		var se *sandboxExit
		if errors.As(runErr, &se) {
			return fail(ep, fmt.Errorf("%s in its sandbox: %s%s%s", w.name(), se.res.Reason(), stderrLine(), gatewayNote(st)))
		}
		return fail(ep, fmt.Errorf("%s could not run: %v", w.name(), runErr))
	}
	if len(traces) == 0 {
		return fail(ep, fmt.Errorf("%s made no model call through its session (OPENAI_BASE_URL or ANTHROPIC_BASE_URL), so there is nothing to train on%s", w.name(), gatewayNote(st)))
	}
	res := verdict
	if res == nil {
		o, err := w.result(task, stdout.LastLine())
		if err != nil {
			return fail(ep, fmt.Errorf("%s: %v%s", w.name(), err, stderrLine()))
		}
		res = &o
	}
	w.reward(ep, *res)
	ep.TerminationReason = episode.TerminationEnvDone
	if last := traces[len(traces)-1]; last.FinishReason == "length" {
		ep.TerminationReason = episode.TerminationMaxResponseLength
	}
	return ep, nil
}

var errTimeout = errors.New("program timeout")

// runGroup runs cmd to its end, then kills what is left of its process
// group: children a program forked and left behind die with it. Output
// goes through pipes of our own so that Wait returns when the program
// exits, not when the last descendant holding its stdout does.
func runGroup(cmd *exec.Cmd, stdout, stderr io.Writer) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	var copies sync.WaitGroup
	copies.Go(func() { _, _ = io.Copy(stdout, outR) })
	copies.Go(func() { _, _ = io.Copy(stderr, errR) })
	err = cmd.Wait()
	_ = procgroup.Kill(cmd)
	done := make(chan struct{})
	go func() { copies.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(procgroup.DefaultWaitDelay):
		// A descendant that left the group still holds a pipe.
	}
	outR.Close()
	errR.Close()
	return err
}

func exitText(ee *exec.ExitError) string {
	if ee.ExitCode() >= 0 {
		return "exited with status " + strconv.Itoa(ee.ExitCode())
	}
	return "was killed (" + ee.String() + ")"
}

func gatewayNote(st gateway.SessionStats) string {
	if st.LastError == "" {
		return ""
	}
	return "; its last refused model call: " + clip(st.LastError, 300)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// outcome is what the program's last line says.
type outcome struct {
	reward  float64
	correct bool
	info    map[string]any
}

// result reads the program's last stdout line: {"answer": ...} scored by
// the env's reward function, or {"reward": x} (with an optional
// "is_correct") taken as is.
func (w *Program) result(task episode.Task, line string) (outcome, error) {
	const want = `its last stdout line must be a JSON object {"answer": ...} or {"reward": x}`
	if line == "" {
		return outcome{}, errors.New("printed nothing on stdout; " + want)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &obj); err != nil || obj == nil {
		return outcome{}, fmt.Errorf("%s, got %q", want, clip(line, 200))
	}
	if raw, ok := obj["reward"]; ok {
		var r float64
		if err := json.Unmarshal(raw, &r); err != nil || math.IsNaN(r) || math.IsInf(r, 0) {
			return outcome{}, fmt.Errorf("\"reward\" must be a finite number, got %s", clip(string(raw), 100))
		}
		o := outcome{reward: r, correct: r > 0}
		if c, ok := obj["is_correct"]; ok {
			if err := json.Unmarshal(c, &o.correct); err != nil {
				return outcome{}, fmt.Errorf("\"is_correct\" must be true or false, got %s", clip(string(c), 100))
			}
		}
		return o, nil
	}
	raw, ok := obj["answer"]
	if !ok {
		return outcome{}, fmt.Errorf("%s, got %q", want, clip(line, 200))
	}
	var answer string
	if err := json.Unmarshal(raw, &answer); err != nil {
		answer = string(raw) // a number or an object: scored as its JSON text
	}
	if w.score == nil {
		return outcome{}, errors.New("printed an answer, but no env.name scores it; set env.name (arith, countdown, math...) or print {\"reward\": x}")
	}
	r, correct, info, err := w.score(task, answer)
	if err != nil {
		return outcome{}, err
	}
	return outcome{reward: r, correct: correct, info: info}, nil
}

// attach makes the session's traces the episode's trajectories.
func (w *Program) attach(ep *episode.Episode, traces []gateway.Trace, episodeID string) {
	AttachTraces(ep, traces, episodeID, Name)
}

// AttachTraces makes a gateway session's traces the episode's
// trajectories (named name), with their exact tokens: the one way the
// program and harness workflows turn calls into steps.
func AttachTraces(ep *episode.Episode, traces []gateway.Trace, episodeID, name string) {
	ep.Trajectories = gateway.Trajectories(traces, episodeID, name)
	for i := range ep.Trajectories {
		ep.Trajectories[i].Task = ep.Task
	}
	ep.Metrics["trajectories"] = float64(len(ep.Trajectories))
}

// reward gives every trajectory the program's reward on its last step,
// as single-turn envs do, and shapes the Monte Carlo returns.
func (w *Program) reward(ep *episode.Episode, o outcome) {
	ApplyReward(ep, o.reward, o.correct, o.info, w.gamma)
}

// ApplyReward gives every trajectory of ep the episode's reward on its
// last step (with info) and shapes the Monte Carlo returns with gamma.
func ApplyReward(ep *episode.Episode, reward float64, correct bool, info map[string]any, gamma float64) {
	o := outcome{reward: reward, correct: correct, info: info}
	ep.IsCorrect = o.correct
	ep.Metrics["reward"] = o.reward
	for i := range ep.Trajectories {
		tr := &ep.Trajectories[i]
		tr.Reward = o.reward
		if n := len(tr.Steps); n > 0 {
			last := &tr.Steps[n-1]
			last.Reward, last.Done = o.reward, true
			for k, v := range o.info {
				last.Info[k] = v
			}
			last.Info["is_correct"] = o.correct
		}
		if err := workflow.ShapeRewards(tr.Steps, 0, gamma); err != nil {
			ep.TerminationReason, ep.Error = episode.TerminationError, "step rewards: "+err.Error()
		}
	}
}

func fail(ep *episode.Episode, err error) (*episode.Episode, error) {
	ep.TerminationReason = episode.TerminationError
	ep.IsCorrect = false
	ep.Error = err.Error()
	return ep, err
}

// sessionEnv is what a program learns of its episode (docs/gateway.md,
// the per-episode contract): the session's OpenAI and Anthropic base
// URLs under base (the session's URL as the program reaches it), its
// token as both APIs' key, and the session and episode ids.
func sessionEnv(base string, sess *gateway.Session, episodeID string) map[string]string {
	return map[string]string{
		"OPENAI_BASE_URL":    base + "/v1",
		"ANTHROPIC_BASE_URL": base,
		"OPENAI_API_KEY":     sess.Token,
		"ANTHROPIC_API_KEY":  sess.Token,
		"RLLM_SESSION_ID":    sess.ID,
		"RLLM_EPISODE_ID":    episodeID,
	}
}
