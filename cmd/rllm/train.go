package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

type trainOptions struct {
	config configFlags
	args   []string
}

func newTrainCmd(a *App) *cobra.Command {
	opts := &trainOptions{}
	cmd := &cobra.Command{
		Use:   "train [key=value ...]",
		Short: "Train the policy with reinforcement learning",
		Long: `Run the training loop: sample episodes from the policy, score them, compute
advantages and update the policy, with validation and checkpoints.
With no arguments it trains the built-in arith task on the embedded CPU policy.`,
		Example: `  rllm train
  rllm train --set data.train_batch_size=8 rollout.n=4
  rllm train --config examples/countdown.yaml trainer.total_training_steps=100`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			return runTrain(a, opts)
		},
		ValidArgsFunction: completeConfigKeys,
	}
	opts.config.register(cmd)
	return cmd
}

var errTrainerNotWired = errors.New("training is not wired yet: the configuration above is valid, and the training loop lands with the trainer issue")

func runTrain(a *App, opts *trainOptions) error {
	ld, err := opts.config.load(a, opts.args)
	if err != nil {
		return err
	}
	c := ld.Config
	if err := checkComponents(c); err != nil {
		return err
	}
	fmt.Fprintf(a.Stderr, "rllm: train: backend %s, agent %s, env %s, %d tasks x %d episodes per step, estimator %s\n",
		c.Backend.Name, c.Agent.Name, c.Env.Name, c.Data.TrainBatchSize, c.Rollout.N, c.Algorithm.AdvEstimator)
	return errTrainerNotWired
}
