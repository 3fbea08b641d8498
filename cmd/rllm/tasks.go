package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/tasks/harbor"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

type tasksCheckOptions struct {
	config   configFlags
	parallel int
}

func newTasksCmd(a *App) *cobra.Command {
	return newGroupCmd("tasks", "Work with tasks in the Harbor format (a directory per task: instruction, Dockerfile, verifier, oracle)", newTasksCheckCmd(a))
}

func newTasksCheckCmd(a *App) *cobra.Command {
	opts := &tasksCheckOptions{}
	cmd := &cobra.Command{
		Use:   "check DIR [key=value ...]",
		Short: "Run every task's oracle (reward must be 1) and a null agent (reward must be 0) in its container; report the broken tasks",
		Long: `Check a directory of tasks in the Harbor format (or one task directory):
for each task, build its image (cached by content), run solution/solve.sh
and then tests/test.sh in a fresh container (the reward must be 1), and
run tests/test.sh in another fresh container where nothing was done (the
reward must be 0). Each broken task is one line on stdout; the exit
status is 1 when any task is broken. Needs a Docker daemon
(scripts/docker-setup.sh starts one and builds the local base image).`,
		Example: `  rllm data generate repofix --n 4 --out tasks
  rllm tasks check tasks
  rllm tasks check tasks --parallel 4`,
		RunE: func(cmd *cobra.Command, args []string) error {
			pos, overrides := splitOverrides(args)
			if len(pos) != 1 {
				return usagef("rllm tasks check needs one directory of tasks")
			}
			if opts.parallel < 1 || opts.parallel > 256 {
				return usagef("--parallel must be between 1 and 256, got %d", opts.parallel)
			}
			ld, err := opts.config.load(a, overrides)
			if err != nil {
				return err
			}
			sandbox.Configure(workflow.SandboxConfig(ld.Config))
			return runTasksCheck(cmd.Context(), a, pos[0], opts.parallel)
		},
	}
	opts.config.register(cmd)
	cmd.Flags().IntVar(&opts.parallel, "parallel", 2, "tasks checked at once")
	return cmd
}

// checkLine is one task's result as --output json prints it.
type checkLine struct {
	Task          string  `json:"task"`
	Dir           string  `json:"dir"`
	OK            bool    `json:"ok"`
	Problem       string  `json:"problem,omitempty"`
	OracleReward  float64 `json:"oracle_reward"`
	NullReward    float64 `json:"null_reward"`
	ImageSeconds  float64 `json:"image_seconds"`
	OracleSeconds float64 `json:"oracle_seconds"`
	NullSeconds   float64 `json:"null_seconds"`
}

func runTasksCheck(ctx context.Context, a *App, dir string, parallel int) error {
	tasks, loadErr := harbor.LoadAll(dir)
	if len(tasks) == 0 {
		return loadErr // nothing to check: the reasons, one line each
	}
	// A task that cannot even be read is broken too: report it and go
	// on with the others.
	broken := 0
	for _, err := range unjoin(loadErr) {
		broken++
		if a.jsonResults() {
			b, _ := json.Marshal(checkLine{Problem: err.Error()})
			fmt.Fprintln(a.Stdout, string(b))
		} else {
			fmt.Fprintf(a.Stdout, "BROKEN %s\n", err)
		}
	}
	e, err := harbor.SharedEngine(ctx)
	if err != nil {
		return err
	}
	a.infof("checking %d tasks of %s (oracle and null agent each, %d at once)", len(tasks), dir, parallel)
	results, err := harbor.Check(ctx, e, tasks, parallel)
	if err != nil {
		return err
	}
	for _, r := range results {
		if !r.OK() {
			broken++
		}
		if a.jsonResults() {
			b, _ := json.Marshal(checkLine{Task: r.Task.Name, Dir: r.Task.Dir, OK: r.OK(), Problem: r.Problem, OracleReward: r.OracleReward,
				NullReward: r.NullReward, ImageSeconds: r.ImageSeconds, OracleSeconds: r.OracleSeconds, NullSeconds: r.NullSeconds})
			fmt.Fprintln(a.Stdout, string(b))
			continue
		}
		if r.OK() {
			fmt.Fprintf(a.Stdout, "ok     %s (oracle 1, null 0; %.1fs)\n", r.Task.Name, r.ImageSeconds+r.OracleSeconds+r.NullSeconds)
		} else {
			fmt.Fprintf(a.Stdout, "BROKEN %s (%s): %s\n", r.Task.Name, r.Task.Dir, r.Problem)
		}
	}
	total := len(results) + len(unjoin(loadErr))
	if broken > 0 {
		return fmt.Errorf("%s: %d of %d tasks are broken (each named on stdout)", dir, broken, total)
	}
	a.infof("all %d tasks pass", total)
	return nil
}

// unjoin lists the errors errors.Join put together (err itself when it
// is a single one).
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
