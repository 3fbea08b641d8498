// Package reward scores a model's answer to a task: math (boxed answers),
// countdown (arithmetic expressions), QA (exact match and token F1) and
// arith (bare integers). Functions are selected by name from the registry
// here and never fail: unparseable answers get a format score and a
// reason in Metadata.
package reward

import (
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
)

// Result is rLLM's RewardOutput: the reward, whether the answer counts as
// correct, and details (the extracted answer, why a reply failed to
// parse).
type Result struct {
	Reward    float64        `json:"reward"`
	IsCorrect bool           `json:"is_correct"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// Func scores response (the model's reply text) for task (the dataset
// row). It must be safe for concurrent use and must not panic on any
// input.
type Func func(task episode.Task, response string) Result

// Factory builds a reward function from its resolved arguments.
type Factory func(args registry.Values) (Func, error)

// Definition registers a reward function.
type Definition = registry.Entry[Factory]

// Registry holds the reward functions selectable by name;
// registry.Build(Registry, name, keyPrefix, args) builds one, keyPrefix
// being the config path of args (e.g. "env.args.reward_args").
var Registry = registry.New[Factory]("reward")

// Register makes a reward function selectable by name. Call it from init().
func Register(d Definition) { Registry.Register(d) }

// registerGrader registers reward function name: its arguments are the
// tagged fields of G (see registry.ArgsOf), and its Func is grade with
// the resolved arguments (registry.As).
func registerGrader[G any](name, description string, grade func(G, episode.Task, string) Result) {
	Register(Definition{
		Name:        name,
		Description: description,
		Params:      *new(G),
		New: func(v registry.Values) (Func, error) {
			g := registry.As[G](v)
			return func(task episode.Task, response string) Result { return grade(g, task, response) }, nil
		},
	})
}

// GroundTruth reads the reference answer of a task row, accepting the
// column names rLLM datasets use: ground_truth, answer, target (in that
// order). ok is false when none is present.
func GroundTruth(task episode.Task) (any, bool) {
	for _, k := range []string{"ground_truth", "answer", "target"} {
		if v, ok := task[k]; ok && v != nil {
			return v, true
		}
	}
	if rm, ok := task["reward_model"].(map[string]any); ok {
		if v, ok := rm["ground_truth"]; ok && v != nil {
			return v, true
		}
	}
	return nil, false
}

func failed(reward float64, reason string) Result {
	return Result{Reward: reward, Metadata: map[string]any{"format_error": reason}}
}
