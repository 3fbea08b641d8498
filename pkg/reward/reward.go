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

var rewards = registry.New[Factory]("reward")

// Register makes a reward function selectable by name. Call it from init().
func Register(d Definition) { rewards.Register(d) }

// Lookup returns the definition registered under name.
func Lookup(name string) (Definition, error) { return rewards.Lookup(name) }

// List describes every registered reward function.
func List() []registry.Info { return rewards.List() }

// New builds reward function name; keyPrefix is the config path of args
// (e.g. "env.args.reward_args") for error messages.
func New(name, keyPrefix string, args map[string]any) (Func, error) {
	d, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	v, err := d.Resolve(keyPrefix, args)
	if err != nil {
		return nil, err
	}
	return d.New(v)
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
