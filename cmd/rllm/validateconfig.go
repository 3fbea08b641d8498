package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/tracking"
	"github.com/rllm-org/rllm-go/pkg/trainer"
	"github.com/rllm-org/rllm-go/pkg/usererr"
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
variables, --set and key=value arguments) and report every problem at once:
what train checks before its first step (the workflow, agent and env, the
plan, the datasets and the batches they make), without opening the backend.
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
	ld, err := opts.config.loadAll(a, opts.args)
	if ld == nil {
		return err
	}
	c := ld.Config
	if _, _, err := preflight(a.context(), a, ld, err); err != nil {
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

// preflight is train up to its first step, without the backend: the
// components (workflow, agent, env, tools), the plan, the datasets and
// the schedule over them, every problem reported at once, after loadErr,
// the configuration's own (keys refused by loadAll). validate-config and
// train both run it.
func preflight(ctx context.Context, a *App, ld *config.Loaded, loadErr error) (plan *trainer.Plan, sched trainer.Schedule, err error) {
	var cerr, perr, terr error
	func() {
		if loadErr != nil {
			// The configuration holds values validation refused: checks
			// that trip on one of them add nothing to what it said.
			defer func() {
				if recover() != nil {
					cerr, perr = nil, nil
				}
			}()
		}
		cerr = checkComponents(ld)
		plan, sched, perr = trainer.Preflight(ctx, ld.Config, trainer.Options{})
		// The trackers' settings, checked without sending anything.
		ts := trackingSpec(a)
		terr = tracking.Check(ld.Config.Trainer.Logger, ts.WandB, ts.MLflow)
	}()
	var all config.Errors
	for _, err := range []error{loadErr, cerr, perr, terr} {
		var ce config.Errors
		switch {
		case err == nil:
		case errors.As(err, &ce) && ce.Error() == err.Error():
			all = append(all, dedupe(all, ce)...)
		default:
			all = append(all, dedupe(all, err)...)
		}
	}
	if len(all) > 0 {
		return nil, sched, all
	}
	return plan, sched, nil
}

// leadingKey is the key an error names first ("data.train_batch_size:
// ..."), or "".
var leadingKey = regexp.MustCompile(`^(?:[^ ]+:\d+: )?([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+):`)

// dedupe returns the errors in err (a join of them) that none of have
// said already (the same text, or an error about the same key: the plan
// refuses some values validation has refused in its own words), as
// config errors.
func dedupe(have config.Errors, err error) config.Errors {
	seen := map[string]bool{}
	for _, e := range have {
		seen[e.Error()] = true
		if m := leadingKey.FindStringSubmatch(e.Error()); m != nil {
			seen["key "+m[1]] = true
		}
	}
	said := func(e error) bool {
		if seen[e.Error()] {
			return true
		}
		m := leadingKey.FindStringSubmatch(e.Error())
		return m != nil && seen["key "+m[1]]
	}
	var out config.Errors
	var walk func(error)
	walk = func(e error) {
		var ue *usererr.Error
		if errors.As(e, &ue) && ue.Error() == e.Error() {
			if !said(ue) {
				seen[ue.Error()] = true
				out = append(out, ue)
			}
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		if _, ok := e.(config.Errors); ok {
			return
		}
		ue = config.KeyError("", config.Origin{}, e.Error())
		if !said(ue) {
			seen[ue.Error()] = true
			out = append(out, ue)
		}
	}
	walk(err)
	return out
}
