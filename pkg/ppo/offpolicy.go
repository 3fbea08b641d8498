package ppo

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// This file is verl's rollout correction (algorithm.rollout_correction):
// verl/trainer/ppo/rollout_corr_helper.py at verl commit
// b178a3cd56f58b2d502255daba591e92833930a7, whose functions are named at
// each formula below; docs/algo/rollout_corr.md and rollout_corr_math.md
// there explain them (Liu, Li et al. 2025, "When Speed Kills Stability";
// TIS from Yao et al. 2025, "Your efficient RL framework secretly brings
// you off-policy RL training").
//
// Everything is a function of the log-ratio x_t = log π_train,t −
// log π_rollout,t per response token, where π_train is π_old (decoupled
// mode, a forward pass as the update starts) or π_θ (bypass mode, the
// current logprobs of each optimizer step), and of the response mask m.

// rolloutSafetyBound is verl's SAFETY_BOUND: log-ratios are clamped to
// ±20 before they are exponentiated.
const rolloutSafetyBound = 20.0

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

// RolloutRSOptions are verl's rejection-sampling criteria
// (SUPPORTED_ROLLOUT_RS_OPTIONS), each a divergence estimator of the
// token log-ratio x (clamped to ±20) at one level:
//
//	k1 = −x, k2 = ½x², k3 = eˣ − 1 − x
//
// token_*: each token's own value; seq_sum_*: Σ_t m·k over the sequence;
// seq_mean_*: Σ_t m·k / (Σ_t m + 1e-8); seq_max_*: the largest over the
// sequence's unmasked tokens (0 for none). A sequence-level rejection
// removes every token of the sequence.
var RolloutRSOptions = []string{
	"token_k1", "token_k2", "token_k3",
	"seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
	"seq_mean_k1", "seq_mean_k2", "seq_mean_k3",
	"seq_max_k2", "seq_max_k3",
}

// RSCriterion is one rejection-sampling criterion with its bounds.
type RSCriterion struct {
	// Option is verl's name, one of RolloutRSOptions.
	Option string
	// Lower and Upper bound the statistic. For a k1 option they are
	// verl's ratio bounds (lower, upper), and a token or sequence is kept
	// when log(Lower) ≤ k1-statistic ≤ log(Upper); for k2 and k3 only
	// Upper is read: kept when the statistic is ≤ Upper.
	Lower, Upper float64
}

func (c RSCriterion) k1() bool { return strings.HasSuffix(c.Option, "k1") }

// ParseRolloutRS reads verl's rollout_rs (a comma-separated list of
// criteria, duplicates dropped; "" and "null" mean none) with its
// rollout_rs_threshold: one threshold shared by every criterion or one
// per criterion, comma-separated. A k1 criterion takes "lower_upper"
// ratio bounds, or one number u meaning lower = 1/u; k2 and k3 take one
// positive upper bound (verl _parse_rollout_rs_thresholds). A nil
// threshold with criteria is an error, as in verl.
func ParseRolloutRS(options string, threshold *string) ([]RSCriterion, error) {
	const optKey, thrKey = "algorithm.rollout_correction.rollout_rs", "algorithm.rollout_correction.rollout_rs_threshold"
	if options == "" || options == "null" {
		return nil, nil
	}
	var names []string
	for _, o := range strings.Split(options, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if !slices.Contains(RolloutRSOptions, o) {
			return nil, configError(optKey, "unknown criterion \""+o+"\"; use one or more (comma-separated) of "+strings.Join(RolloutRSOptions, ", ")+", or null")
		}
		if !slices.Contains(names, o) {
			names = append(names, o)
		}
	}
	if len(names) == 0 {
		return nil, configError(optKey, "names no criterion; use one or more (comma-separated) of "+strings.Join(RolloutRSOptions, ", ")+", or null")
	}
	if threshold == nil || *threshold == "" || *threshold == "null" {
		return nil, configError(thrKey, "must be set when rollout_rs is (verl requires it): a number, or lower_upper ratio bounds for the k1 criteria, e.g. 0.5_2.0")
	}
	var specs []string
	for _, s := range strings.Split(*threshold, ",") {
		if s = strings.TrimSpace(s); s != "" {
			specs = append(specs, s)
		}
	}
	switch {
	case len(specs) == 1:
		for len(specs) < len(names) {
			specs = append(specs, specs[0])
		}
	case len(specs) != len(names):
		return nil, configError(thrKey, "has "+strconv.Itoa(len(specs))+" thresholds for "+strconv.Itoa(len(names))+" rollout_rs criteria; give one shared by all or one per criterion")
	}
	positive := func(s, opt string) (float64, error) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return 0, configError(thrKey, "\""+s+"\" for "+opt+" must be a positive number")
		}
		return v, nil
	}
	out := make([]RSCriterion, len(names))
	for i, opt := range names {
		c := RSCriterion{Option: opt}
		lo, hi, two := strings.Cut(specs[i], "_")
		var err error
		switch {
		case !c.k1() && two:
			return nil, configError(thrKey, "\""+specs[i]+"\" for "+opt+" must be one upper bound (lower_upper bounds are for the k1 criteria)")
		case two:
			if c.Lower, err = positive(lo, opt); err != nil {
				return nil, err
			}
			if c.Upper, err = positive(hi, opt); err != nil {
				return nil, err
			}
		default:
			if c.Upper, err = positive(specs[i], opt); err != nil {
				return nil, err
			}
			if c.k1() {
				c.Lower = 1 / c.Upper
			}
		}
		out[i] = c
	}
	return out, nil
}

// Correction is the rollout correction of one batch: importance weights
// (IS, with their cap Threshold and the optional normalisation to mean 1)
// and rejection sampling (RS).
type Correction struct {
	IS             RolloutISMode
	Threshold      float64
	BatchNormalize bool
	RS             []RSCriterion
}

// RolloutCorrection computes verl's compute_rollout_correction_and_rejection_mask
// for a batch laid out flat: train and rollout are the logprobs of
// π_train and π_rollout, mask the response mask. It writes
//
//   - into weights the detached importance weights (verl
//     compute_rollout_correction_weights), 0 where m = 0:
//     token:    w_t = min(exp(clamp(x_t, ±20)), Threshold)
//     sequence: w_t = min(exp(clamp(Σ_s m_s·x_s, ±20)), Threshold)
//     and with BatchNormalize, w / w̄, where w̄ is the masked token mean
//     (token) or the mean over sequences with a non-zero mask of each
//     sequence's masked mean Σ m·w / (Σ m + 1e-8) (sequence), when
//     w̄ > 1e-8. Without IS, weights is the mask itself;
//   - into keep the mask with the rejected tokens zeroed: m_t times 1 for
//     every criterion the token (or its sequence) passes (verl
//     compute_rollout_rejection_mask);
//
// and returns verl's metrics under their names (rollout_corr/...): the
// IS statistics of compute_is_metrics (before truncation, as verl takes
// them), rollout_is_batch_norm_factor, the RS fractions, and the
// off-policy diagnostics of compute_offpolicy_metrics (KL, perplexities,
// χ²). A batch without an unmasked token gets zero weights and keep and
// no metrics, where verl raises.
func RolloutCorrection(train, rollout, mask []float64, offsets []int, c *Correction, weights, keep []float64) (map[string]float64, error) {
	fail := func(err error) (map[string]float64, error) {
		zero(weights)
		zero(keep)
		return nil, err
	}
	for _, l := range []struct {
		name string
		n    int
	}{{"rollout logprobs", len(rollout)}, {"mask", len(mask)}, {"weights", len(weights)}, {"keep", len(keep)}} {
		if err := sameLen(l.name, l.n, "train logprobs", len(train)); err != nil {
			return fail(err)
		}
	}
	if err := ValidateOffsets(offsets, len(train)); err != nil {
		return fail(err)
	}
	if _, err := ParseRolloutIS(string(c.IS)); err != nil {
		return fail(err)
	}
	if !(c.Threshold >= 1) || math.IsInf(c.Threshold, 0) {
		return fail(configError("algorithm.rollout_correction.rollout_is_threshold", "must be a finite number of at least 1"))
	}
	for _, r := range c.RS {
		if !slices.Contains(RolloutRSOptions, r.Option) || !(r.Upper > 0) || (r.k1() && !(r.Lower > 0)) {
			return fail(configError("algorithm.rollout_correction.rollout_rs", "criterion "+r.Option+" needs positive bounds"))
		}
	}
	for _, in := range []struct {
		name string
		xs   []float64
	}{{"train logprobs", train}, {"rollout logprobs", rollout}, {"mask", mask}} {
		if err := checkFinite(in.name, in.xs); err != nil {
			return fail(err)
		}
	}
	var tokens float64
	for _, m := range mask {
		tokens += m
	}
	copy(keep, mask)
	copy(weights, mask)
	if tokens == 0 {
		zero(weights)
		zero(keep)
		return nil, nil
	}
	metrics := map[string]float64{}
	if c.IS != RolloutISNone {
		isWeights(train, rollout, mask, offsets, c, weights, metrics)
	}
	for _, r := range c.RS {
		rejectBy(r, train, rollout, mask, offsets, keep, metrics)
	}
	if len(c.RS) > 0 {
		// verl: the masked mean of 1 − final mask, and the fraction of all
		// sequences with a rejected unmasked token.
		var rejected, seqs float64
		n := float64(len(offsets) - 1)
		for i := 0; i+1 < len(offsets); i++ {
			hit := false
			for t := offsets[i]; t < offsets[i+1]; t++ {
				if mask[t] != 0 && keep[t] == 0 {
					rejected += mask[t]
					hit = true
				}
			}
			if hit {
				seqs++
			}
		}
		metrics["rollout_corr/rollout_rs_masked_fraction"] = rejected / (tokens + 1e-8)
		metrics["rollout_corr/rollout_rs_seq_masked_fraction"] = seqs / n
	}
	offPolicyMetrics(train, rollout, mask, offsets, metrics)
	return metrics, nil
}

// logRatioSafe is verl's torch.clamp(log_ratio, −20, 20).
func logRatioSafe(x float64) float64 {
	return math.Max(-rolloutSafetyBound, math.Min(rolloutSafetyBound, x))
}

// maskedMean is verl_F.masked_mean: Σ m·v / (Σ m + 1e-8).
func maskedMean(v func(t int) float64, mask []float64, lo, hi int) float64 {
	var s, n float64
	for t := lo; t < hi; t++ {
		if mask[t] != 0 {
			s += v(t) * mask[t]
			n += mask[t]
		}
	}
	return s / (n + 1e-8)
}

// isWeights writes the importance weights and their metrics
// (compute_rollout_correction_weights, compute_is_metrics).
func isWeights(train, rollout, mask []float64, offsets []int, c *Correction, w []float64, metrics map[string]float64) {
	n, seqs := len(mask), len(offsets)-1
	thr, low := c.Threshold, 1/c.Threshold
	seqLog := make([]float64, seqs) // Σ m·x per sequence, unclamped (metrics)
	for i := 0; i < seqs; i++ {
		for t := offsets[i]; t < offsets[i+1]; t++ {
			seqLog[i] += (train[t] - rollout[t]) * mask[t]
		}
		for t := offsets[i]; t < offsets[i+1]; t++ {
			x := train[t] - rollout[t]
			if c.IS == RolloutISSequence {
				x = seqLog[i]
			}
			w[t] = math.Exp(logRatioSafe(x)) * mask[t]
		}
	}
	all := func(lo, hi int) func(func(int) float64) float64 {
		return func(v func(int) float64) float64 { return maskedMean(v, mask, lo, hi) }
	}(0, n)
	const p = "rollout_corr/rollout_is_"
	metrics[p+"mean"] = all(func(t int) float64 { return w[t] })
	if c.IS == RolloutISSequence {
		hiFrac, loFrac := 0.0, 0.0
		mx, mn := math.Inf(-1), math.Inf(1)
		for _, s := range seqLog {
			mx, mn = math.Max(mx, s), math.Min(mn, s)
			if s > math.Log(thr) {
				hiFrac++
			}
			if s < math.Log(low) {
				loFrac++
			}
		}
		metrics[p+"max"] = math.Exp(math.Min(mx, rolloutSafetyBound))
		metrics[p+"min"] = math.Exp(mn)
		metrics[p+"ratio_fraction_high"] = hiFrac / float64(seqs)
		metrics[p+"ratio_fraction_low"] = loFrac / float64(seqs)
	} else {
		metrics[p+"ratio_fraction_high"] = all(func(t int) float64 { return b2f(w[t] > thr) })
		metrics[p+"ratio_fraction_low"] = all(func(t int) float64 { return b2f(w[t] < low) })
		mx, mn := math.Inf(-1), math.Inf(1)
		for t := range w {
			if mask[t] != 0 {
				mx, mn = math.Max(mx, w[t]), math.Min(mn, w[t])
			}
		}
		metrics[p+"max"], metrics[p+"min"] = mx, mn
	}
	clamped := func(t int) float64 { return math.Max(low, math.Min(thr, w[t])) }
	var count float64
	for _, m := range mask {
		count += m
	}
	if count > 1 {
		mean := all(clamped)
		v := all(func(t int) float64 { x := clamped(t); return x * x }) - mean*mean
		metrics[p+"std"] = math.Sqrt(math.Max(v, 0))
	} else {
		metrics[p+"std"] = 0
	}
	essMean := all(clamped) + 1e-8
	metrics[p+"eff_sample_size"] = 1 / all(func(t int) float64 { x := clamped(t) / essMean; return x * x })
	seqMean := make([]float64, seqs)
	for i := range seqMean {
		seqMean[i] = maskedMean(func(t int) float64 { return w[t] }, mask, offsets[i], offsets[i+1])
	}
	var sum, dev, hi, lo float64
	mx, mn := math.Inf(-1), math.Inf(1)
	for _, s := range seqMean {
		sum += s
		mx, mn = math.Max(mx, s), math.Min(mn, s)
		dev = math.Max(dev, math.Abs(s-1))
		hi += b2f(s > thr)
		lo += b2f(s < low)
	}
	k := float64(seqs)
	metrics[p+"seq_mean"] = sum / k
	metrics[p+"seq_std"] = 0
	if seqs > 1 {
		var ss float64
		for _, s := range seqMean {
			ss += (s - sum/k) * (s - sum/k)
		}
		metrics[p+"seq_std"] = math.Sqrt(ss / (k - 1)) // torch.std is unbiased
	}
	metrics[p+"seq_max"], metrics[p+"seq_min"], metrics[p+"seq_max_deviation"] = mx, mn, dev
	metrics[p+"seq_fraction_high"], metrics[p+"seq_fraction_low"] = hi/k, lo/k

	// Truncation, then the optional normalisation to mean 1.
	for t := range w {
		w[t] = math.Min(w[t], thr)
	}
	if !c.BatchNormalize {
		return
	}
	var mean float64
	if c.IS == RolloutISToken {
		mean = all(func(t int) float64 { return w[t] })
	} else {
		var s, valid float64
		for i := 0; i < seqs; i++ {
			var m float64
			for t := offsets[i]; t < offsets[i+1]; t++ {
				m += mask[t]
			}
			if m > 0 {
				s += maskedMean(func(t int) float64 { return w[t] }, mask, offsets[i], offsets[i+1])
				valid++
			}
		}
		mean = s / math.Max(valid, 1e-8)
	}
	if mean > 1e-8 {
		for t := range w {
			w[t] /= mean
		}
		metrics[p+"batch_norm_factor"] = mean
	} else {
		metrics[p+"batch_norm_factor"] = 1
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// rejectBy zeroes in keep the tokens criterion r rejects and adds its
// metrics (compute_rollout_rejection_mask, compute_rs_metrics: the mean,
// max, min and fractions beyond the bounds of the statistic, and the
// fractions of tokens and sequences it rejects).
func rejectBy(r RSCriterion, train, rollout, mask []float64, offsets []int, keep []float64, metrics map[string]float64) {
	kind := r.Option[len(r.Option)-2:]
	stat := func(t int) float64 {
		x := logRatioSafe(train[t] - rollout[t])
		switch kind {
		case "k1":
			return -x
		case "k2":
			return 0.5 * x * x
		}
		return math.Exp(x) - 1 - x
	}
	lower, upper := math.Inf(-1), r.Upper
	if r.k1() {
		lower, upper = math.Log(r.Lower), math.Log(r.Upper)
	}
	pass := func(v float64) bool { return v >= lower && v <= upper }
	seqLevel := !strings.HasPrefix(r.Option, "token_")
	n := len(offsets) - 1
	perToken := make([]float64, len(mask)) // the statistic at each token
	var seqVals []float64                  // per sequence with a non-zero mask
	for i := 0; i < n; i++ {
		lo, hi := offsets[i], offsets[i+1]
		if !seqLevel {
			for t := lo; t < hi; t++ {
				perToken[t] = stat(t)
			}
			continue
		}
		var s, m float64
		mx := math.Inf(-1)
		for t := lo; t < hi; t++ {
			if mask[t] != 0 {
				v := stat(t)
				s += v * mask[t]
				m += mask[t]
				mx = math.Max(mx, v)
			}
		}
		var v float64
		switch {
		case strings.HasPrefix(r.Option, "seq_sum_"):
			v = s
		case strings.HasPrefix(r.Option, "seq_mean_"):
			v = s / (m + 1e-8)
		default: // seq_max_
			v = mx
			if m == 0 {
				v = 0
			}
		}
		for t := lo; t < hi; t++ {
			perToken[t] = v
		}
		if m > 0 {
			seqVals = append(seqVals, v)
		}
	}
	var seqRejected, validSeqs float64
	for i := 0; i < n; i++ {
		lo, hi := offsets[i], offsets[i+1]
		var m float64
		hit := false
		for t := lo; t < hi; t++ {
			m += mask[t]
			if !pass(perToken[t]) {
				keep[t] = 0
				hit = hit || mask[t] != 0
			}
		}
		if m > 0 {
			validSeqs++
			seqRejected += b2f(hit)
		}
	}
	p := "rollout_corr/rollout_rs_" + r.Option + "_"
	all := func(v func(int) float64) float64 { return maskedMean(v, mask, 0, len(mask)) }
	metrics[p+"mean"] = all(func(t int) float64 { return perToken[t] })
	if seqLevel {
		mx, mn := math.Inf(-1), math.Inf(1)
		var hiF, loF float64
		for _, v := range seqVals {
			mx, mn = math.Max(mx, v), math.Min(mn, v)
			hiF += b2f(v > upper)
			loF += b2f(r.k1() && v < lower)
		}
		k := math.Max(float64(len(seqVals)), 1)
		metrics[p+"max"], metrics[p+"min"] = mx, mn
		metrics[p+"fraction_high"], metrics[p+"fraction_low"] = hiF/k, loF/k
	} else {
		mx, mn := math.Inf(-1), math.Inf(1)
		for t, v := range perToken {
			if mask[t] != 0 {
				mx, mn = math.Max(mx, v), math.Min(mn, v)
			}
		}
		metrics[p+"max"], metrics[p+"min"] = mx, mn
		metrics[p+"fraction_high"] = all(func(t int) float64 { return b2f(perToken[t] > upper) })
		metrics[p+"fraction_low"] = all(func(t int) float64 { return b2f(r.k1() && perToken[t] < lower) })
	}
	metrics[p+"masked_fraction"] = all(func(t int) float64 { return b2f(!pass(perToken[t])) })
	metrics[p+"seq_masked_fraction"] = 0
	if validSeqs > 0 {
		metrics[p+"seq_masked_fraction"] = seqRejected / validSeqs
	}
}

// offPolicyMetrics adds verl's compute_offpolicy_metrics: perplexities
// of both policies (batch means of each sequence's exp(−masked mean
// logprob)), the KL estimates KL(π_rollout‖π_train) (k1 and k3), the
// log-perplexity differences and the χ² divergences at token and
// sequence level. The k3 estimate clamps x to ±20 (verl does not, and
// overflows where float64 would).
func offPolicyMetrics(train, rollout, mask []float64, offsets []int, metrics map[string]float64) {
	n := len(offsets) - 1
	k := float64(n)
	const p = "rollout_corr/"
	all := func(v func(int) float64) float64 { return maskedMean(v, mask, 0, len(mask)) }
	var trainPPL, trainLog, rollPPL, rollLog, diff, absDiff, ratio, chi2Seq float64
	dmax, dmin := math.Inf(-1), math.Inf(1)
	for i := 0; i < n; i++ {
		lo, hi := offsets[i], offsets[i+1]
		mt := maskedMean(func(t int) float64 { return train[t] }, mask, lo, hi)
		mr := maskedMean(func(t int) float64 { return rollout[t] }, mask, lo, hi)
		trainPPL += math.Exp(-mt)
		trainLog += -mt
		rollPPL += math.Exp(-mr)
		rollLog += -mr
		d := mr - mt
		diff += d
		absDiff += math.Abs(d)
		dmax, dmin = math.Max(dmax, d), math.Min(dmin, d)
		ratio += math.Exp(d)
		var s float64
		for t := lo; t < hi; t++ {
			s += (train[t] - rollout[t]) * mask[t]
		}
		chi2Seq += math.Exp(2 * logRatioSafe(s))
	}
	metrics[p+"training_ppl"], metrics[p+"training_log_ppl"] = trainPPL/k, trainLog/k
	metrics[p+"rollout_ppl"], metrics[p+"rollout_log_ppl"] = rollPPL/k, rollLog/k
	metrics[p+"kl"] = all(func(t int) float64 { return rollout[t] - train[t] })
	metrics[p+"k3_kl"] = all(func(t int) float64 { x := logRatioSafe(train[t] - rollout[t]); return math.Exp(x) - x - 1 })
	metrics[p+"log_ppl_diff"], metrics[p+"log_ppl_abs_diff"] = diff/k, absDiff/k
	metrics[p+"log_ppl_diff_max"], metrics[p+"log_ppl_diff_min"] = dmax, dmin
	metrics[p+"ppl_ratio"] = ratio / k
	metrics[p+"chi2_token"] = all(func(t int) float64 { r := math.Exp(logRatioSafe(train[t] - rollout[t])); return r * r }) - 1
	metrics[p+"chi2_seq"] = chi2Seq/k - 1
}
