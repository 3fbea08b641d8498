package ppo

import "math"

// RolloutISMode is the level of the rollout importance weights (verl's
// algorithm.rollout_correction.rollout_is).
type RolloutISMode string

const (
	// RolloutISNone computes no weights (verl's null).
	RolloutISNone RolloutISMode = ""
	// RolloutISToken gives every token its own truncated weight.
	RolloutISToken RolloutISMode = "token"
	// RolloutISSequence gives every token of a sequence the truncated
	// product of the sequence's token ratios.
	RolloutISSequence RolloutISMode = "sequence"
)

var rolloutISModes = map[string]RolloutISMode{"": RolloutISNone, "null": RolloutISNone, "token": RolloutISToken, "sequence": RolloutISSequence}

// ParseRolloutIS accepts verl's names; "" and "null" mean none.
func ParseRolloutIS(s string) (RolloutISMode, error) {
	return parseName(rolloutISModes, s, "algorithm.rollout_correction.rollout_is", "level", "token, sequence or null")
}

// ISMetrics summarise a batch's rollout importance weights over its
// unmasked tokens (verl logs them under rollout_corr/).
type ISMetrics struct {
	// Mean is the masked mean of the truncated weights.
	Mean float64
	// Truncated is the fraction of unmasked tokens whose weight the
	// threshold capped.
	Truncated float64
	// LogRatioMean is the masked mean of log π_old − log π_rollout (the
	// k1 estimate of KL(π_rollout ‖ π_old) per token).
	LogRatioMean float64
}

// RolloutISWeights writes into dst the truncated importance weights of
// verl's rollout correction in decoupled mode (verl
// trainer/ppo/rollout_corr_helper.py, compute_rollout_correction_and_rejection_mask;
// docs/algo/rollout_corr_math.md §3.3; TIS from Yao et al. 2025, "Your
// efficient RL framework secretly brings you off-policy RL training"):
//
//	token:    ρ_t = min(exp(clamp(old_t − rollout_t, −20, 20)), threshold)
//	sequence: ρ_t = min(exp(clamp(Σ_s m_s·(old_s − rollout_s), −20, 20)), threshold)
//
// for every token t with mask m_t ≠ 0, and 0 where the mask is 0 (verl
// zeroes padding). old is π_old, the proximal policy PPO clips against;
// rollout is the sampler's logprobs. The weights are constants of the
// loss (verl detaches them) that multiply each token's policy loss.
//
// Every policy loss here is positively homogeneous in the advantage
// (l(ρ·A) = ρ·l(A) for ρ > 0, clip fractions unchanged), and ρ ≥ e^−20 > 0,
// so the caller applies them by multiplying the advantages token by token
// before PolicyLoss — which is exactly verl's pg_losses × rollout_is_weights.
// With mode RolloutISNone dst is filled with 1 where the mask is set.
func RolloutISWeights(old, rollout, mask []float64, offsets []int, mode RolloutISMode, threshold float64, dst []float64) (ISMetrics, error) {
	for _, c := range []struct {
		name string
		n    int
	}{{"rollout logprobs", len(rollout)}, {"mask", len(mask)}, {"weights", len(dst)}} {
		if err := sameLen(c.name, c.n, "old logprobs", len(old)); err != nil {
			zero(dst)
			return ISMetrics{}, err
		}
	}
	if err := ValidateOffsets(offsets, len(old)); err != nil {
		zero(dst)
		return ISMetrics{}, err
	}
	if _, err := ParseRolloutIS(string(mode)); err != nil {
		zero(dst)
		return ISMetrics{}, err
	}
	if !(threshold >= 1) || math.IsInf(threshold, 0) {
		zero(dst)
		return ISMetrics{}, configError("algorithm.rollout_correction.rollout_is_threshold", "must be a finite number of at least 1")
	}
	for _, c := range []struct {
		name string
		xs   []float64
	}{{"old logprobs", old}, {"rollout logprobs", rollout}, {"mask", mask}} {
		if err := checkFinite(c.name, c.xs); err != nil {
			zero(dst)
			return ISMetrics{}, err
		}
	}
	var m ISMetrics
	var tokens float64
	for i := 0; i+1 < len(offsets); i++ {
		lo, hi := offsets[i], offsets[i+1]
		seq := 0.0
		for t := lo; t < hi; t++ {
			if mask[t] != 0 {
				seq += mask[t] * (old[t] - rollout[t])
				m.LogRatioMean += mask[t] * (old[t] - rollout[t])
			}
		}
		for t := lo; t < hi; t++ {
			if mask[t] == 0 {
				dst[t] = 0
				continue
			}
			x := old[t] - rollout[t]
			if mode == RolloutISSequence {
				x = seq
			}
			w := 1.0
			if mode != RolloutISNone {
				w = math.Exp(math.Max(-20, math.Min(20, x)))
				if w > threshold {
					w = threshold
					m.Truncated += mask[t]
				}
			}
			dst[t] = w
			m.Mean += w * mask[t]
			tokens += mask[t]
		}
	}
	if tokens > 0 {
		m.Mean /= tokens
		m.Truncated /= tokens
		m.LogRatioMean /= tokens
	}
	return m, nil
}
