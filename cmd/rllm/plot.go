package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/plot"
)

type plotOptions struct {
	runs []string
	out  string
}

func newPlotCmd(a *App) *cobra.Command {
	opts := &plotOptions{}
	cmd := &cobra.Command{
		Use:   "plot RUN_DIR [RUN_DIR...] [--out DIR]",
		Short: "Draw PNG charts of training runs' metrics.jsonl, runs overlaid",
		Long: `Read metrics.jsonl of each run directory (trainer.default_local_dir) and
write PNG charts against the training step: training reward, validation
pass@1 per data source, policy loss, entropy, KL and response length.
Several runs are drawn on the same charts for comparison. Steps a resumed
run redid appear once (the later record wins); a line cut short by a
crash is skipped. A chart no run has data for is left out.

The charts go to --out DIR: by default RUN_DIR/plots for one run and
./plots for several.`,
		Example: `  rllm plot checkpoints/rllm/arith
  rllm plot checkpoints/rllm/arith checkpoints/rllm/arith-rloo --out compare`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("rllm plot needs at least one run directory (trainer.default_local_dir, holding metrics.jsonl)")
			}
			opts.runs = args
			return runPlot(a, opts)
		},
	}
	cmd.Flags().StringVar(&opts.out, "out", "", "`DIR` to write the charts to (default RUN_DIR/plots, or ./plots for several runs)")
	return cmd
}

func runPlot(a *App, opts *plotOptions) error {
	var runs []plot.Run
	for _, dir := range opts.runs {
		r, err := plot.ReadRun(dir)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	out := opts.out
	if out == "" {
		out = "plots"
		if len(runs) == 1 {
			out = filepath.Join(opts.runs[0], "plots")
		}
	}
	w, err := plot.Write(runs, out)
	if err != nil {
		return err
	}
	if len(w.Skipped) > 0 {
		a.notef("no data for %s in these runs; left out", strings.Join(w.Skipped, ", "))
	}
	if a.jsonResults() {
		b, err := json.Marshal(map[string]any{"files": w.Files, "skipped": w.Skipped})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.Stdout, "%s\n", b)
		return err
	}
	for _, f := range w.Files {
		if _, err := fmt.Fprintln(a.Stdout, f); err != nil {
			return err
		}
	}
	return nil
}
