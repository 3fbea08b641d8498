package backend

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// Names of the built-in losses. Their definitions are Tinker's: sums over
// target tokens, no normalisation by length or batch size (a trainer that
// wants a mean scales advantages or weights itself).
const (
	LossCrossEntropy       = "cross_entropy"
	LossImportanceSampling = "importance_sampling"
	LossPPO                = "ppo"
	LossCISPO              = "cispo"
)

// Loss config keys, as in Tinker's loss_fn_config.
const (
	ClipLowThreshold  = "clip_low_threshold"
	ClipHighThreshold = "clip_high_threshold"
)

// Loss names a built-in loss and its settings (Tinker's loss_fn and
// loss_fn_config). A custom loss C(lp) is applied client side: Forward to
// get lp, compute g = ∂C/∂lp, then ForwardBackward with cross_entropy and
// Weights = −g.
type Loss struct {
	Name   string
	Config map[string]float64
}

// BuiltinLosses lists the losses every backend in this package family
// understands.
func BuiltinLosses() []string {
	return []string{LossCrossEntropy, LossImportanceSampling, LossPPO, LossCISPO}
}

// defaultClips are the thresholds Tinker uses when loss_fn_config leaves
// them out: PPO clips the ratio to [0.8, 1.2], CISPO to [0, 4].
var defaultClips = map[string][2]float64{
	LossPPO:   {0.8, 1.2},
	LossCISPO: {0, 4},
}

// Validate reports an unknown loss name or config key, or clip thresholds
// that are out of order.
func (l Loss) Validate() error {
	known := map[string][]string{
		LossCrossEntropy:       nil,
		LossImportanceSampling: nil,
		LossPPO:                {ClipLowThreshold, ClipHighThreshold},
		LossCISPO:              {ClipLowThreshold, ClipHighThreshold},
	}
	keys, ok := known[l.Name]
	if !ok {
		return &InputError{Msg: fmt.Sprintf("unknown loss %q; use one of %v, or cross_entropy with weights = -gradient for a custom loss", l.Name, BuiltinLosses())}
	}
	names := slices.Sorted(maps.Keys(l.Config))
	for _, k := range names {
		found := false
		for _, allowed := range keys {
			found = found || k == allowed
		}
		if !found {
			return &InputError{Msg: fmt.Sprintf("loss %s takes no config key %q (allowed: %v)", l.Name, k, keys)}
		}
	}
	if keys != nil {
		lo, hi := l.clips()
		if !(lo <= hi) {
			return &InputError{Msg: fmt.Sprintf("loss %s: clip_low_threshold %g must not exceed clip_high_threshold %g", l.Name, lo, hi)}
		}
	}
	return nil
}

func (l Loss) clips() (lo, hi float64) {
	d := defaultClips[l.Name]
	lo, hi = d[0], d[1]
	if v, ok := l.Config[ClipLowThreshold]; ok {
		lo = v
	}
	if v, ok := l.Config[ClipHighThreshold]; ok {
		hi = v
	}
	return lo, hi
}

// Needs lists the loss_fn_inputs a loss reads besides target_tokens.
func (l Loss) Needs() (samplingLogprobs, advantages bool) {
	switch l.Name {
	case LossCrossEntropy:
		return false, false
	default:
		return true, true
	}
}

// Token evaluates the loss term of one target token whose log-probability
// under the model being trained is lp, and its derivative with respect to
// lp. The datum supplies the sampling logprob, advantage and weight of the
// token at index i. Every backend that trains from logprobs shares this
// one definition, so the local model and any fake agree to the bit.
//
//   - cross_entropy:       −w·lp
//   - importance_sampling: −r·A,                      r = exp(lp − sampling_lp)
//   - ppo:                 −min(r·A, clip(r, lo, hi)·A)
//   - cispo:               −sg(clip(r, lo, hi))·lp·A  (sg: no gradient)
//
// The token's mask (1 when absent) multiplies both.
func (l Loss) Token(in *LossFnInputs, i int, lp float64) (loss, dlp float64) {
	mask := in.at(in.Mask, i, 1)
	if mask == 0 {
		return 0, 0
	}
	switch l.Name {
	case LossCrossEntropy:
		w := in.at(in.Weights, i, 1)
		loss, dlp = -w*lp, -w
	case LossImportanceSampling:
		a := in.at(in.Advantages, i, 0)
		r := math.Exp(lp - in.at(in.Logprobs, i, 0))
		loss, dlp = -r*a, -r*a
	case LossPPO:
		a := in.at(in.Advantages, i, 0)
		r := math.Exp(lp - in.at(in.Logprobs, i, 0))
		lo, hi := l.clips()
		unclipped, clipped := r*a, math.Min(math.Max(r, lo), hi)*a
		if unclipped <= clipped {
			loss, dlp = -unclipped, -r*a
		} else {
			// The clipped term is constant in lp.
			loss, dlp = -clipped, 0
		}
	case LossCISPO:
		a := in.at(in.Advantages, i, 0)
		r := math.Exp(lp - in.at(in.Logprobs, i, 0))
		lo, hi := l.clips()
		c := math.Min(math.Max(r, lo), hi)
		loss, dlp = -c*lp*a, -c*a
	}
	return mask * loss, mask * dlp
}
