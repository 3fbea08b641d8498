package harbor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/tool"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// EnvName is the env's registered name.
const EnvName = "task"

// SystemPrompt is the task agent's default system prompt.
const SystemPrompt = "You are working in a Linux container on the task below. Use the bash tool to look around, edit files and run commands. " +
	"When the task is done, reply with a short summary and no tool call; your work is then checked."

// Params are the task env's arguments (env.args); task_dir comes from
// each row.
type Params struct {
	TaskDir string `arg:"task_dir" task:"true" doc:"the task's directory in the Harbor format (each row's task_dir column; a directory dataset sets it)"`
}

func init() {
	env.Register(env.Definition{
		Name:        EnvName,
		Description: "a task in the Harbor format (row column task_dir): the agent works in the task's container (tools.builtin: [bash]), unprivileged unless [agent] user = \"root\", then the task's verifier gives the reward out of its reach (the container restarted, or a fresh one after a root agent)",
		Params:      Params{},
		Validate: func(registry.Values) error {
			// No task env without a container engine.
			_, err := SharedEngine(context.Background())
			return err
		},
		New: func(task episode.Task, args registry.Values) (env.Env, error) {
			return NewEnv(task, registry.As[Params](args))
		},
	})
	env.RegisterWorkspaces(EnvName, func(registry.Values) (env.Workspaces, error) { return Workspaces{}, nil })
	agent.Register(agent.Definition{
		Name:        EnvName,
		Description: "tool_agent with a system prompt for working in a task's container with the bash tool (tools.builtin: [bash])",
		Params:      agent.ToolAgentParams{SystemPrompt: SystemPrompt, ParseText: true},
		New: func(v registry.Values) (agent.Agent, error) {
			return &agent.ToolAgent{Params: registry.As[agent.ToolAgentParams](v)}, nil
		},
	})
	dataset.RegisterDirFormat(dataset.DirFormat{Name: "harbor tasks", Is: IsTaskDir, Read: ReadRows})
}

// ReadRows reads a directory of tasks as dataset rows: task_dir (the
// task's absolute directory), task_name, instruction, data_source. Every
// broken task is reported, one line each.
func ReadRows(ctx context.Context, dir string) ([]episode.Task, error) {
	tasks, err := LoadAll(dir)
	if err != nil {
		return nil, err
	}
	rows := make([]episode.Task, len(tasks))
	for i, t := range tasks {
		rows[i] = episode.Task{"task_dir": t.Dir, "task_name": t.Name, "instruction": t.Instruction, "data_source": "harbor"}
		remember(t)
	}
	return rows, ctx.Err()
}

// loaded caches the tasks read, by directory: every episode of a task
// builds an env, and task.toml is read once.
var loaded sync.Map

func remember(t *Task) { loaded.Store(t.Dir, t) }

// TaskOf returns the task a row names (its task_dir column).
func TaskOf(row episode.Task, dir string) (*Task, error) {
	if dir == "" {
		dir, _ = row["task_dir"].(string)
	}
	if dir == "" {
		return nil, usererr.Errorf("env task: the row has no task_dir column naming its task's directory; load tasks with data.train_files=[DIR] (a directory of tasks in the Harbor format)")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if t, ok := loaded.Load(abs); ok {
		return t.(*Task), nil
	}
	t, err := Load(abs)
	if err != nil {
		return nil, err
	}
	remember(t)
	return t, nil
}

// Env is one episode of a task: Reset opens the task's container, the
// agent works in it (ToolWorkspace), Step runs the verifier there and
// ends the episode, Close removes the container.
type Env struct {
	Task   *Task
	Engine *Engine

	mu  sync.Mutex
	run *Run
}

// NewEnv builds the env of one row.
func NewEnv(row episode.Task, p Params) (*Env, error) {
	t, err := TaskOf(row, p.TaskDir)
	if err != nil {
		return nil, err
	}
	e, err := SharedEngine(context.Background())
	if err != nil {
		return nil, err
	}
	return &Env{Task: t, Engine: e}, nil
}

// Reset builds (or reuses) the task's image, opens its container and
// shows the instruction.
func (e *Env) Reset(ctx context.Context) (any, map[string]any, error) {
	run, err := e.Engine.Open(ctx, e.Task)
	if err != nil {
		return nil, nil, err
	}
	e.mu.Lock()
	prev := e.run
	e.run = run
	e.mu.Unlock()
	if prev != nil { // a second Reset starts afresh
		_ = prev.Close()
	}
	return map[string]any{"question": e.Task.Instruction}, map[string]any{"task": e.Task.Name, "workspace": run.WS.ID()}, nil
}

// ToolWorkspace is the episode's container for the bash tool, with the
// agent's deadline ([agent] timeout_sec from Reset).
func (e *Env) ToolWorkspace() (tool.Workspace, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.run == nil {
		return tool.Workspace{}, false
	}
	return tool.Workspace{WS: e.run.WS, Dir: e.run.WorkDir, Deadline: e.run.Deadline(), Expired: e.expired()}, true
}

func (e *Env) expired() error {
	return fmt.Errorf("task %s: the agent worked longer than [agent] timeout_sec = %g: %w", e.Task.Name, e.Task.Config.AgentTimeout.Seconds(), env.ErrTimeout)
}

// Step runs the verifier after the agent's final answer and ends the
// episode with its reward. An answer after the agent's time is a timeout
// (the episode's error, reward 0).
func (e *Env) Step(ctx context.Context, _ episode.Action) (env.StepResult, error) {
	e.mu.Lock()
	run := e.run
	e.mu.Unlock()
	if run == nil {
		return env.StepResult{}, errors.New("env task: Step before Reset")
	}
	if time.Now().After(run.Deadline()) {
		return env.StepResult{}, e.expired()
	}
	v, err := run.Verify(ctx)
	if err != nil {
		return env.StepResult{}, err
	}
	info := v.Info
	info["is_correct"] = v.Correct()
	info["agent_seconds"] = time.Since(run.Started).Seconds() - toFloat(info["verifier_seconds"])
	return env.StepResult{Observation: map[string]any{}, Reward: v.Reward, Done: true, Info: info}, nil
}

func toFloat(v any) float64 {
	f, _ := v.(float64)
	return f
}

// Close removes the container.
func (e *Env) Close() error {
	e.mu.Lock()
	run := e.run
	e.run = nil
	e.mu.Unlock()
	if run == nil {
		return nil
	}
	return run.Close()
}

// Workspaces is the task env as workflows that run their own agent in
// the task's container see it (env.Workspaces: the harness workflow's
// Task hook).
type Workspaces struct{}

// Workspace is the task's container for one episode: the docker engine,
// the task's image, working directory and limits; def (the workflow's
// spec) gives only what the task does not say: read-only paths, the
// network, labels. No files: the image holds the task's repository.
func (Workspaces) Workspace(ctx context.Context, row episode.Task, def sandbox.WorkspaceSpec) (sandbox.Opener, sandbox.WorkspaceSpec, []sandbox.File, error) {
	t, err := TaskOf(row, "")
	if err != nil {
		return nil, sandbox.WorkspaceSpec{}, nil, err
	}
	e, err := SharedEngine(ctx)
	if err != nil {
		return nil, sandbox.WorkspaceSpec{}, nil, err
	}
	img, err := e.Image(ctx, t)
	if err != nil {
		return nil, sandbox.WorkspaceSpec{}, nil, err
	}
	spec, err := e.Spec(ctx, t, img)
	if err != nil {
		return nil, sandbox.WorkspaceSpec{}, nil, err
	}
	spec.ReadOnly = append(spec.ReadOnly, def.ReadOnly...)
	spec.Network = def.Network
	for k, v := range def.Labels {
		spec.Labels[k] = v
	}
	return e.D, spec, nil, nil
}

// Verify runs the task's verifier in ws (opened from Workspace's spec).
func (Workspaces) Verify(ctx context.Context, ws sandbox.Workspace, row episode.Task) (float64, bool, map[string]any, error) {
	t, err := TaskOf(row, "")
	if err != nil {
		return 0, false, nil, err
	}
	e, err := SharedEngine(ctx)
	if err != nil {
		return 0, false, nil, err
	}
	img, err := e.Image(ctx, t)
	if err != nil {
		return 0, false, nil, err
	}
	p, err := e.Plan(ctx, t, img)
	if err != nil {
		return 0, false, nil, err
	}
	v, err := e.verify(ctx, ws, t, p)
	if err != nil {
		return 0, false, nil, err
	}
	return v.Reward, v.Correct(), v.Info, nil
}

// AgentTimeout is the task's [agent] timeout_sec (env.AgentTimer): a
// workflow running its own agent in the task's container stops it then.
func (Workspaces) AgentTimeout(row episode.Task) (time.Duration, error) {
	t, err := TaskOf(row, "")
	if err != nil {
		return 0, err
	}
	return t.Config.AgentTimeout, nil
}
