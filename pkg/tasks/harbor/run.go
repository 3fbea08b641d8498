package harbor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Where the verifier's files live in the container (Harbor's paths).
const (
	LogsDir        = "/logs"
	VerifierLogDir = "/logs/verifier"
	RewardTxt      = "/logs/verifier/reward.txt"
	RewardJSON     = "/logs/verifier/reward.json"
	// RewardRLLM is where rLLM's own verifiers may write reward.json;
	// read after the two above.
	RewardRLLM    = "/tmp/rllm/reward.json"
	TestsMount    = "/tests"
	SolutionMount = "/solution"
)

// Bounds of what is read back.
const (
	maxRewardBytes  = 64 << 10
	verifierOutput  = 4 << 20 // the verifier's stdout and stderr, each, before it is killed
	workspaceSlack  = 2 * time.Minute
	defaultProcs    = 1024
	outputKeptChars = 4000
)

// Engine opens tasks' containers on a Docker daemon: the task's image
// built from environment/ through the Engine API (sandbox.Docker.
// BuildImage: tagged by the context's hash and reused) or named by
// docker_image.
type Engine struct {
	D *sandbox.Docker

	mu     sync.Mutex
	images map[string]string // task dir → image
}

// NewEngine wraps an open docker backend.
func NewEngine(d *sandbox.Docker) *Engine {
	return &Engine{D: d, images: map[string]string{}}
}

var shared struct {
	mu sync.Mutex
	e  *Engine
}

// SharedEngine is the process-wide engine, opened on first use with the
// process's sandbox settings (sandbox.Configured: sandbox.docker.*,
// sandbox.env, sandbox.bind_ro), whatever sandbox.backend says: tasks
// run in containers. A daemon that does not answer is a user error
// naming what to start; it is probed again on the next call.
func SharedEngine(ctx context.Context) (*Engine, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.e != nil {
		return shared.e, nil
	}
	c := sandbox.Configured()
	c.Backend = sandbox.BackendDocker
	if c.Limits == (sandbox.Limits{}) {
		c.Limits = sandbox.DefaultLimits
	}
	d, err := sandbox.OpenDocker(ctx, c)
	if err != nil {
		var ue *usererr.Error
		if errors.As(err, &ue) && ue.Subject == "sandbox.backend" {
			// bwrap, the other fix the sandbox names, runs no task.
			return nil, &usererr.Error{Subject: "env.name=task", Msg: "tasks run in Docker containers, and " + ue.Msg,
				Fix: "start a Docker daemon (scripts/docker-setup.sh starts one and builds the local base image; DOCKER_HOST names where it listens)"}
		}
		return nil, err
	}
	shared.e = NewEngine(d)
	return shared.e, nil
}

// SwapSharedEngine makes e the process-wide engine and returns the one
// it replaces; nil makes the next SharedEngine open one with the settings
// of then (a process that changes DOCKER_HOST, such as a test that must
// see no daemon whatever ran before it).
func SwapSharedEngine(e *Engine) *Engine {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	old := shared.e
	shared.e = e
	return old
}

// Image is the task's image: docker_image, or the image built from its
// environment/ (built once per process and task, and by the daemon once
// per content). A Dockerfile that fails is an error naming the task and
// ending with the build log's last lines.
func (e *Engine) Image(ctx context.Context, t *Task) (string, error) {
	if t.Config.DockerImage != "" {
		return t.Config.DockerImage, nil
	}
	e.mu.Lock()
	img, ok := e.images[t.Dir]
	e.mu.Unlock()
	if ok {
		return img, nil
	}
	bctx, cancel := context.WithTimeout(ctx, t.Config.BuildTimeout)
	defer cancel()
	img, err := e.D.BuildImage(bctx, filepath.Join(t.Dir, EnvironmentDir), t.Dockerfile)
	if err != nil {
		if bctx.Err() != nil && ctx.Err() == nil {
			return "", fmt.Errorf("task %s: building its image took longer than [environment] build_timeout_sec = %g", t.Name, t.Config.BuildTimeout.Seconds())
		}
		return "", fmt.Errorf("task %s: %w", t.Name, err)
	}
	e.mu.Lock()
	e.images[t.Dir] = img
	e.mu.Unlock()
	return img, nil
}

// DefaultAgentUser is who the agent runs as when the task names no
// [agent] user and the image's USER is root: an unprivileged UID:GID no
// image file belongs to, which owns the working directory and
// sandbox.HomeDir (its HOME).
const DefaultAgentUser = "10001:10001"

// Spec is the workspace of one episode of t on image: the image's
// WORKDIR and environment (over rllm's defaults), [environment.env], the
// task's CPUs, memory and storage, processes bounded, no network, alive
// for the agent's and the verifier's time and some slack, its commands
// run as the agent's user (Plan).
func (e *Engine) Spec(ctx context.Context, t *Task, image string) (sandbox.WorkspaceSpec, error) {
	p, err := e.Plan(ctx, t, image)
	return p.Agent, err
}

// Plan is how one episode of a task runs: the agent's workspace, and
// where and as whom the verifier runs after it.
type Plan struct {
	// Agent is the agent's workspace.
	Agent sandbox.WorkspaceSpec
	// AgentRoot reports an agent that runs as root ([agent] user =
	// "root" or 0).
	AgentRoot bool
	// Fresh: the verifier runs in a container of its own (VerifierSpec)
	// with the agent's working directory copied in, not in the agent's
	// (restarted); a root agent's task unless [verifier] system_state or
	// its working directory is /.
	Fresh        bool
	VerifierSpec sandbox.WorkspaceSpec
	// VerifierUser and VerifierHome: who the verifier runs as ([verifier]
	// user, else the image's USER) and its HOME.
	VerifierUser, VerifierHome string
}

// Plan reads the image's configuration and lays the episode out.
func (e *Engine) Plan(ctx context.Context, t *Task, image string) (Plan, error) {
	ic, err := e.D.ImageConfig(ctx, image)
	if err != nil {
		return Plan{}, fmt.Errorf("task %s: %w", t.Name, err)
	}
	dir := ic.WorkDir
	if dir == "" || !path.IsAbs(dir) {
		dir = "/"
	}
	dir = path.Clean(dir)
	imageEnv := append([]string{"HOME=/root"}, ic.Env...)
	agentUser, root := t.Config.AgentUser, false
	switch {
	case agentUser == "" && isRoot(ic.User):
		agentUser = DefaultAgentUser
	case agentUser == "":
		// The image's own user: its owner chose what it may write.
	case isRoot(agentUser):
		agentUser, root = "0:0", true
	}
	env := slices.Clone(imageEnv)
	if agentUser != "" && !root {
		env = append(env, "HOME="+sandbox.HomeDir)
	}
	for _, k := range slices.Sorted(maps.Keys(t.Config.Env)) {
		env = append(env, k+"="+t.Config.Env[k])
	}
	life := t.Config.AgentTimeout + t.Config.VerifierTimeout + workspaceSlack
	storage := t.Config.StorageMB << 20
	limits := sandbox.Limits{WallTime: life, CPUTime: life, MemoryBytes: t.Config.MemoryMB << 20, Processes: defaultProcs,
		FileSizeBytes: storage, OutputBytes: verifierOutput, DiskBytes: storage, MilliCPUs: int64(math.Ceil(t.Config.CPUs * 1000))}
	p := Plan{
		Agent:        sandbox.WorkspaceSpec{Image: image, WorkDir: dir, Env: env, User: agentUser, Limits: limits, Labels: map[string]string{"org.rllm.task": t.Name}},
		AgentRoot:    root,
		VerifierUser: t.Config.VerifierUser,
		VerifierHome: "/root",
	}
	if p.VerifierUser == "" {
		p.VerifierUser = ic.User
	}
	if p.VerifierUser == "" || isRoot(p.VerifierUser) {
		p.VerifierUser = "0:0"
	}
	for _, kv := range imageEnv {
		if h, ok := strings.CutPrefix(kv, "HOME="); ok {
			p.VerifierHome = h
		}
	}
	if p.AgentRoot && !t.Config.SystemState && dir != "/" {
		p.Fresh = true
		vlife := t.Config.VerifierTimeout + workspaceSlack
		vl := limits
		vl.WallTime, vl.CPUTime = vlife, vlife
		venv := slices.Clone(imageEnv)
		for _, k := range slices.Sorted(maps.Keys(t.Config.Env)) {
			venv = append(venv, k+"="+t.Config.Env[k])
		}
		p.VerifierSpec = sandbox.WorkspaceSpec{Image: image, WorkDir: dir, Env: venv, Limits: vl,
			Labels: map[string]string{"org.rllm.task": t.Name, "org.rllm.verifier": "1"}}
	}
	return p, nil
}

// isRoot reports a user that is root: empty (Docker's default), root,
// 0, with any group.
func isRoot(u string) bool {
	name, _, _ := strings.Cut(u, ":")
	return name == "" || name == "root" || name == "0"
}

// Run is one episode of a task: its open workspace, and when it started.
type Run struct {
	Task    *Task
	WS      sandbox.Workspace
	WorkDir string
	Started time.Time
	// Plan is how the episode runs.
	Plan Plan
	e    *Engine
}

// Open builds (or reuses) the task's image and opens a workspace of it.
func (e *Engine) Open(ctx context.Context, t *Task) (*Run, error) {
	img, err := e.Image(ctx, t)
	if err != nil {
		return nil, err
	}
	p, err := e.Plan(ctx, t, img)
	if err != nil {
		return nil, err
	}
	ws, err := e.D.Open(ctx, p.Agent)
	if err != nil {
		if errors.Is(err, sandbox.ErrNoSuchUser) && t.Config.AgentUser != "" {
			file := filepath.Join(t.Dir, ConfigFile)
			text, _ := readBounded(file, 1<<20)
			return nil, fileErr(file, keyLine(string(text), "agent", "user"), `name a user of the image, a UID (1000), or "root"`,
				"agent.user = %q is not a user of the task's image", t.Config.AgentUser)
		}
		return nil, fmt.Errorf("task %s: opening its container: %w", t.Name, err)
	}
	return &Run{Task: t, WS: ws, WorkDir: p.Agent.WorkDir, Started: time.Now(), Plan: p, e: e}, nil
}

// Deadline is when the agent's time ([agent] timeout_sec) is over.
func (r *Run) Deadline() time.Time { return r.Started.Add(r.Task.Config.AgentTimeout) }

// Close removes the workspace.
func (r *Run) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return r.WS.Close(ctx)
}

// Oracle runs the task's solution/solve.sh in the workspace (copied to
// /solution), as the agent, within [agent] timeout_sec.
func (r *Run) Oracle(ctx context.Context) (sandbox.Result, error) {
	t := r.Task
	if !t.HasSolution {
		return sandbox.Result{}, fmt.Errorf("task %s has no %s", t.Name, SolveScript)
	}
	files, err := sandbox.ReadTree(filepath.Join(t.Dir, SolutionDir))
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("task %s: %w", t.Name, err)
	}
	if err := r.WS.CopyIn(ctx, SolutionMount, files); err != nil {
		return sandbox.Result{}, err
	}
	left := time.Until(r.Deadline())
	if left <= 0 {
		return sandbox.Result{Limit: sandbox.LimitWallTime}, nil
	}
	return r.WS.Exec(ctx, sandbox.ExecRequest{Command: []string{"bash", path.Join(SolutionMount, "solve.sh")}, Dir: r.WorkDir,
		Env: envList(t.Config.SolutionEnv), Limits: sandbox.Limits{WallTime: left, CPUTime: left}})
}

// Verdict is what the verifier gave.
type Verdict struct {
	Reward float64
	// Info holds the verifier's exit status, its output (bounded), the
	// reward file read and, when there is no reward, why.
	Info map[string]any
}

// Correct reports a full reward.
func (v Verdict) Correct() bool { return v.Reward >= 1 }

// Verify runs the task's verifier after the agent, out of the agent's
// reach. Nothing the agent started survives into it: the agent's
// container is restarted (every process of it killed), or, for a root
// agent (Plan.Fresh), the verifier runs in a fresh container of the
// task's image with the agent's working directory copied in (cleaned:
// sandbox.Docker.CopyDir), so its tools are the image's. There
// /logs/verifier is made afresh (the agent can neither have removed it
// nor left a reward there), tests/ copied to /tests only now (the agent
// never saw them), bash /tests/test.sh runs as the verifier's user within
// [verifier] timeout_sec, and the reward is read from
// /logs/verifier/reward.txt or reward.json. A verifier that writes no
// reward, or garbage, or a workspace the agent broke (killed for its disk
// or memory) is reward 0 with the reason in Info["reward_error"]. An
// error is the engine failing or ctx ending.
func (r *Run) Verify(ctx context.Context) (Verdict, error) {
	return r.e.verify(ctx, r.WS, r.Task, r.Plan)
}

func (e *Engine) verify(ctx context.Context, ws sandbox.Workspace, t *Task, p Plan) (Verdict, error) {
	v := Verdict{Info: map[string]any{}}
	zero := func(why string) (Verdict, error) {
		v.Reward = 0
		v.Info["reward_error"] = why
		return v, nil
	}
	began := time.Now()
	if p.Fresh {
		fresh, err := e.D.Open(ctx, p.VerifierSpec)
		if err != nil {
			return v, fmt.Errorf("task %s: opening the verifier's container: %w", t.Name, err)
		}
		defer fresh.Close(context.WithoutCancel(ctx))
		if err := e.D.CopyDir(ctx, ws, fresh, p.Agent.WorkDir, t.Config.StorageMB<<20); err != nil {
			if ctx.Err() != nil {
				return v, ctx.Err()
			}
			return zero("the agent's working directory could not be copied into the verifier's container: " + err.Error())
		}
		v.Info["verified_in"] = "fresh container"
		ws = fresh
	} else {
		// Nothing the agent left running (a loop rewriting reward.txt,
		// a process waiting for the tests, one that ptraced the idle
		// process) may outlive it into the verifier.
		if err := ws.KillAll(ctx); err != nil {
			if ctx.Err() != nil {
				return v, ctx.Err()
			}
			return zero("what the agent left running could not be stopped: " + err.Error())
		}
		v.Info["verified_in"] = "restarted container"
	}
	v.Info["verifier_setup_seconds"] = time.Since(began).Seconds()
	return runVerifier(ctx, ws, t, p, v)
}

// runVerifier runs the verifier in ws, which nothing of the agent runs
// in any more.
func runVerifier(ctx context.Context, ws sandbox.Workspace, t *Task, p Plan, v Verdict) (Verdict, error) {
	zero := func(why string) (Verdict, error) {
		v.Reward = 0
		v.Info["reward_error"] = why
		return v, nil
	}
	workDir := p.Agent.WorkDir
	prep := fmt.Sprintf("rm -rf %s %s %s && mkdir -p %s /logs/agent", VerifierLogDir, TestsMount, path.Dir(RewardRLLM), VerifierLogDir)
	res, err := ws.Exec(ctx, sandbox.ExecRequest{Command: []string{"sh", "-c", prep}, Dir: "/", User: p.VerifierUser,
		Limits: sandbox.Limits{WallTime: time.Minute, CPUTime: time.Minute}})
	if err != nil {
		if ctx.Err() != nil {
			return v, ctx.Err()
		}
		return zero("the container could not be prepared for the verifier: " + err.Error())
	}
	if !res.OK() {
		return zero("the container could not be prepared for the verifier (" + prep + "): " + res.Reason())
	}
	tests, err := sandbox.ReadTree(filepath.Join(t.Dir, TestsDir))
	if err != nil {
		return v, fmt.Errorf("task %s: %w", t.Name, err)
	}
	if err := ws.CopyIn(ctx, TestsMount, tests); err != nil {
		if ctx.Err() != nil {
			return v, ctx.Err()
		}
		return zero("the tests could not be copied into the container: " + err.Error())
	}
	began := time.Now()
	to := t.Config.VerifierTimeout
	res, err = ws.Exec(ctx, sandbox.ExecRequest{Command: []string{"bash", path.Join(TestsMount, "test.sh")}, Dir: workDir, User: p.VerifierUser,
		Env: append([]string{"HOME=" + p.VerifierHome}, envList(t.Config.VerifierEnv)...), Limits: sandbox.Limits{WallTime: to, CPUTime: to, OutputBytes: verifierOutput}})
	v.Info["verifier_seconds"] = time.Since(began).Seconds()
	if err != nil {
		if ctx.Err() != nil {
			return v, ctx.Err()
		}
		return zero("the verifier could not run: " + err.Error())
	}
	v.Info["verifier_exit_code"] = res.ExitCode
	v.Info["verifier_output"] = keepEnds(string(res.Stdout)+string(res.Stderr), outputKeptChars)
	if res.Limit == sandbox.LimitWallTime {
		return zero(fmt.Sprintf("the verifier ran longer than [verifier] timeout_sec = %g and was killed", to.Seconds()))
	}
	if res.Limit != sandbox.LimitNone {
		v.Info["verifier_limit"] = string(res.Limit)
	}
	reward, file, why, err := readReward(ctx, ws)
	if err != nil {
		if ctx.Err() != nil {
			return v, ctx.Err()
		}
		return zero("the reward could not be read: " + err.Error())
	}
	if why != "" {
		return zero(why)
	}
	v.Reward = reward
	v.Info["reward_file"] = file
	return v, nil
}

// readReward reads reward.txt (a number), else reward.json ({"reward":
// x}, or an object with exactly one number), else rLLM's
// /tmp/rllm/reward.json. why says what was wrong
// when there is no usable reward.
func readReward(ctx context.Context, ws sandbox.Workspace) (reward float64, file, why string, err error) {
	b, err := ws.ReadFile(ctx, RewardTxt, maxRewardBytes)
	switch {
	case err == nil:
		r, why := parseRewardTxt(b)
		return r, RewardTxt, why, nil
	case !errors.Is(err, fs.ErrNotExist):
		return 0, "", "", err
	}
	for _, file := range []string{RewardJSON, RewardRLLM} {
		b, err = ws.ReadFile(ctx, file, maxRewardBytes)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return 0, "", "", err
		}
		r, why := parseRewardJSON(b)
		return r, file, why, nil
	}
	return 0, "", fmt.Sprintf("the verifier wrote no reward (neither %s nor %s)", RewardTxt, RewardJSON), nil
}

// parseRewardTxt reads reward.txt's content: one finite number.
func parseRewardTxt(b []byte) (float64, string) {
	s := strings.TrimSpace(string(b))
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Sprintf("the verifier wrote %s, but not a number: %q", RewardTxt, clip(strings.ToValidUTF8(s, "?"), 80))
	}
	return f, ""
}

// parseRewardJSON reads a reward.json's content: {"reward": x}, or an
// object holding exactly one number.
func parseRewardJSON(b []byte) (float64, string) {
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
		why := "null"
		if err != nil {
			why = err.Error()
		}
		return 0, fmt.Sprintf("the verifier wrote a reward.json, but not a JSON object: %s", clip(why, 120))
	}
	if x, ok := obj["reward"].(float64); ok {
		return x, ""
	}
	var nums []float64
	for _, v := range obj {
		if x, ok := v.(float64); ok {
			nums = append(nums, x)
		}
	}
	if len(nums) == 1 {
		return nums[0], ""
	}
	return 0, `the verifier wrote a reward.json without a number under "reward" (nor exactly one number)`
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// keepEnds keeps the first and last parts of s within n bytes.
func keepEnds(s string, n int) string {
	if len(s) <= n {
		return s
	}
	note := fmt.Sprintf("\n[... %d bytes left out ...]\n", len(s)-n)
	head := n / 4
	return strings.ToValidUTF8(s[:head]+note+s[len(s)-(n-head):], "")
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
