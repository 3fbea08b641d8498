// Package harness is the workflow that trains coding harnesses (Codex,
// Claude Code, OpenCode, Qwen Code, pi: pkg/harness's registry). Each
// episode runs the harness once, headless, with the task's instruction as
// its prompt, in a fresh sandbox workspace holding a copy of the task's
// files; the harness's only network is its own gateway session, served
// on a Unix socket bound into the sandbox. The session's traces become
// the episode's trajectories with their exact tokens (the program
// workflow's path); calls the harness makes besides its agent turns
// (titles, probes: calls offering no tools) are recorded and marked, and
// do not train unless asked. The reward comes from a verifier run in the
// same workspace after the harness, or from env.name scoring the final
// answer.
//
// Select it with workflow.name=harness and workflow.args.harness=NAME.
package harness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/harness"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/usererr"
	"github.com/rllm-org/rllm-go/pkg/workflow"
	"github.com/rllm-org/rllm-go/pkg/workflow/program"
)

// Params are workflow.args of the harness workflow.
type Params struct {
	Harness        string  `arg:"harness" doc:"the harness to run (rllm harness list): codex, claude-code, opencode, qwen-code, pi, mini-swe-agent, aider"`
	Dir            string  `arg:"dir" doc:"where harnesses are installed; empty: rllm's cache ($XDG_CACHE_HOME/rllm/harnesses; /var/cache/rllm/harnesses for root)"`
	Workspace      string  `arg:"workspace" doc:"a host directory copied into each episode's fresh workspace (the repository the harness works on); empty: an empty workspace"`
	WorkDir        string  `arg:"workdir" default:"/work" doc:"where the workspace is inside the sandbox; the harness starts there"`
	Verifier       string  `arg:"verifier" doc:"a command run by /bin/sh -c in the same workspace after the harness (its Python with PYTHONSAFEPATH=1 and PYTHONNOUSERSITE=1: nothing of the workspace ahead of the host's modules): exit status 0 is reward 1, any other 0; empty: env.name scores the harness's final answer"`
	TimeoutS       float64 `arg:"timeout_s" default:"600" range:"(0,)" doc:"seconds the harness may run; then its sandbox is killed and the episode ends with timeout"`
	MaxCalls       int     `arg:"max_calls" default:"64" range:"[1,)" doc:"model calls the harness may make per episode; the next one gets 429 and the harness is stopped"`
	Sandbox        string  `arg:"sandbox" default:"bwrap" doc:"the sandbox the harness runs in, its only network its session: bwrap (the host's /usr, the workspace writable, the rest read-only) or docker (a container of the local base image; harnesses that bring their own Node or are native binaries)"`
	MemoryMB       int     `arg:"memory_mb" default:"32768" range:"[256,)" doc:"address space of each process of the harness (RLIMIT_AS; Node and Bun reserve far more than they use)"`
	Processes      int     `arg:"processes" default:"1024" range:"[16,)" doc:"processes and threads of the sandbox's user at once (RLIMIT_NPROC)"`
	TrainAuxiliary bool    `arg:"train_auxiliary" default:"false" doc:"train the harness's auxiliary calls too (calls offering no tools: titles, probes); by default they are recorded with a zero loss mask"`
	Gamma          float64 `arg:"gamma" default:"1" range:"[0,1]" doc:"discount of the Monte Carlo return stored in each step"`
}

// Name is the workflow's registered name.
const Name = "harness"

func init() {
	workflow.Register(workflow.Definition{
		Name:        Name,
		Description: "runs a coding harness (rllm harness list) per episode in a sandbox whose only network is its gateway session; trains on the exact tokens it sampled",
		Params:      Params{},
		New: func(args registry.Values, deps workflow.Deps) (workflow.Workflow, error) {
			p := registry.As[Params](args)
			if deps.Workspaces != nil && p.Verifier == "" {
				// env.name=task: the task's container and its verifier.
				return NewForTask(p, deps, deps.Workspaces)
			}
			return New(p, deps)
		},
	})
}

// Workflow runs one harness per episode.
type Workflow struct {
	p     Params
	entry harness.Entry
	deps  workflow.Deps
	score func(task episode.Task, answer string) (float64, bool, map[string]any, error)
	files []sandbox.File
	task  Task
	// opener and gateway: nil means the process-wide ones.
	opener  sandbox.Opener
	gateway *program.Gateway
}

// New builds the workflow, checking its arguments and that the harness
// is installed.
func New(p Params, deps workflow.Deps) (*Workflow, error) { return build(p, deps, nil) }

// NewForTask builds the workflow for a task env that provides each
// episode's workspace and verifier (Task): no workflow.args.verifier or
// scored env is needed.
func NewForTask(p Params, deps workflow.Deps, t Task) (*Workflow, error) {
	if t == nil {
		return nil, errors.New("workflow harness: NewForTask needs a Task")
	}
	return build(p, deps, t)
}

func build(p Params, deps workflow.Deps, t Task) (*Workflow, error) {
	if deps.Sampler == nil {
		return nil, errors.New("workflow harness: Deps.Sampler is nil")
	}
	if p.Harness == "" {
		return nil, usererr.Errorf("workflow.args.harness is not set; name one of: %s (rllm harness list)", strings.Join(harness.Names(), ", "))
	}
	if p.Sandbox != "bwrap" && p.Sandbox != "docker" {
		return nil, usererr.Errorf("workflow.args.sandbox %q: use bwrap or docker", p.Sandbox)
	}
	e, err := harness.Lookup(p.Harness)
	if err != nil {
		return nil, usererr.Errorf("workflow.args.harness: %v", err)
	}
	if !strings.HasPrefix(p.WorkDir, "/") || p.WorkDir == "/" || strings.Contains(p.WorkDir, "..") {
		return nil, usererr.Errorf("workflow.args.workdir %q: give an absolute directory of its own inside the sandbox (/work, /app, /testbed)", p.WorkDir)
	}
	if p.Dir == "" {
		return nil, usererr.Errorf("workflow.args.dir is empty; name the directory harnesses are installed in (rllm harness install puts them in its cache)")
	}
	if !e.Installed(p.Dir) {
		return nil, harness.NotInstalled("workflow.args.harness", e, p.Dir)
	}
	w := &Workflow{p: p, entry: e, deps: deps, task: t}
	if p.Verifier == "" && t == nil {
		if deps.Env.Name == "" {
			return nil, usererr.Errorf("workflow.args.verifier is empty and no env.name scores the harness's answer; set one of them")
		}
		if w.score, err = program.AnswerScorer(deps.Env); err != nil {
			return nil, err
		}
	}
	if p.Workspace != "" {
		if w.files, err = sandbox.ReadTree(p.Workspace); err != nil {
			return nil, usererr.Errorf("workflow.args.workspace: %v", err)
		}
	}
	return w, nil
}

// Task is the hook a task env (env.name=task: the Harbor format, a
// container per task) hands the harness workflow: where the episode's
// workspace comes from and how it is scored after. The workflow opens the
// workspace Workspace describes (adding the harness's install, read-only,
// and its session as the only network), copies the files in, runs the
// harness in it, then calls Verify in the same workspace (the verifier
// sees what the harness left) and takes its reward.
type Task = env.Workspaces

// WithOpener makes the workflow open its workspaces with o (a task env's
// container engine, a test's) instead of the process-wide bwrap opener.
func (w *Workflow) WithOpener(o sandbox.Opener) *Workflow { w.opener = o; return w }

// WithGateway makes the workflow open its sessions on g.
func (w *Workflow) WithGateway(g *program.Gateway) *Workflow { w.gateway = g; return w }

// instruction is the task's prompt.
func instruction(task episode.Task) (string, error) {
	for _, k := range []string{"instruction", "question", "prompt", "problem"} {
		if s, ok := task[k].(string); ok && strings.TrimSpace(s) != "" {
			return s, nil
		}
	}
	return "", errors.New("the task has no instruction (a string column instruction, question, prompt or problem)")
}

// Auxiliary reports whether a call is one of the harness's own chores
// (a session title, a next-speaker check, a small-model probe) rather
// than an agent turn: harnesses offer their tools on every agent turn,
// and these calls offer none.
func Auxiliary(t gateway.Trace) bool { return len(t.Tools) == 0 }

// Run runs the harness once for task.
func (w *Workflow) Run(ctx context.Context, task episode.Task, episodeID string) (*episode.Episode, error) {
	ep := &episode.Episode{ID: episodeID, Task: task, TerminationReason: episode.TerminationUnknown, Metrics: map[string]float64{}}
	prompt, err := instruction(task)
	if err != nil {
		return fail(ep, err)
	}
	g := w.gateway
	if g == nil {
		if g, err = program.Shared(); err != nil {
			return fail(ep, err)
		}
	}
	opener := w.opener
	if opener == nil {
		if opener, err = program.SandboxOpener(ctx, w.p.Sandbox); err != nil {
			return fail(ep, err)
		}
	}
	timeout := time.Duration(w.p.TimeoutS * float64(time.Second))
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	sess, err := g.OpenSession(ctx, w.deps, w.p.MaxCalls, func() { stop(errMaxCalls) }, map[string]any{"episode_id": episodeID, "harness": w.entry.Name})
	if err != nil {
		return fail(ep, fmt.Errorf("opening a gateway session: %w", err))
	}
	defer g.GW.Close(sess.ID)
	sock, closeSock, err := program.ServeSession(g.GW, sess.ID)
	if err != nil {
		return fail(ep, err)
	}
	defer closeSock()

	const port = sandbox.DefaultPort
	spec := sandbox.WorkspaceSpec{
		WorkDir: w.p.WorkDir,
		Limits: sandbox.Limits{WallTime: timeout, CPUTime: timeout, MemoryBytes: int64(w.p.MemoryMB) << 20,
			Processes: w.p.Processes, FileSizeBytes: 1 << 30, OutputBytes: 16 << 20},
	}
	files := w.files
	if w.task != nil {
		// The task's own workspace (its image, its directory, its files).
		var err error
		if opener, spec, files, err = w.task.Workspace(ctx, task, spec); err != nil {
			return fail(ep, fmt.Errorf("the task's workspace: %w", err))
		}
	}
	// The harness's time: workflow.args.timeout_s, or the task's own
	// bound of the agent's time when that is smaller (the task's spec
	// sizes the container's life for the verifier too).
	limit, limitKey := timeout, fmt.Sprintf("workflow.args.timeout_s=%g", w.p.TimeoutS)
	if at, ok := w.task.(env.AgentTimer); ok {
		d, err := at.AgentTimeout(task)
		if err != nil {
			return fail(ep, fmt.Errorf("the task's agent timeout: %w", err))
		}
		if d > 0 && d < limit {
			limit, limitKey = d, fmt.Sprintf("the task's [agent] timeout_sec = %g", d.Seconds())
		}
	}
	// Whatever the task says, the harness's install is shown read-only
	// and its only network is its session.
	spec.ReadOnly = append(spec.ReadOnly, w.entry.Dir(w.p.Dir))
	spec.Network = sandbox.Network{Socket: sock, Port: port}
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels["rllm.harness"], spec.Labels["rllm.episode"] = w.entry.Name, episodeID
	workDir := spec.WorkDir
	if workDir == "" {
		workDir = sandbox.WorkDir
	}
	ws, err := opener.Open(runCtx, spec)
	if err != nil {
		return fail(ep, fmt.Errorf("opening the harness's sandbox: %w", err))
	}
	// The harness's time runs from its sandbox's start.
	deadline := time.Now().Add(limit)
	defer ws.Close(context.WithoutCancel(ctx))
	if len(files) > 0 {
		if err := ws.CopyIn(runCtx, workDir, files); err != nil {
			return fail(ep, fmt.Errorf("copying the task's files into the sandbox: %w", err))
		}
	}
	base := fmt.Sprintf("http://127.0.0.1:%d/sessions/%s", port, sess.ID)
	r, err := w.entry.Render(harness.Session{BaseURL: base + "/v1", AnthropicURL: base, Key: sess.Token,
		Home: sandbox.HomeDir, Prompt: prompt})
	if err != nil {
		return fail(ep, err)
	}
	if err := ws.CopyIn(runCtx, sandbox.HomeDir, r.Files); err != nil {
		return fail(ep, fmt.Errorf("writing the harness's settings: %w", err))
	}
	env := append([]string{"HOME=" + sandbox.HomeDir, "PATH=" + w.entry.BinDir(w.p.Dir) + ":$PATH", // the harness, then the image's tools
		"TERM=dumb", "NO_COLOR=1", "CI=1"}, r.Env...)
	began := time.Now()
	var res sandbox.Result
	var runErr error
	if left := time.Until(deadline); left > 0 {
		res, runErr = ws.Exec(runCtx, sandbox.ExecRequest{Command: r.Command, Dir: workDir, Env: env, Limits: sandbox.Limits{WallTime: left}})
	} else {
		res = sandbox.Result{ExitCode: 137, Limit: sandbox.LimitWallTime}
	}
	ep.Metrics["harness_seconds"] = time.Since(began).Seconds()
	ep.Metrics["exit_code"] = float64(res.ExitCode)
	if res.Net != nil {
		ep.Metrics["denied_connections"] = float64(res.Net.Denied)
		ep.Metrics["forwarded_connections"] = float64(res.Net.Forwarded)
	}

	traces := sess.Traces()
	st := sess.Stats()
	if len(traces) > 0 {
		// Start-up: from the sandbox's start to the first answered call.
		ep.Metrics["first_call_seconds"] = traces[0].Timestamp.Sub(began).Seconds()
	}
	w.attach(ep, traces, episodeID)
	// count_tokens samples nothing and leaves no trace; counted beside
	// the auxiliary calls.
	ep.Metrics["count_tokens_calls"] = float64(st.CountTokens)
	name := "harness " + w.entry.Name
	stderrLine := func() string {
		if l := lastLine(res.Stderr); l != "" {
			return "; its stderr ends: " + clip(l, 300)
		}
		if l := lastLine(res.Stdout); l != "" {
			return "; its output ends: " + clip(l, 300)
		}
		return ""
	}
	switch {
	case ctx.Err() != nil:
		ep.TerminationReason = episode.TerminationError
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			ep.TerminationReason = episode.TerminationTimeout
		}
		ep.Error = fmt.Sprintf("%s stopped: %v", name, ctx.Err())
		return ep, ctx.Err()
	case errors.Is(context.Cause(runCtx), errMaxCalls):
		return fail(ep, fmt.Errorf("%s made more than workflow.args.max_calls=%d model calls and was stopped", name, w.p.MaxCalls))
	case runErr != nil:
		return fail(ep, fmt.Errorf("%s: %w", name, runErr))
	case res.Limit == sandbox.LimitWallTime:
		ep.TerminationReason = episode.TerminationTimeout
		ep.Error = fmt.Sprintf("%s ran longer than %s and was killed with its sandbox%s", name, limitKey, stderrLine())
		return ep, errors.New(ep.Error)
	case !res.OK():
		if st.PromptTooLong > 0 {
			ep.TerminationReason = episode.TerminationMaxPromptLength
			ep.Error = st.LastError
			return ep, nil
		}
		note := ""
		if st.LastError != "" {
			note = "; its last refused model call: " + clip(st.LastError, 300)
		}
		out := "" // Reason ends with stderr's last line; else show stdout's
		if lastLine(res.Stderr) == "" {
			out = stderrLine()
		}
		return fail(ep, fmt.Errorf("%s failed: %s%s%s", name, res.Reason(), out, note))
	case len(traces) == 0 && st.PromptTooLong > 0:
		// Its first prompt outgrew the model (a harness's system prompt
		// and tools are thousands of tokens): an ending, not a failure.
		ep.TerminationReason = episode.TerminationMaxPromptLength
		ep.Error = st.LastError
		return ep, nil
	case len(traces) == 0:
		note := ""
		if st.LastError != "" {
			note = "; its last refused model call: " + clip(st.LastError, 300)
		}
		return fail(ep, fmt.Errorf("%s made no model call through its session, so there is nothing to train on%s%s", name, note, stderrLine()))
	}

	reward, correct, info, err := w.reward(runCtx, ws, task, traces)
	if err != nil {
		return fail(ep, err)
	}
	program.ApplyReward(ep, reward, correct, info, w.p.Gamma)
	ep.TerminationReason = episode.TerminationEnvDone
	if last := traces[len(traces)-1]; last.FinishReason == "length" {
		ep.TerminationReason = episode.TerminationMaxResponseLength
	}
	return ep, nil
}

var errMaxCalls = errors.New("max calls")

// VerifierPythonEnv is workflow.args.verifier's Python: the workspace
// the harness wrote is never ahead of the host's modules. Python 3.11+
// puts neither the current directory nor the script's ahead of them
// (python3 -m pytest in the workspace imports no pytest.py or
// unittest.py of the harness's), and reads no user site of the home the
// harness could write (no .pth, no sitecustomize.py there).
var VerifierPythonEnv = []string{"PYTHONSAFEPATH=1", "PYTHONNOUSERSITE=1"}

// attach makes the traces the episode's trajectories and marks the
// auxiliary calls (zero loss mask unless train_auxiliary).
func (w *Workflow) attach(ep *episode.Episode, traces []gateway.Trace, episodeID string) {
	program.AttachTraces(ep, traces, episodeID, Name+"/"+w.entry.Name)
	aux := map[string]bool{}
	for _, t := range traces {
		if Auxiliary(t) {
			aux[t.TraceID] = true
		}
	}
	n := 0
	for i := range ep.Trajectories {
		for j := range ep.Trajectories[i].Steps {
			s := &ep.Trajectories[i].Steps[j]
			id, _ := s.Info["trace_id"].(string)
			if !aux[id] {
				continue
			}
			n++
			s.Info["auxiliary"] = true
			if !w.p.TrainAuxiliary {
				for k := range s.LossMask {
					s.LossMask[k] = 0
				}
			}
		}
	}
	ep.Metrics["model_calls"] = float64(len(traces))
	ep.Metrics["auxiliary_calls"] = float64(n)
}

// reward scores the episode: the task's verifier or workflow.args.verifier
// in the same workspace, or the env's reward on the final answer (the
// last agent turn's text).
func (w *Workflow) reward(ctx context.Context, ws sandbox.Workspace, task episode.Task, traces []gateway.Trace) (float64, bool, map[string]any, error) {
	if w.task != nil {
		return w.task.Verify(ctx, ws, task)
	}
	if w.p.Verifier != "" {
		// Nothing the harness left running may change what it verifies.
		if err := ws.KillAll(ctx); err != nil {
			return 0, false, nil, fmt.Errorf("stopping what the harness left running: %w", err)
		}
		res, err := ws.Exec(ctx, sandbox.ExecRequest{Command: []string{"/bin/sh", "-c", w.p.Verifier},
			Env: append([]string{"HOME=" + sandbox.HomeDir}, VerifierPythonEnv...), Limits: sandbox.Limits{WallTime: 10 * time.Minute, CPUTime: 10 * time.Minute}})
		if err != nil {
			return 0, false, nil, fmt.Errorf("running workflow.args.verifier: %w", err)
		}
		info := map[string]any{"verifier_exit_code": res.ExitCode, "verifier_output": clip(string(res.Stdout)+string(res.Stderr), 2000)}
		if res.OK() {
			return 1, true, info, nil
		}
		return 0, false, info, nil
	}
	answer := ""
	for i := len(traces) - 1; i >= 0; i-- {
		if !Auxiliary(traces[i]) {
			answer = traces[i].Response.Content
			break
		}
	}
	return w.score(task, answer)
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func fail(ep *episode.Episode, err error) (*episode.Episode, error) {
	ep.TerminationReason = episode.TerminationError
	ep.IsCorrect = false
	ep.Error = err.Error()
	return ep, err
}

// Bound names the key that ends an episode the harness never finishes
// (rollout.Bounder).
func (w *Workflow) Bound() string {
	return fmt.Sprintf("workflow.args.timeout_s=%g ends each %s episode", w.p.TimeoutS, w.entry.Name)
}
