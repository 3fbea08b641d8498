package ppo

import "math"

// TokenInput is a batch of sequences laid out flat for the token-level
// estimators. Rewards are per token (an outcome reward sits on the last
// response token, as verl places it). Values is read by GAE only;
// OldLogprobs and RefLogprobs only when Config.KLInRewardCoef ≠ 0.
type TokenInput struct {
	Offsets     []int
	Rewards     []float64
	Mask        []float64
	Values      []float64
	OldLogprobs []float64
	RefLogprobs []float64
}

func (in *TokenInput) validate(cfg *Config, needValues bool, adv, ret []float64) error {
	n := len(in.Rewards)
	if err := sameLen("mask", len(in.Mask), "rewards", n); err != nil {
		return err
	}
	if err := sameLen("advantages", len(adv), "rewards", n); err != nil {
		return err
	}
	if err := sameLen("returns", len(ret), "rewards", n); err != nil {
		return err
	}
	if needValues {
		if err := sameLen("values", len(in.Values), "rewards", n); err != nil {
			return err
		}
	}
	if cfg.KLInRewardCoef != 0 {
		if err := sameLen("old logprobs", len(in.OldLogprobs), "rewards", n); err != nil {
			return err
		}
		if err := sameLen("ref logprobs", len(in.RefLogprobs), "rewards", n); err != nil {
			return err
		}
	}
	if err := ValidateOffsets(in.Offsets, n); err != nil {
		return err
	}
	return cfg.Validate()
}

// begin starts a token-level estimator (ReinforcePP, GAE): it validates
// the inputs, zeroing adv and ret when they are wrong, and returns the
// estimator of the KL penalty in the reward.
func (in *TokenInput) begin(cfg *Config, needValues bool, adv, ret []float64) (KLType, error) {
	if err := in.validate(cfg, needValues, adv, ret); err != nil {
		zero(adv)
		zero(ret)
		return "", err
	}
	kind, _ := ParseKLType(string(cfg.KLInRewardType))
	return kind, nil
}

// finish ends a token-level estimator whose pass over the tokens summed
// x·0 of every value it read into chk (non-zero: a NaN or ±Inf), the mask
// into n and the masked advantages into s: it whitens adv over the mask
// when whiten is set (maskedWhiten). On an error adv and ret are zeroed.
func (in *TokenInput) finish(adv, ret []float64, chk, n, s float64, whiten bool) error {
	var err error
	switch {
	case chk+s*0 != 0:
		err = in.nonFinite()
	case whiten && !maskedWhiten(adv, in.Mask, n, s):
		err = errOverflow("advantages")
	default:
		return nil
	}
	zero(adv)
	zero(ret)
	return err
}

func (in *TokenInput) nonFinite() error {
	for _, c := range []struct {
		name string
		xs   []float64
	}{{"rewards", in.Rewards}, {"mask", in.Mask}, {"values", in.Values}, {"old logprobs", in.OldLogprobs}, {"ref logprobs", in.RefLogprobs}} {
		if err := checkFinite(c.name, c.xs); err != nil {
			return err
		}
	}
	return &InputError{Name: "returns", Index: 0, Msg: "overflowed to ±Inf; rewards or values are out of any sensible range"}
}

// reward is token t's reward with the KL penalty folded in when configured.
func (in *TokenInput) reward(cfg *Config, kind KLType, t int) float64 {
	r := in.Rewards[t]
	if cfg.KLInRewardCoef != 0 {
		k, _ := KL(kind, in.OldLogprobs[t], in.RefLogprobs[t])
		r -= cfg.KLInRewardCoef * k * in.Mask[t]
	}
	return r
}

func errOverflow(name string) error {
	return &InputError{Name: name, Index: 0, Msg: "overflowed to ±Inf; the inputs are out of any sensible range"}
}

// whitenScale returns the μ and 1/sqrt(σ² + 1e-8) with which verl's
// verl_F.masked_whiten (shift_mean=True) whitens xs weighted by w, given
// N = Σ w ≥ 2 and S = Σ w·x:
//
//	μ = S / (N + 1e-8),
//	σ² = Σ w·(x − μ)² / (N + 1e-8) · N/(N − 1)   (unbiased),
//	x ← (x − μ) / sqrt(σ² + 1e-8).
//
// w is a 0/1 mask, or a per-element count such as a sequence's length
// standing for that many equal tokens.
func whitenScale(xs, w []float64, n, s float64) (mu, inv float64) {
	mu = s / (n + 1e-8)
	var sq float64
	for t, x := range xs {
		d := x - mu
		sq += w[t] * d * d
	}
	variance := sq / (n + 1e-8) * (n / (n - 1))
	return mu, 1 / math.Sqrt(variance+1e-8)
}

// maskedWhiten normalises xs in place over the mask as verl's
// verl_F.masked_whiten (shift_mean=True) does, given N = Σ m and
// S = Σ m·x (whitenScale), then multiplies by the mask, so masked
// positions become 0 (verl leaves them whitened but never reads them). It
// reports false if a result is not finite (inputs near the float64 limit).
func maskedWhiten(xs, mask []float64, n, s float64) bool {
	if n < 2 {
		zero(xs)
		return true
	}
	mu, inv := whitenScale(xs, mask, n, s)
	var chk float64
	for t, x := range xs {
		y := (x - mu) * inv * mask[t]
		chk += y * 0
		xs[t] = y
	}
	return chk == 0
}

// ReinforcePP computes REINFORCE++ advantages (Hu et al. 2025,
// arXiv:2501.03262; verl compute_reinforce_plus_plus_outcome_advantage):
// per sequence, backwards over its tokens,
//
//	G_t = (r_t + γ·G_{t+1})·m_t,  carried unchanged across m_t = 0,
//
// so an outcome reward reaches every earlier turn of a multi-turn response
// through the observation tokens between them (verl PR #7300, fixing
// #7278; before it the return was reset at every masked token);
// ret receives G (verl's returns), adv receives maskedWhiten(G, mask) over
// the whole batch. With Config.KLInRewardCoef = β ≠ 0 the token rewards are
// r_t − β·kl(old_t, ref_t)·m_t first (verl apply_kl_penalty). Allocates
// nothing.
func ReinforcePP(in *TokenInput, cfg *Config, adv, ret []float64) error {
	kind, err := in.begin(cfg, false, adv, ret)
	if err != nil {
		return err
	}
	gamma := cfg.Gamma
	var chk, n, s float64
	for i := 0; i+1 < len(in.Offsets); i++ {
		lo, hi := in.Offsets[i], in.Offsets[i+1]
		var running float64
		for t := hi - 1; t >= lo; t-- {
			m := in.Mask[t]
			chk += in.Rewards[t]*0 + m*0
			next := in.reward(cfg, kind, t) + gamma*running
			ret[t] = next * m
			adv[t] = ret[t]
			chk += next * 0
			n += m
			s += ret[t] * m
			// A masked token (an observation inside a multi-turn response,
			// or padding) carries the later return through unchanged.
			running = next*m + running*(1-m)
		}
	}
	if cfg.KLInRewardCoef != 0 {
		chk += sumZero(in.OldLogprobs) + sumZero(in.RefLogprobs)
	}
	return in.finish(adv, ret, chk, n, s, true)
}

func sumZero(xs []float64) float64 {
	var c float64
	for _, x := range xs {
		c += x * 0
	}
	return c
}

// GAE computes generalised advantage estimates (Schulman et al. 2015,
// arXiv:1506.02438) as verl's compute_gae_advantage_return (adapted from
// TRL's PPO trainer) does, per sequence backwards over its tokens:
//
//	δ_t = r_t + γ·V_next − V_t
//	A_t = δ_t + γλ·A_next
//	V_next ← m_t·V_t + (1−m_t)·V_next,  A_next ← m_t·A_t + (1−m_t)·A_next
//
// so masked tokens (observations inside a multi-turn response) are skipped
// and carry the values across. ret receives A + V (before whitening); adv
// receives maskedWhiten(A, mask) when Config.Whiten (verl always whitens),
// else A·m. Positions with m = 0 get 0 in both (verl leaves carried
// values there, which nothing reads). With Config.KLInRewardCoef = β ≠ 0
// the rewards are r_t − β·kl(old_t, ref_t)·m_t first.
func GAE(in *TokenInput, cfg *Config, adv, ret []float64) error {
	kind, err := in.begin(cfg, true, adv, ret)
	if err != nil {
		return err
	}
	gamma, gl := cfg.Gamma, cfg.Gamma*cfg.Lam
	kl := cfg.KLInRewardCoef != 0
	var chk, n, s float64
	for i := 0; i+1 < len(in.Offsets); i++ {
		lo, hi := in.Offsets[i], in.Offsets[i+1]
		r, v, mask := in.Rewards[lo:hi], in.Values[lo:hi], in.Mask[lo:hi]
		a, g := adv[lo:hi], ret[lo:hi]
		var next, last float64
		for t := len(r) - 1; t >= 0; t-- {
			m, vt := mask[t], v[t]
			rt := r[t]
			if kl {
				rt = in.reward(cfg, kind, lo+t)
			}
			cur := rt + gamma*next - vt + gl*last
			// m·x + (1−m)·y, with the 0/1 masks of real batches taken
			// without arithmetic: it shortens the chain each token waits on.
			switch m {
			case 1:
				next, last = vt, cur
			case 0:
			default:
				next = vt*m + (1-m)*next
				last = cur*m + (1-m)*last
			}
			chk += (rt + vt + m + last) * 0
			a[t] = last * m
			g[t] = (last + vt) * m
			n += m
			s += last * m
		}
	}
	return in.finish(adv, ret, chk, n, s, cfg.Whiten)
}
