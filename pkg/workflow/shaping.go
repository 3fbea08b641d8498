package workflow

import "github.com/rllm-org/rllm-go/pkg/episode"

// ShapeRewards applies rLLM's step-reward shaping and Monte Carlo returns
// to steps, in place:
//
//	r_i += bonus·(raw_i − raw_{i−1})   for i ≥ 1 (raw = rewards before shaping)
//	G_i  = r_i + gamma·G_{i+1}          stored in MCReturn
//
// bonus 0 leaves rewards as they are; gamma 0 makes each return its own
// (shaped) step reward.
func ShapeRewards(steps []episode.Step, bonus, gamma float64) {
	if bonus != 0 && len(steps) > 1 {
		raw := make([]float64, len(steps))
		for i := range steps {
			raw[i] = steps[i].Reward
		}
		for i := 1; i < len(steps); i++ {
			steps[i].Reward += bonus * (raw[i] - raw[i-1])
		}
	}
	g := 0.0
	for i := len(steps) - 1; i >= 0; i-- {
		g = steps[i].Reward + gamma*g
		steps[i].MCReturn = g
	}
}
