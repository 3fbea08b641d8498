package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/plot"
)

type plotOptions struct {
	runs   []string
	out    string
	smooth float64
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
crash is skipped. A chart no run has data for is left out, and so is a KL
series that is zero at every step.

--smooth W draws noisy curves smoothed as TensorBoard does: an exponential
moving average with weight W in [0, 1) (0.9 averages over about the last
10 points, 0.99 over 100), debiased at the start, with the raw values
drawn faint behind it. 0, the default, draws the raw values only.
Validation pass@1, already a mean over the validation set, is never
smoothed.

The charts go to --out DIR: by default RUN_DIR/plots for one run and
./plots for several.`,
		Example: `  rllm plot checkpoints/rllm/arith
  rllm plot checkpoints/rllm/arith checkpoints/rllm/arith-rloo --out compare
  rllm plot checkpoints/rllm/arith --smooth 0.9`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("rllm plot needs at least one run directory (trainer.default_local_dir, holding metrics.jsonl)")
			}
			opts.runs = args
			return runPlot(a, opts)
		},
	}
	cmd.Flags().StringVar(&opts.out, "out", "", "`DIR` to write the charts to (default RUN_DIR/plots, or ./plots for several runs)")
	cmd.Flags().Float64Var(&opts.smooth, "smooth", 0, "smooth the curves with an exponential moving average of this `WEIGHT` in [0, 1), as TensorBoard does (0.9: about the last 10 points); 0 draws raw values")
	return cmd
}

func runPlot(a *App, opts *plotOptions) error {
	popts := plot.Options{Smooth: opts.smooth}
	if err := popts.Validate(); err != nil {
		return err
	}
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
	w, err := plot.Write(runs, out, popts)
	if err != nil {
		return err
	}
	if len(w.Skipped) > 0 {
		a.notef("no data for %s in these runs; left out", strings.Join(w.Skipped, ", "))
	}
	if a.jsonResults() {
		return writeJSON(a, map[string]any{"files": w.Files, "skipped": w.Skipped})
	}
	for _, f := range w.Files {
		if _, err := fmt.Fprintln(a.Stdout, f); err != nil {
			return err
		}
	}
	return nil
}
