// Package workflow runs one task to an Episode: it wires an agent to an
// environment and to a sampler (the policy model, wherever it runs),
// records every model call with its tokens, and shapes step rewards into
// Monte Carlo returns. Workflows are selected by name (workflow.name,
// workflow.args); single_turn and multi_turn are built in.
package workflow

import (
	"context"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/tool"
)

// Workflow runs one episode. The rollout engine builds one Workflow per
// episode (via New) and runs many concurrently.
//
// Run returns the episode with its TerminationReason set. When something
// fails (the sampler, the env, the context), Run returns the error and,
// when it got that far, the partial episode with TerminationReason error
// (or timeout for a context deadline) and Error holding the message.
type Workflow interface {
	Run(ctx context.Context, task episode.Task, episodeID string) (*episode.Episode, error)
}

// Component names a registered agent or env and its args map, as the
// config spells them (agent.name + agent.args, env.name + env.args).
type Component struct {
	Name string
	Args map[string]any
}

// Deps is everything a workflow needs from outside: the sampler and its
// default parameters, the step budget and which agent and env to build.
type Deps struct {
	Sampler            sampler.Sampler
	Params             sampler.Params
	ChatTemplateKwargs map[string]any
	// Tools are offered to the model on every call (OpenAI function tools).
	Tools []sampler.Tool
	// Toolbox runs the tool calls of agents that use tools
	// (agent.ToolUser); its tools are offered besides Tools. When nil and
	// ToolConfig selects tools, the workflow opens the shared Set for
	// ToolConfig (tool.Shared) once per process.
	Toolbox    *tool.Set
	ToolConfig tool.Config
	// MaxSteps caps the agent ⇄ env turns of multi_turn (rLLM's
	// agent.max_steps); 0 means 20.
	MaxSteps int
	Agent    Component
	Env      Component
	// Workspaces is the env's workspace hook when its episodes live in a
	// sandbox workspace (env.name=task: the task's container): workflows
	// that run their own agent (a harness, a program) open each
	// episode's workspace through it and score it with its Verify.
	// SpecFromConfig sets it; nil for other envs.
	Workspaces env.Workspaces
	// NewAgent and NewEnv, when set, build the agent and env directly
	// instead of looking Agent and Env up in the registries: the way a Go
	// program passes its own types without registering them.
	NewAgent func() (agent.Agent, error)
	NewEnv   func(task episode.Task) (env.Env, error)
}

// DefaultMaxSteps is rLLM's agent.max_steps default.
const DefaultMaxSteps = 20

// Factory builds a workflow from its resolved args (workflow.args) and
// deps.
type Factory func(args registry.Values, deps Deps) (Workflow, error)

// Definition registers a workflow.
type Definition = registry.Entry[Factory]

// Registry holds the workflows selectable by workflow.name.
var Registry = registry.New[Factory]("workflow")

// Register makes a workflow selectable by name. Call it from init().
func Register(d Definition) { Registry.Register(d) }

// New builds workflow name with args (the workflow.args config map). It
// validates everything it can before any episode runs: the workflow, and
// for the built-ins the agent and env names and args. Mistakes are
// user errors (pkg/usererr, exit code 2) naming the config key.
func New(name string, args map[string]any, deps Deps) (Workflow, error) {
	d, v, err := Registry.Resolve(name, "workflow.args", args)
	if err != nil {
		return nil, err
	}
	return d.New(v, deps)
}

// DefaultName picks the built-in workflow for an env when workflow.name
// is empty: single_turn for single-turn envs (math, countdown, arith,
// search), multi_turn for the rest.
func DefaultName(envName string) string {
	if env.IsSingleTurn(envName) {
		return "single_turn"
	}
	return "multi_turn"
}
