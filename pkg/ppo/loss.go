package ppo

import (
	"math"
)

// PolicyLossKind names a policy-gradient objective (verl's
// actor.policy_loss.loss_mode, Tinker's loss_fn).
type PolicyLossKind string

const (
	// LossPPO is PPO's clipped surrogate with asymmetric clip ratios and
	// dual clip (verl "vanilla").
	LossPPO PolicyLossKind = "vanilla"
	// LossImportanceSampling is the unclipped importance-weighted
	// objective (Tinker "importance_sampling").
	LossImportanceSampling PolicyLossKind = "importance_sampling"
	// LossCISPO clips the importance weight and stops its gradient (verl
	// and Tinker "cispo").
	LossCISPO PolicyLossKind = "cispo"
	// LossGSPO uses one length-normalised ratio per sequence (verl "gspo").
	LossGSPO PolicyLossKind = "gspo"
	// LossReinforce is the plain policy gradient −A·lp of verl's bypass
	// mode with algorithm.rollout_correction.loss_type=reinforce (verl
	// core_algos.py, compute_policy_loss_reinforce). It is chosen by that
	// key, not by actor.policy_loss, so ParsePolicyLoss does not take it.
	LossReinforce PolicyLossKind = "reinforce"
)

var policyLosses = map[string]PolicyLossKind{
	"vanilla": LossPPO, "ppo": LossPPO,
	"importance_sampling": LossImportanceSampling, "cispo": LossCISPO, "gspo": LossGSPO,
}

// ParsePolicyLoss accepts verl's and Tinker's names ("ppo" is "vanilla").
func ParsePolicyLoss(s string) (PolicyLossKind, error) {
	return parseName(policyLosses, s, "policy_loss.loss_mode", "policy loss", "vanilla (ppo), importance_sampling, cispo or gspo")
}

// AggMode names how per-token losses become one number (verl's
// actor.loss_agg_mode).
type AggMode string

const (
	AggTokenMean           AggMode = "token-mean"
	AggSeqMeanTokenSum     AggMode = "seq-mean-token-sum"
	AggSeqMeanTokenMean    AggMode = "seq-mean-token-mean"
	AggSeqMeanTokenSumNorm AggMode = "seq-mean-token-sum-norm"
)

var aggModes = map[string]AggMode{
	"token-mean": AggTokenMean, "seq-mean-token-sum": AggSeqMeanTokenSum,
	"seq-mean-token-mean": AggSeqMeanTokenMean, "seq-mean-token-sum-norm": AggSeqMeanTokenSumNorm,
}

// ParseAggMode accepts verl's four names.
func ParseAggMode(s string) (AggMode, error) {
	return parseName(aggModes, s, "actor.loss_agg_mode", "aggregation", "token-mean, seq-mean-token-sum, seq-mean-token-mean or seq-mean-token-sum-norm")
}

// LossConfig holds the actor's loss settings. Start from DefaultLossConfig.
type LossConfig struct {
	Loss PolicyLossKind
	// ClipRatioLow and ClipRatioHigh bound the ratio to
	// [1 − low, 1 + high] (actor.clip_ratio_low/high, default 0.2). For
	// Tinker's absolute thresholds (lo, hi) use low = 1 − lo, high = hi − 1.
	ClipRatioLow, ClipRatioHigh float64
	// ClipRatioC is the dual-clip bound for negative advantages
	// (actor.clip_ratio_c, default 3.0, must be > 1). PPO only.
	ClipRatioC float64
	AggMode    AggMode
	// NormLength is the constant divisor of seq-mean-token-sum-norm. 0
	// means the longest sequence in the call, which is what verl uses when
	// no loss_scale_factor is set (loss_mask.shape[-1]); Dr. GRPO's
	// MAX_TOKENS is data.max_response_length.
	NormLength float64
	// KLCoef adds KLCoef·agg(kl(lp, ref)) to the loss (actor.use_kl_loss
	// with kl_loss_coef); 0 disables it.
	KLCoef float64
	KLType KLType
	// EntropyCoeff subtracts EntropyCoeff·agg(entropy) (actor.entropy_coeff).
	EntropyCoeff float64
}

// DefaultLossConfig returns verl's actor defaults (and rLLM's).
func DefaultLossConfig() LossConfig {
	return LossConfig{
		Loss:          LossPPO,
		ClipRatioLow:  0.2,
		ClipRatioHigh: 0.2,
		ClipRatioC:    3.0,
		AggMode:       AggTokenMean,
		KLType:        KLK3,
	}
}

// Validate reports settings that cannot be right.
func (c *LossConfig) Validate() error {
	if _, err := ParsePolicyLoss(string(c.Loss)); err != nil && c.Loss != LossReinforce {
		return err
	}
	if _, err := ParseAggMode(string(c.AggMode)); err != nil {
		return err
	}
	switch {
	case !finite(c.ClipRatioLow) || c.ClipRatioLow < 0:
		return configError("actor.clip_ratio_low", "must be a finite number ≥ 0")
	case !finite(c.ClipRatioHigh) || c.ClipRatioHigh < 0:
		return configError("actor.clip_ratio_high", "must be a finite number ≥ 0")
	case c.Loss == LossPPO && (!finite(c.ClipRatioC) || c.ClipRatioC <= 1):
		return configError("actor.clip_ratio_c", "must be greater than 1 (dual-clip PPO's lower bound; verl's default is 3.0)")
	case !finite(c.NormLength) || c.NormLength < 0:
		return configError("loss_scale_factor", "must be a finite number ≥ 0")
	case !finite(c.KLCoef):
		return configError("actor.kl_loss_coef", "must be a finite number")
	case !finite(c.EntropyCoeff):
		return configError("actor.entropy_coeff", "must be a finite number")
	}
	if c.KLCoef != 0 {
		if _, err := ParseKLType(string(c.KLType)); err != nil {
			return err
		}
	}
	return nil
}

// LossInput is one batch of sequences laid out flat (see the package doc).
// Logprobs are under the policy being trained, OldLogprobs under the policy
// that sampled (π_old), Advantages and Mask per token. RefLogprobs is read
// when KLCoef ≠ 0, Entropies when EntropyCoeff ≠ 0 or when given (for the
// metric).
type LossInput struct {
	Offsets     []int
	Logprobs    []float64
	OldLogprobs []float64
	Advantages  []float64
	Mask        []float64
	// PGMask, when set, is the mask of the policy-gradient term alone;
	// the KL and entropy terms keep Mask. verl's bypass mode rejects
	// tokens (rollout_rs) inside the policy loss only.
	PGMask      []float64
	RefLogprobs []float64
	Entropies   []float64
}

// LossMetrics are the numbers verl logs under actor/ for one call.
// Fractions and means are masked means (Σ m·x / (Σ m + 1e-8), verl's
// masked_mean).
type LossMetrics struct {
	PGLoss        float64 // actor/pg_loss
	KLLoss        float64 // actor/kl_loss (aggregated kl, before KLCoef)
	Entropy       float64 // actor/entropy (aggregated entropy)
	ClipFrac      float64 // actor/pg_clipfrac
	ClipFracLower float64 // actor/pg_clipfrac_lower (dual clip)
	PPOKL         float64 // actor/ppo_kl: masked mean of old − lp
	RatioMean     float64
	RatioMin      float64
	RatioMax      float64
	Tokens        float64 // Σ mask
	Sequences     int     // sequences with a non-zero mask
}

// LossResult is the loss value and its metrics; the gradient goes to the
// caller's buffer.
type LossResult struct {
	Loss    float64
	Metrics LossMetrics
}

// aggPlan holds what the aggregation weights need from the whole batch.
type aggPlan struct {
	mode      AggMode
	tokens    float64 // Σ mask
	sequences float64 // sequences whose mask sums to > 0
	norm      float64 // seq-mean-token-sum-norm divisor
}

func planAgg(mode AggMode, offsets []int, mask []float64, normLength float64) aggPlan {
	p := aggPlan{mode: mode, norm: normLength}
	longest := 0
	for i := 0; i+1 < len(offsets); i++ {
		lo, hi := offsets[i], offsets[i+1]
		var m float64
		for _, x := range mask[lo:hi] {
			m += x
		}
		p.tokens += m
		if m > 0 {
			p.sequences++
		}
		longest = max(longest, hi-lo)
	}
	if p.norm == 0 {
		p.norm = float64(longest)
	}
	return p
}

// seqWeight is ∂loss/∂(mask_t·l_t) for the tokens of a sequence whose mask
// sums to m: the aggregation of verl's agg_loss written as one weight per
// sequence.
//
//	token-mean:               L = Σ m·l / Σ m
//	seq-mean-token-sum:       L = Σ_seq (Σ_t m·l) / S
//	seq-mean-token-mean:      L = Σ_seq (Σ_t m·l / (Σ_t m + 1e-8)) / S
//	seq-mean-token-sum-norm:  L = Σ_seq (Σ_t m·l) / S / NormLength
//
// (seq-mean-token-sum-norm is a sequence mean since verl PR #5417; before
// it the per-sequence sums were divided by NormLength alone). S counts sequences with a non-zero mask (verl excludes fully masked
// ones). An empty denominator gives weight 0: a batch with no unmasked
// token has loss 0 and gradient 0, not NaN.
func (p *aggPlan) seqWeight(m float64) float64 {
	switch p.mode {
	case AggTokenMean:
		if p.tokens == 0 {
			return 0
		}
		return 1 / p.tokens
	case AggSeqMeanTokenSum:
		if m == 0 || p.sequences == 0 {
			return 0
		}
		return 1 / p.sequences
	case AggSeqMeanTokenMean:
		if m == 0 || p.sequences == 0 {
			return 0
		}
		return 1 / ((m + 1e-8) * p.sequences)
	case AggSeqMeanTokenSumNorm:
		if m == 0 || p.norm == 0 || p.sequences == 0 {
			return 0
		}
		return 1 / (p.sequences * p.norm)
	}
	return 0
}

func (p *aggPlan) needsSeqMask() bool {
	return p.mode == AggSeqMeanTokenSum || p.mode == AggSeqMeanTokenMean || p.mode == AggSeqMeanTokenSumNorm
}

func seqMask(mask []float64) float64 {
	var m float64
	for _, x := range mask {
		m += x
	}
	return m
}

// Aggregate reduces per-token values to one number with verl's agg_loss
// (see seqWeight for the formulas).
func Aggregate(values, mask []float64, offsets []int, mode AggMode, normLength float64) (float64, error) {
	if err := sameLen("values", len(values), "mask", len(mask)); err != nil {
		return 0, err
	}
	if err := ValidateOffsets(offsets, len(mask)); err != nil {
		return 0, err
	}
	if _, err := ParseAggMode(string(mode)); err != nil {
		return 0, err
	}
	if err := checkFinite("values", values); err != nil {
		return 0, err
	}
	if err := checkFinite("mask", mask); err != nil {
		return 0, err
	}
	p := planAgg(mode, offsets, mask, normLength)
	var total float64
	for i := 0; i+1 < len(offsets); i++ {
		lo, hi := offsets[i], offsets[i+1]
		w := p.seqWeight(seqMask(mask[lo:hi]))
		var s float64
		for t := lo; t < hi; t++ {
			s += values[t] * mask[t]
		}
		total += w * s
	}
	return total, nil
}

func (in *LossInput) validate(cfg *LossConfig, grad []float64) error {
	n := len(in.Logprobs)
	if err := sameLen("gradient", len(grad), "logprobs", n); err != nil {
		return err
	}
	checks := []struct {
		name string
		l    int
	}{{"old logprobs", len(in.OldLogprobs)}, {"advantages", len(in.Advantages)}, {"mask", len(in.Mask)}}
	if in.PGMask != nil {
		checks = append(checks, struct {
			name string
			l    int
		}{"policy-gradient mask", len(in.PGMask)})
	}
	for _, c := range checks {
		if err := sameLen(c.name, c.l, "logprobs", n); err != nil {
			return err
		}
	}
	if cfg.KLCoef != 0 {
		if err := sameLen("ref logprobs", len(in.RefLogprobs), "logprobs", n); err != nil {
			return err
		}
	}
	if cfg.EntropyCoeff != 0 || in.Entropies != nil {
		if err := sameLen("entropies", len(in.Entropies), "logprobs", n); err != nil {
			return err
		}
	}
	return ValidateOffsets(in.Offsets, n)
}

// nonFinite finds the input that made a fused finiteness check fail; if the
// inputs are all finite the loss itself overflowed.
func (in *LossInput) nonFinite() error {
	for _, c := range []struct {
		name string
		xs   []float64
	}{{"logprobs", in.Logprobs}, {"old logprobs", in.OldLogprobs}, {"advantages", in.Advantages}, {"mask", in.Mask}, {"policy-gradient mask", in.PGMask}, {"ref logprobs", in.RefLogprobs}, {"entropies", in.Entropies}} {
		if err := checkFinite(c.name, c.xs); err != nil {
			return err
		}
	}
	return &InputError{Name: "loss", Index: 0, Msg: "overflowed to ±Inf; logprobs and advantages are out of any sensible range"}
}

// PolicyLoss computes the policy loss of cfg.Loss over the batch, writes
// ∂loss/∂Logprobs into grad (len = tokens; 0 where the mask is 0) and
// returns the loss value and metrics. It allocates nothing.
//
// With r_t = exp(clamp(lp_t − old_t, −20, 20)) (verl's clamp; the gradient
// is 0 where the clamp bites), A the advantage, and l_t the per-token loss
// aggregated by cfg.AggMode (see Aggregate):
//
// PPO, verl compute_policy_loss_vanilla (Schulman et al. 2017,
// arXiv:1707.06347; dual clip from Ye et al. 2019, arXiv:1912.09729):
//
//	l1 = −A·r, l2 = −A·clip(r, 1−low, 1+high), l = max(l1, l2)
//	if A < 0: l = min(l, −A·c)
//
// clipfrac = mean[l2 > l1], clipfrac_lower = mean[A < 0 and max(l1,l2) > −A·c].
//
// Importance sampling, Tinker importance_sampling: l = −A·r.
//
// CISPO, verl compute_policy_loss_cispo (MiniMax 2025, arXiv:2506.13585):
// l = −sg(clip(r, 1−low, 1+high))·A·lp, so ∂l/∂lp = −clip(r)·A.
//
// GSPO, verl compute_policy_loss_gspo (Zheng et al. 2025,
// arXiv:2507.18071): s_i = exp(min(Σ_t m(lp−old) / max(Σ_t m, 1), 10)) per
// sequence, used at every token with ∂s/∂lp_t = s (the GSPO-token
// stop-gradient form), l = max(−A·s, −A·clip(s, 1−low, 1+high)), always
// aggregated seq-mean-token-mean as verl forces.
//
// REINFORCE, verl compute_policy_loss_reinforce (bypass mode, loss_type
// reinforce): l = −A·lp, so ∂l/∂lp = −A; verl's importance weights
// w = π_θ/π_rollout multiply it, which the caller folds into A.
//
// With PGMask set, the policy-gradient term is masked and aggregated by
// it, the KL and entropy terms by Mask.
//
// Then, as verl's dp_actor adds them: loss = pg_loss − EntropyCoeff ·
// agg(entropy) + KLCoef · agg(KL(lp, ref)). Entropies are inputs, so their
// term adds nothing to grad: its gradient flows through the logits, which
// this package never sees.
func PolicyLoss(in *LossInput, cfg *LossConfig, grad []float64) (LossResult, error) {
	if err := in.validate(cfg, grad); err != nil {
		zero(grad)
		return LossResult{}, err
	}
	if err := cfg.Validate(); err != nil {
		zero(grad)
		return LossResult{}, err
	}
	mode := cfg.AggMode
	if cfg.Loss == LossGSPO {
		mode = AggSeqMeanTokenMean
	}
	pg := in
	if in.PGMask != nil {
		cp := *in
		cp.Mask = in.PGMask
		pg = &cp
	}
	plan := planAgg(mode, pg.Offsets, pg.Mask, cfg.NormLength)
	var res LossResult
	var chk float64
	switch cfg.Loss {
	case LossPPO:
		chk = ppoLoss(pg, cfg, &plan, grad, &res)
	case LossImportanceSampling:
		chk = isLoss(pg, &plan, grad, &res)
	case LossCISPO:
		chk = cispoLoss(pg, cfg, &plan, grad, &res)
	case LossGSPO:
		chk = gspoLoss(pg, cfg, &plan, grad, &res)
	case LossReinforce:
		chk = reinforceLoss(pg, &plan, grad, &res)
	}
	m := &res.Metrics
	m.Tokens = plan.tokens
	m.Sequences = int(plan.sequences)
	den := plan.tokens + 1e-8
	m.ClipFrac /= den
	m.ClipFracLower /= den
	m.PPOKL /= den
	m.RatioMean /= den
	if plan.tokens == 0 {
		m.RatioMin, m.RatioMax = 0, 0
	}
	res.Loss = m.PGLoss

	user := plan
	if mode != cfg.AggMode || in.PGMask != nil {
		user = planAgg(cfg.AggMode, in.Offsets, in.Mask, cfg.NormLength)
	}
	if cfg.KLCoef != 0 {
		chk += klTerm(in, cfg, &user, grad, &res)
	}
	if in.Entropies != nil {
		for i := 0; i+1 < len(in.Offsets); i++ {
			lo, hi := in.Offsets[i], in.Offsets[i+1]
			mk := in.Mask[lo:hi]
			w := 0.0
			if user.needsSeqMask() {
				w = user.seqWeight(seqMask(mk))
			} else {
				w = user.seqWeight(0)
			}
			var s float64
			for t, e := range in.Entropies[lo:hi] {
				s += e * mk[t]
			}
			res.Metrics.Entropy += w * s
		}
		chk += res.Metrics.Entropy * 0
		res.Loss -= cfg.EntropyCoeff * res.Metrics.Entropy
	}
	chk += res.Loss * 0
	if chk != 0 {
		zero(grad)
		return LossResult{}, in.nonFinite()
	}
	return res, nil
}

func weightFor(plan *aggPlan, mask []float64) float64 {
	if plan.needsSeqMask() {
		return plan.seqWeight(seqMask(mask))
	}
	return plan.seqWeight(0)
}

// clampRatio is torch.clamp(r, lo, hi) for finite r. The builtin min and
// max also order NaNs and signed zeros, which costs more than the whole
// rest of the PPO token loop.
func clampRatio(r, lo, hi float64) float64 {
	if r < lo {
		return lo
	}
	if r > hi {
		return hi
	}
	return r
}

// logRatio is verl's clamped negative_approx_kl and the factor its clamp
// puts on the gradient.
func logRatio(lp, old float64) (x, dx float64) {
	x = lp - old
	switch {
	case x > 20:
		return 20, 0
	case x < -20:
		return -20, 0
	}
	return x, 1
}

func ppoLoss(in *LossInput, cfg *LossConfig, plan *aggPlan, grad []float64, res *LossResult) float64 {
	lowR, highR, c := 1-cfg.ClipRatioLow, 1+cfg.ClipRatioHigh, cfg.ClipRatioC
	// Dual clip can only bite where max(r, clip(r)) reaches c: rounded
	// products are monotone, so below dualGate neither −A·r > −A·c nor a
	// tie is possible. Testing the ratio first keeps the branch on the
	// sign of A (random from token to token) off the common path.
	dualGate := c * (1 - 1e-9)
	var chk, loss, clipped, lower, kl, rsum float64
	rmin, rmax := math.Inf(1), math.Inf(-1)
	for i := 0; i+1 < len(in.Offsets); i++ {
		lo, hi := in.Offsets[i], in.Offsets[i+1]
		lp, old, adv, mask, g := in.Logprobs[lo:hi], in.OldLogprobs[lo:hi], in.Advantages[lo:hi], in.Mask[lo:hi], grad[lo:hi]
		old, adv, mask, g = old[:len(lp)], adv[:len(lp)], mask[:len(lp)], g[:len(lp)]
		w := weightFor(plan, mask)
		// The ratios first, into the gradient buffer: a tight loop around
		// the exp, whose call would otherwise make the main loop spill
		// every accumulator. The sequence stays in L1 between the loops.
		for t := range lp {
			x, _ := logRatio(lp[t], old[t])
			g[t] = ratioExp(x)
		}
		var seqLoss float64
		for t := range lp {
			m, a := mask[t], adv[t]
			x, dx := logRatio(lp[t], old[t])
			chk += (lp[t] - old[t] + a + m) * 0
			r := g[t]
			rc := clampRatio(r, lowR, highR)
			l1, l2 := -a*r, -a*rc
			l, d := l1, -a*r*dx
			if l2 > l1 {
				l, d = l2, 0 // clip(r) is flat here: no gradient
				clipped += m
			}
			if (r >= dualGate || rc >= dualGate) && a < 0 {
				l3 := -a * c
				if l > l3 {
					l, d = l3, 0
					lower += m
				} else if l == l3 {
					d *= 0.5 // torch.minimum splits the gradient of a tie
				}
			}
			seqLoss += l * m
			g[t] = w * m * d
			kl -= x * m
			rsum += r * m
			if m != 0 {
				if r < rmin {
					rmin = r
				}
				if r > rmax {
					rmax = r
				}
			}
		}
		loss += w * seqLoss
	}
	res.Metrics = LossMetrics{PGLoss: loss, ClipFrac: clipped, ClipFracLower: lower, PPOKL: kl, RatioMean: rsum, RatioMin: rmin, RatioMax: rmax}
	return chk
}

func isLoss(in *LossInput, plan *aggPlan, grad []float64, res *LossResult) float64 {
	var chk, loss, kl, rsum float64
	rmin, rmax := math.Inf(1), math.Inf(-1)
	for i := 0; i+1 < len(in.Offsets); i++ {
		lo, hi := in.Offsets[i], in.Offsets[i+1]
		lp, old, adv, mask, g := in.Logprobs[lo:hi], in.OldLogprobs[lo:hi], in.Advantages[lo:hi], in.Mask[lo:hi], grad[lo:hi]
		w := weightFor(plan, mask)
		for t := range lp { // ratios first, as in ppoLoss
			x, _ := logRatio(lp[t], old[t])
			g[t] = ratioExp(x)
		}
		var seqLoss float64
		for t := range lp {
			m, a := mask[t], adv[t]
			chk += lp[t]*0 + old[t]*0 + a*0 + m*0
			x, dx := logRatio(lp[t], old[t])
			r := g[t]
			seqLoss += -a * r * m
			g[t] = w * m * (-a * r * dx)
			kl -= x * m
			rsum += r * m
			if m != 0 {
				if r < rmin {
					rmin = r
				}
				if r > rmax {
					rmax = r
				}
			}
		}
		loss += w * seqLoss
	}
	res.Metrics = LossMetrics{PGLoss: loss, PPOKL: kl, RatioMean: rsum, RatioMin: rmin, RatioMax: rmax}
	return chk
}

func reinforceLoss(in *LossInput, plan *aggPlan, grad []float64, res *LossResult) float64 {
	var chk, loss, kl, rsum float64
	rmin, rmax := math.Inf(1), math.Inf(-1)
	for i := 0; i+1 < len(in.Offsets); i++ {
		lo, hi := in.Offsets[i], in.Offsets[i+1]
		lp, old, adv, mask, g := in.Logprobs[lo:hi], in.OldLogprobs[lo:hi], in.Advantages[lo:hi], in.Mask[lo:hi], grad[lo:hi]
		w := weightFor(plan, mask)
		var seqLoss float64
		for t := range lp {
			m, a := mask[t], adv[t]
			chk += lp[t]*0 + old[t]*0 + a*0 + m*0
			x, _ := logRatio(lp[t], old[t])
			seqLoss += -a * lp[t] * m
			g[t] = w * m * -a
			kl -= (lp[t] - old[t]) * m // verl's ppo_kl here is unclamped
			if m != 0 {
				r := math.Exp(x)
				rsum += r * m
				rmin, rmax = min(rmin, r), max(rmax, r)
			}
		}
		loss += w * seqLoss
	}
	res.Metrics = LossMetrics{PGLoss: loss, PPOKL: kl, RatioMean: rsum, RatioMin: rmin, RatioMax: rmax}
	return chk
}

func cispoLoss(in *LossInput, cfg *LossConfig, plan *aggPlan, grad []float64, res *LossResult) float64 {
	lowR, highR := 1-cfg.ClipRatioLow, 1+cfg.ClipRatioHigh
	var chk, loss, clipped, kl, rsum float64
	rmin, rmax := math.Inf(1), math.Inf(-1)
	for i := 0; i+1 < len(in.Offsets); i++ {
		lo, hi := in.Offsets[i], in.Offsets[i+1]
		lp, old, adv, mask, g := in.Logprobs[lo:hi], in.OldLogprobs[lo:hi], in.Advantages[lo:hi], in.Mask[lo:hi], grad[lo:hi]
		w := weightFor(plan, mask)
		for t := range lp { // ratios first, as in ppoLoss
			x, _ := logRatio(lp[t], old[t])
			g[t] = ratioExp(x)
		}
		var seqLoss float64
		for t := range lp {
			m, a := mask[t], adv[t]
			chk += lp[t]*0 + old[t]*0 + a*0 + m*0
			x, _ := logRatio(lp[t], old[t])
			r := g[t]
			rc := clampRatio(r, lowR, highR)
			if rc != r {
				clipped += m
			}
			seqLoss += -rc * a * lp[t] * m
			g[t] = w * m * (-rc * a)
			kl -= x * m
			rsum += r * m
			if m != 0 {
				if r < rmin {
					rmin = r
				}
				if r > rmax {
					rmax = r
				}
			}
		}
		loss += w * seqLoss
	}
	res.Metrics = LossMetrics{PGLoss: loss, ClipFrac: clipped, PPOKL: kl, RatioMean: rsum, RatioMin: rmin, RatioMax: rmax}
	return chk
}

func gspoLoss(in *LossInput, cfg *LossConfig, plan *aggPlan, grad []float64, res *LossResult) float64 {
	lowR, highR := 1-cfg.ClipRatioLow, 1+cfg.ClipRatioHigh
	var chk, loss, clipped, kl, rsum float64
	rmin, rmax := math.Inf(1), math.Inf(-1)
	for i := 0; i+1 < len(in.Offsets); i++ {
		lo, hi := in.Offsets[i], in.Offsets[i+1]
		lp, old, adv, mask, g := in.Logprobs[lo:hi], in.OldLogprobs[lo:hi], in.Advantages[lo:hi], in.Mask[lo:hi], grad[lo:hi]
		var msum, xsum float64
		for t := range lp {
			msum += mask[t]
			xsum += (lp[t] - old[t]) * mask[t]
		}
		w := plan.seqWeight(msum)
		seqLen := max(msum, 1)
		sx := xsum / seqLen
		ds := 1.0
		if sx > 10 {
			sx, ds = 10, 0
		}
		s := math.Exp(sx) // per sequence, and sx has no lower clamp
		sc := clampRatio(s, lowR, highR)
		var seqLoss float64
		for t := range lp {
			m, a := mask[t], adv[t]
			chk += lp[t]*0 + old[t]*0 + a*0 + m*0
			l1, l2 := -a*s, -a*sc
			l, d := l1, -a*s*ds
			if l2 > l1 {
				l, d = l2, 0
				clipped += m
			}
			seqLoss += l * m
			g[t] = w * m * d
			kl -= (lp[t] - old[t]) * m
		}
		if msum != 0 {
			rsum += s * msum
			rmin, rmax = min(rmin, s), max(rmax, s)
		}
		loss += w * seqLoss
	}
	res.Metrics = LossMetrics{PGLoss: loss, ClipFrac: clipped, PPOKL: kl, RatioMean: rsum, RatioMin: rmin, RatioMax: rmax}
	return chk
}

// klTerm adds KLCoef·agg(kl) to the loss and its gradient to grad.
func klTerm(in *LossInput, cfg *LossConfig, plan *aggPlan, grad []float64, res *LossResult) float64 {
	kind, _ := ParseKLType(string(cfg.KLType))
	var chk, total float64
	for i := 0; i+1 < len(in.Offsets); i++ {
		lo, hi := in.Offsets[i], in.Offsets[i+1]
		lp, ref, mask, g := in.Logprobs[lo:hi], in.RefLogprobs[lo:hi], in.Mask[lo:hi], grad[lo:hi]
		w := weightFor(plan, mask)
		var s float64
		for t := range lp {
			chk += ref[t] * 0
			k, d := KL(kind, lp[t], ref[t])
			s += k * mask[t]
			g[t] += cfg.KLCoef * w * mask[t] * d
		}
		total += w * s
	}
	res.Metrics.KLLoss = total
	res.Loss += cfg.KLCoef * total
	return chk
}

// AggregationWeights writes into dst the weight verl's agg_loss gives each
// token, ∂agg(v)/∂v_t (0 where the mask is 0): what a term aggregated like
// the loss — the entropy bonus, computed where the logits are — needs as
// its per-token coefficient.
func AggregationWeights(mask []float64, offsets []int, mode AggMode, normLength float64, dst []float64) error {
	if err := sameLen("weights", len(dst), "mask", len(mask)); err != nil {
		return err
	}
	if err := ValidateOffsets(offsets, len(mask)); err != nil {
		return err
	}
	if _, err := ParseAggMode(string(mode)); err != nil {
		return err
	}
	if err := checkFinite("mask", mask); err != nil {
		return err
	}
	p := planAgg(mode, offsets, mask, normLength)
	for i := 0; i+1 < len(offsets); i++ {
		lo, hi := offsets[i], offsets[i+1]
		w := weightFor(&p, mask[lo:hi])
		for t := lo; t < hi; t++ {
			dst[t] = w * mask[t]
		}
	}
	return nil
}
