package env

import (
	"sync"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/reward"
)

// RegisterScored registers a single-turn env named name that scores the
// reply with the reward function rewardName. Its one argument,
// reward_args, is checked against that reward function's arguments.
func RegisterScored(name, rewardName, description string) {
	singleTurn.Store(name, true)
	Register(Definition{
		Name:        name,
		Description: description,
		Args: []registry.Arg{
			{Name: "reward_args", Type: "map", Default: map[string]any(nil), Doc: "arguments of the " + rewardName + " reward function (see rllm list rewards)"},
		},
		// reward_args is documented per reward function, so it is
		// declared by hand rather than with an args struct.
		Validate: func(args registry.Values) error {
			_, err := registry.Build(reward.Registry, rewardName, "env.args.reward_args", args.Map("reward_args"))
			return err
		},
		New: func(task episode.Task, args registry.Values) (Env, error) {
			fn, err := registry.Build(reward.Registry, rewardName, "env.args.reward_args", args.Map("reward_args"))
			if err != nil {
				return nil, err
			}
			return &Scored{Task: task, Reward: fn}, nil
		},
	})
}

var singleTurn sync.Map

// MarkSingleTurn records that env name, registered with Register, ends
// after one step, as the envs of RegisterScored do.
func MarkSingleTurn(name string) { singleTurn.Store(name, true) }

// IsSingleTurn reports whether env name ends after one step (it was
// registered with RegisterScored).
func IsSingleTurn(name string) bool {
	_, ok := singleTurn.Load(name)
	return ok
}
