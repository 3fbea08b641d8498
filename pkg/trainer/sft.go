package trainer

import (
	"context"
	"math/rand/v2"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// SFTOptions shape a supervised (cross_entropy) run.
type SFTOptions struct {
	Epochs, BatchSize int
	Adam              backend.AdamParams
	// Shuffle, when set, reorders the data at each epoch; nil keeps it in
	// order.
	Shuffle *rand.Rand
	// OnStep, when set, receives each optimizer step's per-token loss.
	OnStep func(step, steps, epoch int, loss float64)
}

// SFT is the one supervised loop, used by `rllm sft` and by the warm-up:
// cross_entropy on the datums' weighted targets through any
// TrainingBackend, each step's forward_backward and optim_step queued
// before waiting. It returns the per-token loss of every step.
func SFT(ctx context.Context, be backend.TrainingBackend, data []backend.Datum, o SFTOptions) ([]float64, error) {
	loss := backend.Loss{Name: backend.LossCrossEntropy}
	batch := max(o.BatchSize, 1)
	steps := o.Epochs * ((len(data) + batch - 1) / batch)
	order := make([]int, len(data))
	for i := range order {
		order[i] = i
	}
	var curve []float64
	for epoch := 1; epoch <= o.Epochs; epoch++ {
		if o.Shuffle != nil {
			o.Shuffle.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		for start := 0; start < len(order); start += batch {
			mb := make([]backend.Datum, 0, batch)
			var weight float64
			for _, i := range order[start:min(start+batch, len(order))] {
				mb = append(mb, data[i])
				for _, w := range data[i].LossFnInputs.Weights {
					weight += w
				}
			}
			fb := be.ForwardBackward(ctx, mb, loss)
			opt := be.OptimStep(ctx, o.Adam)
			res, err := fb.Result(ctx)
			if err != nil {
				return curve, err
			}
			if _, err := opt.Result(ctx); err != nil {
				return curve, err
			}
			perToken := res.Metrics["loss:sum"] / max(weight, 1)
			curve = append(curve, perToken)
			if o.OnStep != nil {
				o.OnStep(len(curve), steps, epoch, perToken)
			}
		}
	}
	return curve, nil
}
