package ppo

import (
	"math"
	"strconv"

	"gonum.org/v1/gonum/stat"
)

// Workspace is scratch memory for the per-group statistics of the outcome
// estimators. Keep one per goroutine and reuse it: after the first call for
// a given number of groups no estimator allocates.
type Workspace struct {
	count, mean, sq, comp []float64
	seen                  []bool
}

func (w *Workspace) reset(groups int) {
	if cap(w.count) < groups {
		w.count = make([]float64, groups)
		w.mean = make([]float64, groups)
		w.sq = make([]float64, groups)
		w.comp = make([]float64, groups)
		w.seen = make([]bool, groups)
	}
	w.count, w.mean, w.sq, w.comp, w.seen = w.count[:groups], w.mean[:groups], w.sq[:groups], w.comp[:groups], w.seen[:groups]
	clear(w.count)
	clear(w.mean)
	clear(w.sq)
	clear(w.comp)
	clear(w.seen)
}

// checkOutcome validates the inputs every outcome estimator shares.
func checkOutcome(rewards []float64, groups []int, numGroups int, dst []float64) error {
	if err := checkShape(rewards, groups, numGroups, dst); err != nil {
		return err
	}
	return checkFinite("rewards", rewards)
}

// checkShape is checkOutcome without the scan for NaN and ±Inf, for
// estimators that find them in their own output.
func checkShape(rewards []float64, groups []int, numGroups int, dst []float64) error {
	if err := sameLen("groups", len(groups), "rewards", len(rewards)); err != nil {
		return err
	}
	if err := sameLen("advantages", len(dst), "rewards", len(rewards)); err != nil {
		return err
	}
	if numGroups < 0 {
		return &InputError{Name: "numGroups", Index: 0, Msg: "is negative"}
	}
	return nil
}

func badGroup(i, numGroups int) error {
	return &InputError{Name: "groups", Index: i, Msg: "is outside 0.." + strconv.Itoa(numGroups-1) + "; number groups densely from 0"}
}

// groupStats fills, for every group, ws.count, ws.mean and ws.sq (the sum of
// squared deviations from the mean). The variance is the corrected two-pass
// algorithm gonum's stat.MeanVariance uses, computed for scattered groups.
func groupStats(rewards []float64, groups []int, numGroups int, ws *Workspace) error {
	if err := groupMeans(rewards, groups, numGroups, ws); err != nil {
		return err
	}
	for i, g := range groups {
		d := rewards[i] - ws.mean[g]
		ws.sq[g] += d * d
		ws.comp[g] += d
	}
	for g, n := range ws.count {
		if n > 0 {
			ws.sq[g] -= ws.comp[g] * ws.comp[g] / n
		}
	}
	return nil
}

// GRPO computes group-relative advantages from one outcome reward per
// sequence (Shao et al. 2024, arXiv:2402.03300; verl
// compute_grpo_outcome_advantage; rLLM calculate_grpo_advantages_per_group):
//
//	A_i = (r_i − mean_g) / (std_g + ε)   if normByStd
//	A_i =  r_i − mean_g                  otherwise (Dr. GRPO, arXiv:2503.20783)
//
// over the group g of sequence i. A group of one has mean 0 and std 1 (both
// verl and rLLM), so its advantage is r/(1+ε), or r. std_g is the unbiased
// sample std (n−1, torch.std) under ReferenceVerl and the population std
// (n, np.std) under ReferenceRLLM. ε is 1e-6 in both.
//
// groups holds dense ids in [0, numGroups); ws is reused scratch; dst gets
// one advantage per sequence.
func GRPO(rewards []float64, groups []int, numGroups int, normByStd bool, eps float64, ref Reference, ws *Workspace, dst []float64) error {
	if err := checkShape(rewards, groups, numGroups, dst); err != nil {
		zero(dst)
		return err
	}
	ddof := 1.0
	if ref == ReferenceRLLM {
		ddof = 0
	}
	// The trainer lays the rollouts of a task side by side: then each
	// group is one run, handled in cache in a single pass. A group seen in
	// two runs sends the whole batch to the scattered path below.
	ws.reset(numGroups)
	contiguous := true
	for lo := 0; lo < len(groups); {
		g := groups[lo]
		if uint(g) >= uint(numGroups) {
			zero(dst)
			return badGroup(lo, numGroups)
		}
		if ws.seen[g] {
			contiguous = false
			break
		}
		ws.seen[g] = true
		hi := lo + 1
		for hi < len(groups) && groups[hi] == g {
			hi++
		}
		if !grpoRun(rewards[lo:hi], normByStd, eps, ddof, dst[lo:hi]) {
			return nonFiniteOutcome(rewards, dst)
		}
		lo = hi
	}
	if contiguous {
		return nil
	}
	if err := groupStats(rewards, groups, numGroups, ws); err != nil {
		zero(dst)
		return err
	}
	for g, n := range ws.count {
		mean, std := 0.0, 1.0
		if n > 1 {
			mean, std = ws.mean[g], math.Sqrt(ws.sq[g]/(n-ddof))
		}
		ws.mean[g], ws.sq[g] = mean, std+eps
	}
	var chk float64
	for i, g := range groups {
		if normByStd {
			dst[i] = (rewards[i] - ws.mean[g]) / ws.sq[g]
		} else {
			dst[i] = rewards[i] - ws.mean[g]
		}
		chk += dst[i] * 0
	}
	if chk != 0 {
		return nonFiniteOutcome(rewards, dst)
	}
	return nil
}

// nonFiniteOutcome explains a NaN or ±Inf found in an estimator's output:
// a non-finite reward (named), or else an overflow.
func nonFiniteOutcome(rewards, dst []float64) error {
	zero(dst)
	if err := checkFinite("rewards", rewards); err != nil {
		return err
	}
	return errOverflow("advantages")
}

// grpoRun is GRPO over one group held contiguously; false if a result is
// not finite. Checking the group's sum and divisor is enough: a NaN or
// ±Inf reward makes the sum non-finite, and an overflowing deviation makes
// the divisor infinite.
func grpoRun(r []float64, normByStd bool, eps, ddof float64, dst []float64) bool {
	var sum float64
	for _, x := range r {
		sum += x
	}
	mean, std := 0.0, 1.0
	if n := float64(len(r)); n > 1 {
		// The corrected two-pass variance of gonum's stat.MeanVariance,
		// written out: for groups of 8 the call overhead was a fifth of
		// the time.
		mean = sum / n
		var ss, comp float64
		for _, x := range r {
			d := x - mean
			ss += d * d
			comp += d
		}
		std = math.Sqrt((ss - comp*comp/n) / (n - ddof))
	}
	if !normByStd {
		for i, x := range r {
			dst[i] = x - mean
		}
		return finite(sum)
	}
	den := std + eps
	// One division per group instead of one per episode: at most 1 ulp
	// from (x − mean)/den.
	inv := 1 / den
	for i, x := range r {
		dst[i] = (x - mean) * inv
	}
	return finite(sum + den)
}

// RLOO computes REINFORCE-leave-one-out advantages (Ahmadian et al. 2024,
// arXiv:2402.14740; verl compute_rloo_outcome_advantage; rLLM
// calculate_rloo_advantages_per_group):
//
//	A_i = n/(n−1) · (r_i − mean_g) = r_i − mean of the other n−1 rewards
//
// for a group of n > 1. A group of one keeps its reward: A = r (verl and
// rLLM agree).
func RLOO(rewards []float64, groups []int, numGroups int, ws *Workspace, dst []float64) error {
	if err := checkedMeans(rewards, groups, numGroups, ws, dst); err != nil {
		return err
	}
	for i, g := range groups {
		n := ws.count[g]
		if n > 1 {
			dst[i] = n / (n - 1) * (rewards[i] - ws.mean[g])
		} else {
			dst[i] = rewards[i]
		}
	}
	return finish(dst)
}

// finish makes sure no NaN or ±Inf leaves an estimator (rewards near the
// float64 limit can overflow a sum).
func finish(dst []float64) error {
	if checkFinite("advantages", dst) != nil {
		zero(dst)
		return errOverflow("advantages")
	}
	return nil
}

// checkedMeans is checkOutcome then groupMeans; on a failure it zeroes
// dst.
func checkedMeans(rewards []float64, groups []int, numGroups int, ws *Workspace, dst []float64) error {
	err := checkOutcome(rewards, groups, numGroups, dst)
	if err == nil {
		err = groupMeans(rewards, groups, numGroups, ws)
	}
	if err != nil {
		zero(dst)
	}
	return err
}

// checkLengths validates the response lengths the length-weighted
// estimators read; on a failure it zeroes dst.
func checkLengths(lengths, rewards, dst []float64) error {
	err := sameLen("lengths", len(lengths), "rewards", len(rewards))
	if err == nil {
		err = checkFinite("lengths", lengths)
	}
	if err != nil {
		zero(dst)
	}
	return err
}

// groupMeans fills ws.count and ws.mean.
func groupMeans(rewards []float64, groups []int, numGroups int, ws *Workspace) error {
	ws.reset(numGroups)
	for i, g := range groups {
		if uint(g) >= uint(numGroups) {
			return badGroup(i, numGroups)
		}
		ws.count[g]++
		ws.mean[g] += rewards[i]
	}
	for g, n := range ws.count {
		if n > 0 {
			ws.mean[g] /= n
		}
	}
	return nil
}

// Reinforce is plain REINFORCE without a baseline (rLLM
// calculate_reinforce_advantages): A_i = r_i.
func Reinforce(rewards []float64, dst []float64) error {
	if err := sameLen("advantages", len(dst), "rewards", len(rewards)); err != nil {
		return err
	}
	if err := checkFinite("rewards", rewards); err != nil {
		zero(dst)
		return err
	}
	copy(dst, rewards)
	return nil
}

// ReinforcePPBaseline computes REINFORCE++-baseline advantages (Hu et al.
// 2025, arXiv:2501.03262). Both references first centre each reward on its
// group mean, c_i = r_i − mean_g, then scale over the whole batch (one role):
//
// ReferenceVerl (verl compute_reinforce_plus_plus_baseline_outcome_advantage):
// a group of one has mean 0. c_i is tiled over the sequence's L_i response
// tokens and whitened with verl_F.masked_whiten over the batch mask, so
// every token counts:
//
//	N = Σ L_i,  μ = Σ L_i c_i / (N + 1e-8),
//	σ² = Σ L_i (c_i − μ)² / (N + 1e-8) · N/(N − 1),
//	A_i = (c_i − μ) / sqrt(σ² + 1e-8).
//
// With N < 2 verl raises; this returns zeros (no batch to whiten against).
//
// ReferenceRLLM (rLLM calculate_reinforce_plus_plus_baseline_advantages): a
// group of one is centred on itself (c = 0); A_i = c_i / (std + ε) with std
// the population std of all c in the batch (np.std) and ε = eps.
//
// lengths (response tokens per sequence) is read only under ReferenceVerl.
func ReinforcePPBaseline(rewards []float64, groups []int, numGroups int, lengths []float64, eps float64, ref Reference, ws *Workspace, dst []float64) error {
	if err := checkedMeans(rewards, groups, numGroups, ws, dst); err != nil {
		return err
	}
	if ref == ReferenceRLLM {
		for i, g := range groups {
			dst[i] = rewards[i] - ws.mean[g]
		}
		if len(dst) == 0 {
			return nil
		}
		_, v := stat.PopMeanVariance(dst, nil)
		den := math.Sqrt(v) + eps
		for i := range dst {
			dst[i] /= den
		}
		return finish(dst)
	}
	if err := checkLengths(lengths, rewards, dst); err != nil {
		return err
	}
	var n, s float64
	for i, g := range groups {
		c := rewards[i]
		if ws.count[g] > 1 {
			c -= ws.mean[g]
		}
		dst[i] = c
		n += lengths[i]
		s += lengths[i] * c
	}
	if n < 2 {
		zero(dst)
		return nil
	}
	mu, inv := whitenScale(dst, lengths, n, s) // token.go
	for i, c := range dst {
		dst[i] = (c - mu) * inv
	}
	return finish(dst)
}

// OPO computes On-Policy RL with Optimal reward baseline advantages (Hao et
// al. 2025, arXiv:2505.23585; verl compute_opo_outcome_advantage): the
// baseline is the length-weighted mean reward of the group,
//
//	b_g = Σ_j L_j r_j / Σ_j L_j,   A_i = r_i − b_g,
//
// with L_j the response length. A group of one has b = 0 (verl). A group
// whose lengths sum to 0 (verl divides 0 by 0) also gets b = 0.
func OPO(rewards []float64, groups []int, numGroups int, lengths []float64, ws *Workspace, dst []float64) error {
	if err := checkOutcome(rewards, groups, numGroups, dst); err != nil {
		zero(dst)
		return err
	}
	if err := checkLengths(lengths, rewards, dst); err != nil {
		return err
	}
	ws.reset(numGroups)
	for i, g := range groups {
		if uint(g) >= uint(numGroups) {
			zero(dst)
			return badGroup(i, numGroups)
		}
		ws.count[g]++
		ws.mean[g] += lengths[i] * rewards[i]
		ws.sq[g] += lengths[i]
	}
	for g, n := range ws.count {
		if n > 1 && ws.sq[g] != 0 {
			ws.mean[g] /= ws.sq[g]
		} else {
			ws.mean[g] = 0
		}
	}
	for i, g := range groups {
		dst[i] = rewards[i] - ws.mean[g]
	}
	return finish(dst)
}
