package config

import "testing"

// BenchmarkLoad20Overrides loads and validates the full configuration with
// 20 overrides, the figure docs/benchmarks.md records.
func BenchmarkLoad20Overrides(b *testing.B) {
	sets := []string{
		"data.train_batch_size=64", "data.max_prompt_length=1024", "data.max_response_length=256", "data.seed=3",
		"rollout.n=4", "rollout.temperature=0.7", "rollout.top_p=0.95", "rollout.top_k=50", "rollout.stop=[</answer>]",
		"actor.ppo_mini_batch_size=16", "actor.clip_ratio_high=0.28", "actor.loss_agg_mode=seq-mean-token-mean",
		"actor.optim.lr=1e-6", "algorithm.adv_estimator=rloo", "trainer.total_epochs=3", "trainer.experiment_name=bench",
		"agent.max_steps=5", "env.args.size=4", "actor_rollout_ref.actor.ppo_epochs=2", "filters.rejection_sample.enable=true",
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(Sources{Sets: sets}); err != nil {
			b.Fatal(err)
		}
	}
}
