// Package agent defines what an agent is in rllm, with rLLM's semantics:
// it turns environment observations into chat messages, turns model
// replies into actions, and keeps the trajectory of its steps. Agents are
// selected by name (agent.name, agent.args) from the registry here.
package agent

import (
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// Agent is one agent for one episode. A workflow calls, per turn:
// UpdateFromEnv (the observation), Messages (the prompt), the sampler,
// then UpdateFromModel (the reply), which must append one Step to
// Trajectory and return the Action for the env. Agents are not shared
// between goroutines.
type Agent interface {
	// Reset clears all state so the agent can start a new episode.
	Reset()
	// UpdateFromEnv takes what the environment returned: the observation
	// of the first Reset, or the result of the last Step.
	UpdateFromEnv(observation any, reward float64, done bool, info map[string]any)
	// UpdateFromModel takes the model's reply, records the step and
	// returns the action. A reply the agent cannot parse still yields an
	// Action (possibly empty) and a step whose Info says why; the env then
	// scores it as a format error.
	UpdateFromModel(resp sampler.Response) episode.Action
	// Messages are the chat messages so far, the prompt of the next call.
	Messages() []episode.Message
	// Trajectory is the agent's record of the episode so far.
	Trajectory() *episode.Trajectory
}

// Factory builds an agent from its resolved arguments.
type Factory func(args registry.Values) (Agent, error)

// Definition registers an agent: name, one-line description, accepted
// arguments and factory.
type Definition = registry.Entry[Factory]

// Registry holds the agents selectable by agent.name.
var Registry = registry.New[Factory]("agent")

// Register makes an agent selectable by name. Call it from init();
// registering a name twice panics.
func Register(d Definition) { Registry.Register(d) }

// Resolve checks the agent.args map of agent name once, before any
// episode runs, rejecting unknown names and arguments with configuration
// errors (as env.Resolve does for env.args); d.New(v) builds an agent.
func Resolve(name string, args map[string]any) (Definition, registry.Values, error) {
	return Registry.Resolve(name, "agent.args", args)
}

// FreshPrompter is an agent that may leave the conversation so far out
// of its prompts (by its arguments): then a turn's prompt does not extend
// the previous prompt and reply, and a trajectory trains only as one
// sequence per step. FreshPrompts says so in words naming the argument
// ("" when every prompt extends the last).
type FreshPrompter interface {
	FreshPrompts() string
}
