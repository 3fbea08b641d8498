package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/tracking"
	"github.com/rllm-org/rllm-go/pkg/trainer"
)

type sftOptions struct {
	config      configFlags
	args        []string
	data        string
	promptKey   string
	responseKey string
	epochs      int
	batchSize   int
	lr          float64
	out         string
	weights     string
}

func newSFTCmd(a *App) *cobra.Command {
	opts := &sftOptions{}
	cmd := &cobra.Command{
		Use:   "sft --data FILE [key=value ...]",
		Short: "Supervised fine-tuning with cross_entropy on prompt/response pairs",
		Long: `Fine-tune the policy on a dataset of prompt/response rows (parquet, JSON
lines, JSON or CSV; columns "prompt" and "response" unless renamed with
--prompt-key/--response-key): each prompt is rendered as a user message
with the chat template, and the loss (cross_entropy, summed over response tokens) is taken on the
response and its end-of-message token only. Prints one loss line per step
and the loss curve at the end; --out saves a checkpoint rllm serve and
rllm train can load.

It runs on the configured backend: the embedded policy (backend.name=local),
or a real model on a Tinker service (backend.name=tinker), whose own chat
template renders the prompts; there --out DIR records the tinker:// paths in
DIR/tinker.json, and rllm train backend.tinker.weights=DIR starts from them.`,
		Example: `  rllm sft --data pairs.jsonl --epochs 5 --out checkpoints/sft
  rllm sft --data train.parquet --prompt-key question --response-key answer`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			switch {
			case opts.data == "":
				return usagef("--data is required: a dataset file (.parquet, .jsonl, .json or .csv) of prompt/response rows")
			case opts.epochs < 1:
				return usagef("--epochs %d must be at least 1", opts.epochs)
			case opts.batchSize < 1:
				return usagef("--batch-size %d must be at least 1", opts.batchSize)
			case opts.lr < 0 || math.IsNaN(opts.lr):
				return usagef("--lr %g must be ≥ 0 (0 takes actor.optim.lr, or the backend's default)", opts.lr)
			}
			return runSFT(cmd.Context(), a, opts)
		},
		ValidArgsFunction: completeConfigKeys,
	}
	opts.config.register(cmd)
	f := cmd.Flags()
	f.StringVar(&opts.data, "data", "", "dataset `FILE` of prompt/response rows (.parquet, .jsonl, .json, .csv)")
	f.StringVar(&opts.promptKey, "prompt-key", "prompt", "column holding the prompt")
	f.StringVar(&opts.responseKey, "response-key", "response", "column holding the response")
	f.IntVar(&opts.epochs, "epochs", 3, "passes over the data")
	f.IntVar(&opts.batchSize, "batch-size", 8, "rows per optimizer step")
	f.Float64Var(&opts.lr, "lr", 0, "learning rate (0 takes actor.optim.lr, or the backend's default: backend.local.lr, 2e-5 on tinker)")
	f.StringVar(&opts.out, "out", "", "checkpoint `DIR` to write at the end")
	f.StringVar(&opts.weights, "weights", "", "checkpoint to start from: a run `DIR` (its newest checkpoint), a global_step_N directory or a model directory; on tinker also a tinker://…/weights/… path")
	return cmd
}

func runSFT(ctx context.Context, a *App, opts *sftOptions) error {
	ld, err := opts.config.load(a, opts.args)
	if err != nil {
		return err
	}
	c := ld.Config
	rows, err := dataset.ReadAll(ctx, opts.data, dataset.Options{})
	if err != nil {
		return err
	}
	examples, err := sftExamples(opts.data, rows, opts.promptKey, opts.responseKey)
	if err != nil {
		return err
	}
	weights := opts.weights
	if c.Backend.Name == "local" {
		if weights, err = resolveWeights(a, c, opts.weights); err != nil {
			return err
		}
	}
	// Any backend: the embedded policy, or a real model on a Tinker
	// service (which resolves its own weights: tinker:// paths and
	// directories holding tinker.json).
	be, err := backend.Open(ctx, c, backend.OpenOptions{Weights: weights, Log: a.Stderr, Getenv: a.Getenv, ReadFile: a.ReadFile})
	if err != nil {
		return err
	}
	defer be.Close()
	data, err := trainer.SFTDatums(ctx, be, examples, func(row int, format string, args ...any) error {
		return dataset.RowError(opts.data, row, format, args...)
	})
	if err != nil {
		return err
	}
	lr := opts.lr
	if lr == 0 {
		lr = c.EffectiveLR()
	}
	rng := rand.New(rand.NewPCG(uint64(c.Trainer.Seed), 0x736674))
	out := sftOutput{w: a.Stdout, json: a.jsonResults()}
	// trainer.logger's trackers (tensorboard, wandb, mlflow) get the loss
	// of every step when it names them.
	track, err := openSideTracking(ctx, a, c, "sft")
	if err != nil {
		return err
	}
	onStep := func(step, steps, epoch int, loss float64) {
		out.step(step, steps, epoch, loss)
		track.Log(tracking.Row{Step: step, Time: time.Now(), Metrics: map[string]float64{"sft/loss": loss, "sft/epoch": float64(epoch)}})
	}
	curve, err := trainer.SFT(ctx, be, data, trainer.SFTOptions{Epochs: opts.epochs, BatchSize: opts.batchSize, Adam: sftAdam(lr), Shuffle: rng,
		OnStep: onStep})
	var last map[string]float64
	if len(curve) > 0 {
		last = map[string]float64{"sft/loss_first": curve[0], "sft/loss_last": curve[len(curve)-1]}
	}
	closeSideTracking(ctx, track, err, last)
	if err != nil {
		return err
	}
	out.line(map[string]any{"event": "done", "loss_first": curve[0], "loss_last": curve[len(curve)-1], "curve": curve},
		fmt.Sprintf("loss curve (per token): %s  %.4f -> %.4f", sparkline(curve), curve[0], curve[len(curve)-1]))
	if opts.out != "" {
		dir := opts.out
		if !strings.ContainsAny(dir, `/\`) {
			// A bare name is a directory here, never a name on the service.
			dir = "." + string(filepath.Separator) + dir
		}
		path, err := be.SaveState(ctx, dir).Result(ctx)
		if err != nil {
			return err
		}
		text := "saved checkpoint to " + opts.out
		if filepath.Clean(path) != filepath.Clean(opts.out) {
			text += " (" + path + ")"
		}
		out.line(map[string]any{"event": "saved", "checkpoint": opts.out, "path": path}, text)
	}
	return nil
}

// sftOutput writes sft's results on stdout: text lines, or one JSON
// object per line with --output json.
type sftOutput struct {
	w    io.Writer
	json bool
}

func (o sftOutput) line(fields map[string]any, text string) {
	if !o.json {
		fmt.Fprintln(o.w, text)
		return
	}
	enc := json.NewEncoder(o.w)
	enc.SetEscapeHTML(false) // as writeJSON: paths with & stay readable
	enc.Encode(fields)
}

func (o sftOutput) step(step, steps, epoch int, loss float64) {
	o.line(map[string]any{"event": "step", "step": step, "steps": steps, "epoch": epoch, "loss": loss},
		fmt.Sprintf("step %d/%d  epoch %d  loss %.4f", step, steps, epoch, loss))
}

func sftAdam(lr float64) backend.AdamParams {
	p := backend.DefaultAdamParams(lr)
	p.Eps, p.GradClipNorm = 1e-8, 1
	return p
}

// sftExamples reads prompt/response rows: each prompt is one user
// message, each response the reply to learn. Errors name the row as
// pkg/dataset does (0-based, the index `datasets` shows).
func sftExamples(file string, rows []episode.Task, promptKey, responseKey string) ([]trainer.SFTExample, error) {
	examples := make([]trainer.SFTExample, 0, len(rows))
	for i, row := range rows {
		prompt, ok1 := row[promptKey].(string)
		response, ok2 := row[responseKey].(string)
		if !ok1 || !ok2 {
			return nil, dataset.RowError(file, i, "lacks a %q or %q string; each row needs %q and %q columns (or set --prompt-key/--response-key)", promptKey, responseKey, promptKey, responseKey)
		}
		examples = append(examples, trainer.SFTExample{Messages: []episode.Message{{Role: "user", Content: prompt}}, Reply: response})
	}
	if len(examples) == 0 {
		return nil, usagef("%s has no rows; give at least one row with %q and %q columns", file, promptKey, responseKey)
	}
	return examples, nil
}

// sparklineWidth bounds the curve to one terminal line: a longer run's
// losses are averaged in equal buckets, one bar each.
const sparklineWidth = 60

// sparkline draws values as a row of block characters, high = tall.
func sparkline(xs []float64) string {
	const bars = "▁▂▃▄▅▆▇█"
	runes := []rune(bars)
	if n := len(xs); n > sparklineWidth {
		means := make([]float64, sparklineWidth)
		for i := range means {
			lo, hi := i*n/sparklineWidth, (i+1)*n/sparklineWidth
			for _, x := range xs[lo:hi] {
				means[i] += x
			}
			means[i] /= float64(hi - lo)
		}
		xs = means
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	var b strings.Builder
	for _, x := range xs {
		k := 0
		if hi > lo {
			k = int((x - lo) / (hi - lo) * float64(len(runes)-1))
		}
		b.WriteRune(runes[k])
	}
	return b.String()
}
