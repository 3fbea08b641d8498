package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/tasks/arith"
	"github.com/rllm-org/rllm-go/pkg/tasks/code"
	"github.com/rllm-org/rllm-go/pkg/tasks/countdown"
	"github.com/rllm-org/rllm-go/pkg/tasks/frozenlake"
	"github.com/rllm-org/rllm-go/pkg/tasks/harbor"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

type dataGenerateOptions struct {
	task   string
	n      int
	seed   uint64
	output string
	// arith
	min, max  int
	operators string
	negative  bool
	// countdown
	countdown    countdown.Options
	instructions bool
	// frozenlake
	lakes frozenlake.Options
	// code
	code code.Options
	// repofix
	image string
}

var generators = []string{"arith", "code", "countdown", "frozenlake", "repofix"}

func newDataGenerateCmd(a *App) *cobra.Command {
	opts := &dataGenerateOptions{}
	cmd := &cobra.Command{
		Use:   "generate arith|code|countdown|frozenlake|repofix --out FILE",
		Short: "Write a dataset of generated tasks (parquet, jsonl or json; repofix: a directory of tasks)",
		Long: `Generate task rows for a built-in task. The same --seed always gives the
same rows. Rows carry the columns the task's env reads (question,
ground_truth, target, nums, seed, size, p, ...) and data_source.

repofix writes a directory of tasks in the Harbor format instead (for
env.name=task and rllm tasks check): each a small Python package with a
bug and a failing test, its image FROM the local base image (built by
scripts/docker-setup.sh), a verifier running hidden tests and the fix as
its oracle.`,
		Example: `  rllm data generate arith --n 1000 --seed 0 --out arith.jsonl
  rllm data generate countdown --n 500 --out countdown.parquet
  rllm data generate arith --min 0 --max 20 --operators "+-*" --out arith20.jsonl
  rllm data generate countdown --min-numbers 3 --max-numbers 3 --max-number 9 --max-target 30 --out small.jsonl
  rllm data generate frozenlake --max-size 4 --out lakes.jsonl
  rllm data generate code --n 200 --tests 10 --out code.jsonl
  rllm data generate repofix --n 8 --out tasks/`,
		ValidArgs: generators,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("rllm data generate needs one task: %s", strings.Join(generators, ", "))
			}
			opts.task = args[0]
			if opts.output == "" {
				return usagef("rllm data generate needs --out FILE (.parquet, .jsonl or .json)")
			}
			if opts.n < 1 || opts.n > 10_000_000 {
				return usagef("--n must be between 1 and 10000000, got %d", opts.n)
			}
			if err := checkTaskFlags(cmd, opts.task); err != nil {
				return err
			}
			return runDataGenerate(cmd.Context(), a, opts)
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.n, "n", 1000, "number of rows")
	f.Uint64Var(&opts.seed, "seed", 0, "random seed")
	f.StringVar(&opts.output, "out", "", "dataset `FILE` to write: .parquet, .jsonl or .json")
	f.IntVar(&opts.min, "min", arith.DefaultOptions.Min, "arith: smallest operand")
	f.IntVar(&opts.max, "max", arith.DefaultOptions.Max, "arith: largest operand")
	f.StringVar(&opts.operators, "operators", arith.DefaultOptions.Operators, "arith: operators to draw from (+-*/)")
	f.BoolVar(&opts.negative, "negative", false, "arith: allow negative answers")
	cd := countdown.DefaultOptions
	f.IntVar(&opts.countdown.MinNumbers, "min-numbers", cd.MinNumbers, "countdown: fewest numbers in a puzzle")
	f.IntVar(&opts.countdown.MaxNumbers, "max-numbers", cd.MaxNumbers, "countdown: most numbers in a puzzle")
	f.IntVar(&opts.countdown.MaxNumber, "max-number", cd.MaxNumber, "countdown: numbers are drawn from 1 to this")
	f.IntVar(&opts.countdown.MaxTarget, "max-target", cd.MaxTarget, "countdown: targets are 1 to this")
	f.BoolVar(&opts.instructions, "instructions", true, "countdown: follow the question with the rules and the answer format (TinyZero's prompt)")
	fl := frozenlake.DefaultOptions
	f.IntVar(&opts.lakes.MinSize, "min-size", fl.MinSize, "frozenlake: smallest map side")
	f.IntVar(&opts.lakes.MaxSize, "max-size", fl.MaxSize, "frozenlake: largest map side")
	f.Float64Var(&opts.lakes.MinP, "min-p", fl.MinP, "frozenlake: lowest probability that a cell is frozen")
	f.Float64Var(&opts.lakes.MaxP, "max-p", fl.MaxP, "frozenlake: highest probability that a cell is frozen")
	f.IntVar(&opts.code.Tests, "tests", code.DefaultGenerateOptions.Tests, "code, repofix: hidden tests per task")
	f.StringVar(&opts.image, "image", sandbox.BaseImage(), "repofix: the `IMAGE` the tasks' Dockerfiles start FROM (it needs python3 and pytest)")
	return cmd
}

// taskFlags names the flags that shape one task's rows; the generator of
// another task would ignore them.
var taskFlags = map[string][]string{
	"arith":      {"min", "max", "operators", "negative"},
	"countdown":  {"min-numbers", "max-numbers", "max-number", "max-target", "instructions"},
	"frozenlake": {"min-size", "max-size", "min-p", "max-p"},
	"code":       {"tests"},
	"repofix":    {"image"},
}

// checkTaskFlags refuses a flag of another task than the one generated.
func checkTaskFlags(cmd *cobra.Command, task string) error {
	for other, names := range taskFlags {
		if other == task {
			continue
		}
		for _, name := range names {
			if name == "tests" && task == "repofix" {
				continue // repofix has hidden tests too
			}
			if cmd.Flags().Changed(name) {
				return usagef("--%s shapes %s tasks, not %s; drop it", name, other, task)
			}
		}
	}
	return nil
}

// generateTasks runs the generator of task.
func generateTasks(opts *dataGenerateOptions) ([]episode.Task, error) {
	switch opts.task {
	case "arith":
		return arith.Generate(opts.n, opts.seed, arith.Options{Min: opts.min, Max: opts.max, Operators: opts.operators, Negative: opts.negative})
	case "countdown":
		o := opts.countdown
		o.NoInstructions = !opts.instructions
		return countdown.Generate(opts.n, opts.seed, o)
	case "frozenlake":
		return frozenlake.Generate(opts.n, opts.seed, opts.lakes)
	case "code":
		return code.Generate(opts.n, opts.seed, opts.code)
	}
	return nil, usagef("no generator for %q; use one of: %s", opts.task, strings.Join(generators, ", "))
}

func runDataGenerate(ctx context.Context, a *App, opts *dataGenerateOptions) error {
	if opts.task == "repofix" {
		dirs, err := harbor.Generate(opts.output, opts.n, opts.seed, harbor.GenerateOptions{Image: opts.image, HiddenTests: opts.code.Tests})
		if err != nil {
			return err
		}
		a.infof("wrote %d repofix tasks under %s (rllm tasks check %s; data.train_files=[%s] env.name=task)", len(dirs), opts.output, opts.output, opts.output)
		return nil
	}
	rows, err := generateTasks(opts)
	if err != nil {
		if usererr.Is(err) {
			return err
		}
		return usagef("%v", err) // generator options are flags the user set
	}
	if err := dataset.Write(ctx, opts.output, rows, dataset.WriteOptions{}); err != nil {
		return err
	}
	a.infof("wrote %d %s tasks to %s", len(rows), opts.task, opts.output)
	return nil
}
