// Package env defines environments with rLLM's semantics: Reset gives the
// first observation, Step takes an action and returns the next
// observation, a reward and whether the episode is over. An env is built
// for one task row, merged with the configured env args, and selected by
// name (env.name, env.args) from the registry here.
package env

import (
	"context"
	"errors"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
)

// Env is one environment instance for one episode. Errors are failures of
// the environment itself (a crashed sandbox, a lost connection); they end
// the episode with termination reason "error". A bad action is not an
// error: it is scored (usually as a format error) and explained in Info.
type Env interface {
	Reset(ctx context.Context) (observation any, info map[string]any, err error)
	Step(ctx context.Context, action episode.Action) (StepResult, error)
	// Close releases what the env holds; it is called once, even after
	// an error.
	Close() error
}

// ErrTimeout is wrapped by the errors of environments that gave up
// waiting for an answer (an exec child or an OpenEnv server past its
// step timeout); the workflow ends such an episode with termination
// reason timeout rather than error.
var ErrTimeout = errors.New("timed out")

// StepResult is what Step returns, Gymnasium's (observation, reward,
// done, info) with terminated and truncated folded into Done.
type StepResult struct {
	Observation any
	Reward      float64
	Done        bool
	Info        map[string]any
}

// Factory builds an env for one task. args are the env.args config values
// with the task row's columns of the same names merged over them.
type Factory func(task episode.Task, args registry.Values) (Env, error)

// Definition registers an env: name, description, arguments, factory.
type Definition = registry.Entry[Factory]

// Registry holds the envs selectable by env.name.
var Registry = registry.New[Factory]("env")

// Register makes an env selectable by name. Call it from init().
func Register(d Definition) { Registry.Register(d) }

// Resolve checks the env.args map of env name once, before any episode
// runs, so configuration mistakes surface early.
func Resolve(name string, args map[string]any) (Definition, registry.Values, error) {
	return Registry.Resolve(name, "env.args", args)
}

// New builds env name for task: the task row's columns that are declared
// arguments override args (rLLM's from_dict({**env_args, **task})).
func New(name string, task episode.Task, args map[string]any) (Env, error) {
	d, v, err := Resolve(name, args)
	if err != nil {
		return nil, err
	}
	return Build(d, v, task)
}

// Build instantiates an already resolved definition for one task.
func Build(d Definition, args registry.Values, task episode.Task) (Env, error) {
	merged, err := args.Override(d.Args, "task", task)
	if err != nil {
		return nil, err
	}
	return d.New(task, merged)
}
