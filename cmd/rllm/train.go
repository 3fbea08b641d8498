package main

import (
	"fmt"
	"github.com/rllm-org/rllm-go/pkg/workflow/program"

	"github.com/spf13/cobra"

	envexec "github.com/rllm-org/rllm-go/pkg/env/exec"
	"github.com/rllm-org/rllm-go/pkg/policy"
	"github.com/rllm-org/rllm-go/pkg/progress"
	"github.com/rllm-org/rllm-go/pkg/trainer"
)

type trainOptions struct {
	config configFlags
	args   []string
	dryRun bool
}

func newTrainCmd(a *App) *cobra.Command {
	opts := &trainOptions{}
	cmd := &cobra.Command{
		Use:   "train [key=value ...]",
		Short: "Train the policy with reinforcement learning",
		Long: `Run the training loop: sample episodes from the policy, score them, compute
advantages and update the policy, with validation and checkpoints.
With no arguments it trains the built-in arith task on the embedded CPU policy.

Progress goes to stderr: a readable line per step on a terminal, JSON lines
otherwise (--output chooses). Metrics are also appended to metrics.jsonl and
checkpoints written under trainer.default_local_dir; running the same command
again resumes from the newest checkpoint (trainer.resume_mode=auto).
Ctrl-C writes a checkpoint of the last finished step and exits with 130.`,
		Example: `  rllm train
  rllm train --set data.train_batch_size=8 rollout.n=4
  rllm train --config my.yaml trainer.total_training_steps=100
  rllm train --dry-run env.name=countdown`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			return runTrain(cmd, a, opts)
		},
		ValidArgsFunction: completeConfigKeys,
	}
	opts.config.register(cmd)
	cmd.Flags().BoolVar(&opts.dryRun, "dry-run", false, "print the training plan the configuration resolves to and exit without training")
	return cmd
}

func runTrain(cmd *cobra.Command, a *App, opts *trainOptions) error {
	// exec environments start their pools lazily; whatever happens, they
	// (and their process groups) end with the command.
	defer envexec.CloseAll()
	defer program.CloseServers() // serving agent programs (workflow.args.mode=serve)
	ctx := cmd.Context()
	ld, err := opts.config.loadAll(a, opts.args)
	if ld == nil {
		return err
	}
	if err != nil {
		// Every problem at once, as validate-config reports them.
		_, _, err = preflight(ctx, a, ld, err)
		return err
	}
	if opts.dryRun {
		plan, sched, err := preflight(ctx, a, ld, nil)
		if err != nil {
			return err
		}
		if a.jsonResults() {
			lines := map[string]string{}
			for _, l := range plan.Lines() {
				lines[l.Key] = l.Value
			}
			return writeJSON(a, map[string]any{"dry_run": true, "backend": plan.Backend, "tasks_per_step": plan.BatchSize,
				"episodes_per_task": plan.Train.N, "tasks": sched.Tasks, "steps": sched.Steps, "plan": lines})
		}
		_, err = fmt.Fprint(a.Stdout, plan)
		return err
	}
	if err := checkComponents(ld); err != nil {
		return err
	}
	if ld.Config.Backend.Local.Weights, err = resolveWeights(a, ld.Config, ""); err != nil {
		return err
	}
	topts := trainer.Options{Log: a.Stderr, JSON: a.jsonEvents(cmd), Getenv: a.Getenv, ReadFile: a.ReadFile, Tracking: trackingSpec(a)}
	// hf:// entries become local files; run.json records their commits.
	for _, l := range []struct {
		key   string
		files *[]string
	}{{"data.train_files", &ld.Config.Data.TrainFiles}, {"data.val_files", &ld.Config.Data.ValFiles}} {
		files, srcs, err := resolveHubFiles(ctx, a, ld.Config, l.key, *l.files)
		if err != nil {
			return err
		}
		*l.files = files
		topts.DataSources = append(topts.DataSources, srcs...)
	}
	switch {
	case topts.JSON:
		// Progress lines at a sane rate beside the per-step objects.
		topts.Progress = progress.NewJSON(a.Stderr, progress.Options{})
	case a.StderrIsTerminal:
		topts.Progress = progress.NewText(a.Stderr, progress.Options{})
	}
	if c := ld.Config; c.Rollout.Engine != "auto" {
		// Rollouts from inference servers: the same client rllm eval uses,
		// checked against the servers before anything trains.
		if _, err := trainer.NewPlan(c); err != nil {
			return err
		}
		// The key authenticates the rollouts and the weight updates alike.
		if topts.APIKey, err = readAPIKey(a, c.Rollout.APIKeyEnv, c.Rollout.APIKeyFile); err != nil {
			return err
		}
		o := policyOptions(a, false)
		o.APIKey = topts.APIKey
		pol, err := policy.OpenServer(ctx, c, o)
		if err != nil {
			return err
		}
		defer pol.Close()
		topts.Rollouts = pol.Client
	}
	t, err := trainer.New(ctx, ld.Config, topts)
	if err != nil {
		return err
	}
	defer t.Close()
	_, err = t.Train(ctx)
	return err
}
