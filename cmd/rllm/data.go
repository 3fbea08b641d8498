package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/tasks/arith"
	"github.com/rllm-org/rllm-go/pkg/tasks/countdown"
	"github.com/rllm-org/rllm-go/pkg/tasks/frozenlake"
)

func newDataCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Work with datasets",
	}
	cmd.AddCommand(newDataGenerateCmd(a))
	return cmd
}

type dataGenerateOptions struct {
	task   string
	n      int
	seed   uint64
	output string
	// arith
	min, max  int
	operators string
	negative  bool
}

var generators = []string{"arith", "countdown", "frozenlake"}

func newDataGenerateCmd(a *App) *cobra.Command {
	opts := &dataGenerateOptions{}
	cmd := &cobra.Command{
		Use:   "generate arith|countdown|frozenlake -o FILE",
		Short: "Write a dataset of generated tasks (jsonl or json)",
		Long: `Generate task rows for a built-in task. The same --seed always gives the
same rows. Rows carry the columns the task's env reads (question,
ground_truth, target, nums, seed, size, p, ...) and data_source.`,
		Example: `  rllm data generate arith --n 1000 --seed 0 -o arith.jsonl
  rllm data generate countdown --n 500 -o countdown.jsonl
  rllm data generate arith --min 0 --max 20 --operators "+-*" -o arith20.jsonl`,
		ValidArgs: generators,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("rllm data generate needs one task: %s", strings.Join(generators, ", "))
			}
			opts.task = args[0]
			if opts.output == "" {
				return usagef("rllm data generate needs -o FILE (.jsonl or .json)")
			}
			if opts.n < 1 || opts.n > 10_000_000 {
				return usagef("--n must be between 1 and 10000000, got %d", opts.n)
			}
			return runDataGenerate(cmd.Context(), a, opts)
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.n, "n", 1000, "number of rows")
	f.Uint64Var(&opts.seed, "seed", 0, "random seed")
	f.StringVarP(&opts.output, "output", "o", "", "output file: .jsonl or .json")
	f.IntVar(&opts.min, "min", arith.DefaultOptions.Min, "arith: smallest operand")
	f.IntVar(&opts.max, "max", arith.DefaultOptions.Max, "arith: largest operand")
	f.StringVar(&opts.operators, "operators", arith.DefaultOptions.Operators, "arith: operators to draw from (+-*/)")
	f.BoolVar(&opts.negative, "negative", false, "arith: allow negative answers")
	return cmd
}

// generateTasks runs the generator of task.
func generateTasks(opts *dataGenerateOptions) ([]episode.Task, error) {
	switch opts.task {
	case "arith":
		return arith.Generate(opts.n, opts.seed, arith.Options{Min: opts.min, Max: opts.max, Operators: opts.operators, Negative: opts.negative})
	case "countdown":
		return countdown.Generate(opts.n, opts.seed, countdown.DefaultOptions)
	case "frozenlake":
		return frozenlake.Generate(opts.n, opts.seed, frozenlake.DefaultOptions)
	}
	return nil, usagef("no generator for %q; use one of: %s", opts.task, strings.Join(generators, ", "))
}

func runDataGenerate(ctx context.Context, a *App, opts *dataGenerateOptions) error {
	rows, err := generateTasks(opts)
	if err != nil {
		var ec exitCoder
		if errors.As(err, &ec) {
			return err
		}
		return usagef("%v", err) // generator options are flags the user set
	}
	if err := writeTasks(ctx, opts.output, rows); err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.Stderr, "wrote %d %s tasks to %s\n", len(rows), opts.task, opts.output)
	return err
}

// writeTasks writes rows as JSON lines or a JSON array, through a
// temporary file renamed into place so a failed run leaves no half file.
// Parquet output waits for pkg/dataset's writer.
func writeTasks(ctx context.Context, path string, rows []episode.Task) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".jsonl" && ext != ".json" {
		return usagef("-o %s: write .jsonl or .json (parquet output is not available yet)", path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	var line bytes.Buffer
	enc := json.NewEncoder(&line)
	enc.SetEscapeHTML(false) // keep <answer> readable in prompts
	if ext == ".json" {
		w.WriteString("[\n")
	}
	for i, r := range rows {
		if err := ctx.Err(); err != nil {
			tmp.Close()
			return err
		}
		if ext == ".json" && i > 0 {
			w.WriteString(",\n")
		}
		line.Reset()
		if err := enc.Encode(r); err != nil {
			tmp.Close()
			return fmt.Errorf("row %d: %w", i, err)
		}
		if ext == ".json" {
			line.Truncate(line.Len() - 1) // the array adds its own separators
		}
		w.Write(line.Bytes())
	}
	if ext == ".json" {
		w.WriteString("\n]\n")
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}
