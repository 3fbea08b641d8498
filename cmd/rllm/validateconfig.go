package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/tracking"
	"github.com/rllm-org/rllm-go/pkg/trainer"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

type validateConfigOptions struct {
	config configFlags
	args   []string
}

func newValidateConfigCmd(a *App) *cobra.Command {
	opts := &validateConfigOptions{}
	cmd := &cobra.Command{
		Use:   "validate-config [key=value ...]",
		Short: "Check a configuration without running anything",
		Long: `Resolve the configuration (defaults, --config files, RLLM_ environment
variables, --set and key=value arguments) and report every problem at once.
Exit code 0 when it is valid, 2 when it is not.`,
		Example: `  rllm validate-config --config my.yaml
  rllm validate-config data.train_batch_size=8 rollout.n=4`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			return runValidateConfig(a, opts)
		},
		ValidArgsFunction: completeConfigKeys,
	}
	opts.config.register(cmd)
	return cmd
}

func runValidateConfig(a *App, opts *validateConfigOptions) error {
	ld, err := opts.config.load(a, opts.args)
	if err != nil {
		return err
	}
	c := ld.Config
	if err := checkComponents(ld); err != nil {
		return err
	}
	// What train would refuse, validate-config refuses with the same words.
	if _, err := trainer.NewPlan(c); err != nil {
		return err
	}
	// The trackers' settings, checked without sending anything.
	ts := trackingSpec(a)
	if err := tracking.Check(c.Trainer.Logger, ts.WandB, ts.MLflow); err != nil {
		return err
	}
	// Given the data, prompts that do not fit the embedded policy's
	// context are refused here as train refuses them.
	if c.Backend.Local.Weights, err = resolveWeights(a, c, ""); err != nil {
		return err
	}
	if err := trainer.CheckPrompts(a.context(), c, trainer.Options{Getenv: a.Getenv, ReadFile: a.ReadFile}); err != nil {
		return err
	}
	agent := workflow.AgentFor(c.Agent.Name, c.Env.Name)
	if a.jsonResults() {
		return writeJSON(a, map[string]any{"valid": true, "backend": c.Backend.Name, "agent": agent, "env": c.Env.Name,
			"tasks_per_step": c.Data.TrainBatchSize, "episodes_per_task": c.Rollout.N})
	}
	_, err = fmt.Fprintf(a.Stdout, "configuration is valid: backend %s, agent %s, env %s, %d tasks x %d episodes per step\n",
		c.Backend.Name, agent, c.Env.Name, c.Data.TrainBatchSize, c.Rollout.N)
	return err
}
