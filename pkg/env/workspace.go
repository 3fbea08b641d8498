package env

import (
	"context"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/tool"
)

// The workspace hook: an env whose episodes live in a sandbox workspace
// (env.name=task: a Harbor task's container) offers it two ways.
//
//   - To the built-in agent ⇄ env workflows: the env implements
//     WorkspaceEnv; after Reset the workflow binds the run's workspace
//     tools (tools.builtin bash) to the episode's workspace, the agent
//     works there, and the env's Step runs the verifier in it.
//   - To workflows that run their own agent (a coding harness, an agent
//     program): the env's name is registered with RegisterWorkspaces, and
//     such a workflow asks WorkspacesFor(env.name) for the opener, the
//     spec and the files of each episode's workspace, runs its agent
//     there, then calls Verify in the same workspace.

// WorkspaceEnv is an env whose episode has a sandbox workspace, open from
// Reset until Close.
type WorkspaceEnv interface {
	Env
	// ToolWorkspace is the episode's workspace for tools; false before
	// Reset or after Close.
	ToolWorkspace() (tool.Workspace, bool)
}

// Workspaces is what a workspace env offers workflows that run their own
// agent in its workspace. Its method set is harness.Task's
// (pkg/workflow/harness), so the harness workflow takes it as is.
type Workspaces interface {
	// Workspace returns the opener (the container engine), the spec
	// (the task's image, working directory and limits; based on def,
	// the workflow's own) and the files to copy into the spec's WorkDir
	// for one episode of task.
	Workspace(ctx context.Context, task episode.Task, def sandbox.WorkspaceSpec) (sandbox.Opener, sandbox.WorkspaceSpec, []sandbox.File, error)
	// Verify scores the workspace after the agent ran (the task's
	// verifier, in the same workspace).
	Verify(ctx context.Context, ws sandbox.Workspace, task episode.Task) (reward float64, correct bool, info map[string]any, err error)
}

// AgentTimer is a Workspaces whose tasks bound the agent's time (a
// Harbor task's [agent] timeout_sec): a workflow that runs its own agent
// in the workspace stops it then, as the built-in agent is stopped, and
// the episode ends with termination timeout.
type AgentTimer interface {
	AgentTimeout(task episode.Task) (time.Duration, error)
}

// WorkspacesFactory builds an env's Workspaces from its resolved env.args.
type WorkspacesFactory func(args registry.Values) (Workspaces, error)

var workspaces sync.Map // env name → WorkspacesFactory

// RegisterWorkspaces records that env name's episodes live in a
// workspace, and how a workflow gets them. Call it from init(), beside
// Register.
func RegisterWorkspaces(name string, f WorkspacesFactory) { workspaces.Store(name, f) }

// HasWorkspace reports whether env name's episodes live in a workspace
// (tools.builtin bash needs one).
func HasWorkspace(name string) bool {
	_, ok := workspaces.Load(name)
	return ok
}

// WorkspacesFor returns env name's Workspaces for env.args args; ok is
// false when env name has none.
func WorkspacesFor(name string, args map[string]any) (w Workspaces, ok bool, err error) {
	f, found := workspaces.Load(name)
	if !found {
		return nil, false, nil
	}
	_, v, err := Resolve(name, args)
	if err != nil {
		return nil, true, err
	}
	w, err = f.(WorkspacesFactory)(v)
	return w, true, err
}
