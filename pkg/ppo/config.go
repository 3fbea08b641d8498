package ppo

import "math"

// Reference selects whose definition to reproduce where verl and rLLM's own
// trainer disagree. Everything else is the same under both.
type Reference int

const (
	// ReferenceVerl reproduces verl's core_algos.py, which is what rLLM's
	// verl backend (v0.2.1 and the agent workflow trainer) runs: GRPO's
	// std is torch.std (unbiased, n−1); REINFORCE++-baseline whitens the
	// token-tiled scores over the batch mask.
	ReferenceVerl Reference = iota
	// ReferenceRLLM reproduces rLLM's native estimators
	// (rllm/trainer/algorithms/rl_algo.py and advantage.py, used by its
	// Tinker and unified trainers): GRPO's std is np.std (population, n);
	// REINFORCE++-baseline divides group-centred rewards by the population
	// std of all of them plus epsilon.
	ReferenceRLLM
)

// Config holds the estimator settings (verl's algorithm.* keys). Start from
// DefaultConfig: its zero value is not verl's default.
type Config struct {
	Reference Reference
	// NormAdvByStd divides GRPO advantages by the group std
	// (algorithm.norm_adv_by_std_in_grpo, default true). The drgrpo
	// estimator ignores it and never divides.
	NormAdvByStd bool
	// Epsilon is added to the std before dividing (verl's 1e-6).
	Epsilon float64
	// Gamma is the discount (algorithm.gamma, default 1.0).
	Gamma float64
	// Lam is GAE's λ (algorithm.lam, default 1.0).
	Lam float64
	// Whiten normalises GAE advantages over the batch mask as verl always
	// does (default true).
	Whiten bool
	// KLInRewardCoef, when non-zero, folds β·KL(old‖ref) into the token
	// rewards of the token-level estimators (verl's
	// algorithm.use_kl_in_reward with a fixed controller, kl_coef β).
	KLInRewardCoef float64
	// KLInRewardType is the estimator used for that KL (verl's
	// algorithm.kl_penalty, default "kl" = KLK1).
	KLInRewardType KLType
}

// DefaultConfig returns verl's and rLLM's defaults.
func DefaultConfig() Config {
	return Config{
		Reference:      ReferenceVerl,
		NormAdvByStd:   true,
		Epsilon:        1e-6,
		Gamma:          1.0,
		Lam:            1.0,
		Whiten:         true,
		KLInRewardType: KLK1,
	}
}

// Validate reports settings that cannot be right.
func (c *Config) Validate() error {
	switch {
	case c.Reference != ReferenceVerl && c.Reference != ReferenceRLLM:
		return configError("reference", "must be verl or rllm")
	case !finite(c.Epsilon) || c.Epsilon < 0:
		return configError("epsilon", "must be a finite number ≥ 0")
	case !finite(c.Gamma) || c.Gamma < 0 || c.Gamma > 1:
		return configError("algorithm.gamma", "must be in [0, 1]")
	case !finite(c.Lam) || c.Lam < 0 || c.Lam > 1:
		return configError("algorithm.lam", "must be in [0, 1]")
	case !finite(c.KLInRewardCoef):
		return configError("algorithm.kl_ctrl.kl_coef", "must be a finite number")
	}
	if c.KLInRewardCoef != 0 {
		if _, err := ParseKLType(string(c.KLInRewardType)); err != nil {
			return rekey(err, "algorithm.kl_penalty")
		}
	}
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
