package ppo

import (
	"math"
	"strings"
)

// KLType names a per-token KL estimator between the current policy (log
// prob lp) and a reference (ref), as verl's kl_penalty takes it
// (actor.kl_loss_type, algorithm.kl_penalty). Estimators are Schulman's,
// "Approximating KL divergence" (2020, joschu.net/blog/kl-approx.html).
type KLType string

const (
	KLK1  KLType = "k1"  // lp − ref (verl "kl", "k1")
	KLAbs KLType = "abs" // |lp − ref|
	KLK2  KLType = "k2"  // ½(lp − ref)² (verl "mse", "k2")
	KLK3  KLType = "k3"  // e^(ref−lp) − (ref−lp) − 1, clamped (verl "low_var_kl", "k3")
	// The "+" forms keep the value of their base estimator but take the
	// gradient of k2 (verl's straight-through kl_penalty for names ending
	// in "+"): k1 and k3 are unbiased in value but not in gradient.
	KLK1Plus  KLType = "k1+"
	KLAbsPlus KLType = "abs+"
	KLK3Plus  KLType = "k3+"
)

// ParseKLType accepts verl's names and aliases: kl, k1, abs, mse, k2,
// low_var_kl, k3, each optionally followed by "+" (k2+ and mse+ are k2).
func ParseKLType(s string) (KLType, error) {
	base, plus := strings.CutSuffix(s, "+")
	var k KLType
	switch base {
	case "kl", "k1":
		k = KLK1
	case "abs":
		k = KLAbs
	case "mse", "k2":
		return KLK2, nil
	case "low_var_kl", "k3":
		k = KLK3
	default:
		return "", configError("kl_loss_type", "unknown KL estimator "+strconvQuote(s)+"; use one of kl, k1, abs, mse, k2, low_var_kl, k3 (optionally with a trailing +)")
	}
	if plus {
		k += "+"
	}
	return k, nil
}

func strconvQuote(s string) string { return "\"" + s + "\"" }

// KL returns one token's KL estimate and its derivative with respect to lp,
// exactly as verl's kl_penalty and autograd give them:
//
//	k1:  lp − ref                          d = 1
//	abs: |lp − ref|                        d = sign(lp − ref) (0 at 0)
//	k2:  ½(lp − ref)²                      d = lp − ref
//	k3:  x = clamp(ref − lp, −20, 20); k = clamp(eˣ − x − 1, −10, 10)
//	                                       d = 1 − eˣ inside both clamps, else 0
//	k1+, abs+, k3+: value of the base, d = lp − ref.
func KL(kind KLType, lp, ref float64) (value, deriv float64) {
	switch kind {
	case KLK1:
		return lp - ref, 1
	case KLAbs:
		d := lp - ref
		switch {
		case d > 0:
			return d, 1
		case d < 0:
			return -d, -1
		}
		return 0, 0
	case KLK2:
		d := lp - ref
		return 0.5 * d * d, d
	case KLK3:
		return k3(lp, ref)
	case KLK1Plus:
		return lp - ref, lp - ref
	case KLAbsPlus:
		return math.Abs(lp - ref), lp - ref
	case KLK3Plus:
		v, _ := k3(lp, ref)
		return v, lp - ref
	}
	return 0, 0
}

func k3(lp, ref float64) (float64, float64) {
	x := ref - lp
	dx := -1.0
	if x > 20 {
		x, dx = 20, 0
	} else if x < -20 {
		x, dx = -20, 0
	}
	e := math.Exp(x)
	k := e - x - 1
	if k > 10 {
		return 10, 0
	}
	if k < -10 {
		return -10, 0
	}
	return k, (e - 1) * dx
}

// KLInReward folds a KL penalty into token rewards as verl's
// apply_kl_penalty does (use_kl_in_reward, fixed controller):
//
//	reward_t = score_t − β · kl(old_t, ref_t) · mask_t
//
// dst may alias scores.
func KLInReward(scores, oldLogprobs, refLogprobs, mask []float64, beta float64, kind KLType, dst []float64) error {
	n := len(scores)
	for _, c := range []struct {
		name string
		l    int
	}{{"old logprobs", len(oldLogprobs)}, {"ref logprobs", len(refLogprobs)}, {"mask", len(mask)}, {"rewards", len(dst)}} {
		if err := sameLen(c.name, c.l, "scores", n); err != nil {
			return err
		}
	}
	for _, in := range []struct {
		name string
		xs   []float64
	}{{"scores", scores}, {"old logprobs", oldLogprobs}, {"ref logprobs", refLogprobs}, {"mask", mask}} {
		if err := checkFinite(in.name, in.xs); err != nil {
			zero(dst)
			return err
		}
	}
	for t := range scores {
		k, _ := KL(kind, oldLogprobs[t], refLogprobs[t])
		dst[t] = scores[t] - beta*k*mask[t]
	}
	return nil
}
