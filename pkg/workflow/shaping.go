package workflow

import (
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/ppo"
)

// ShapeRewards applies rLLM's step-reward shaping and Monte Carlo returns
// to steps, in place:
//
//	r_i += bonus·(raw_i − raw_{i−1})   for i ≥ 1 (raw = rewards before shaping)
//	G_i  = r_i + gamma·G_{i+1}          stored in MCReturn
//
// bonus 0 leaves rewards as they are; gamma 0 makes each return its own
// (shaped) step reward.
// The returns are ppo.MonteCarloReturns; a non-finite reward or gamma
// (which it refuses) leaves every return 0 and is reported.
func ShapeRewards(steps []episode.Step, bonus, gamma float64) error {
	raw := make([]float64, len(steps))
	for i := range steps {
		raw[i] = steps[i].Reward
	}
	if bonus != 0 {
		for i := 1; i < len(steps); i++ {
			steps[i].Reward += bonus * (raw[i] - raw[i-1])
		}
	}
	shaped := make([]float64, len(steps))
	for i := range steps {
		shaped[i] = steps[i].Reward
	}
	returns := make([]float64, len(steps))
	err := ppo.MonteCarloReturns(shaped, []int{0, len(steps)}, gamma, returns)
	for i := range steps {
		steps[i].MCReturn = returns[i]
	}
	return err
}
