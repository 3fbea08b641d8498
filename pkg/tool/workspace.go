package tool

import (
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

// Workspace is an episode's sandbox workspace as the tools that work in
// it see it (tools.builtin bash): an env whose episode lives in a
// workspace (env.WorkspaceEnv: env.name=task, the task's container)
// hands it over after Reset, and the workflow binds the run's tools to it
// for that episode (Set.Bind).
type Workspace struct {
	WS sandbox.Workspace
	// Dir is where commands start (the task's working directory).
	Dir string
	// Env is added to every command's environment, as KEY=value.
	Env []string
	// Deadline ends the agent's time (the task's [agent] timeout_sec);
	// zero is none. A call after it returns Expired as its error, which
	// ends the episode.
	Deadline time.Time
	Expired  error
}

// InWorkspace is a tool that runs in an episode's workspace; Bind gives
// the tool bound to one.
type InWorkspace interface {
	Tool
	Bind(w Workspace) Tool
}

// NeedsWorkspace lists the tools of s that run in an episode's
// workspace.
func (s *Set) NeedsWorkspace() []string {
	var out []string
	for _, n := range s.order {
		if _, ok := s.tools[n].(InWorkspace); ok {
			out = append(out, n)
		}
	}
	return out
}

// Bind returns a Set for one episode whose workspace tools run in w; the
// other tools are shared with s. Closing it closes nothing of s.
func (s *Set) Bind(w Workspace) *Set {
	b := &Set{order: s.order, tools: make(map[string]Tool, len(s.tools)), schemas: s.schemas, origin: s.origin, timeout: s.timeout}
	for n, t := range s.tools {
		if iw, ok := t.(InWorkspace); ok {
			t = iw.Bind(w)
		}
		b.tools[n] = t
	}
	return b
}

var workspaceTools sync.Map

// MarkWorkspace records that built-in tool name runs in an episode's
// workspace (its Tool implements InWorkspace), so a config that selects
// it with an env that has none is refused before any episode runs.
func MarkWorkspace(name string) { workspaceTools.Store(name, true) }

// WorkspaceTools lists the names among builtin that run in an episode's
// workspace.
func WorkspaceTools(builtin []string) []string {
	var out []string
	for _, n := range builtin {
		if _, ok := workspaceTools.Load(n); ok {
			out = append(out, n)
		}
	}
	return out
}
