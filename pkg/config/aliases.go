package config

import "strings"

// Alias maps a key spelled the rLLM/verl way onto rllm's key. Prefix
// aliases rename a whole subtree (actor_rollout_ref.rollout.* → rollout.*);
// exact aliases rename one key and are checked first.
type Alias struct {
	From, To string
	Prefix   bool
}

// Aliases is the table docs/config.md reproduces. Order matters: the first
// match wins, so exact renames come before the prefix that would catch them.
var Aliases = []Alias{
	{From: "actor_rollout_ref.rollout.val_kwargs", To: "rollout.val_kwargs", Prefix: true},
	{From: "actor_rollout_ref.rollout.response_length", To: "rollout.max_tokens"},
	{From: "actor_rollout_ref.rollout", To: "rollout", Prefix: true},
	{From: "actor_rollout_ref.actor.grad_clip", To: "actor.optim.grad_clip"},
	{From: "actor_rollout_ref.actor.optim.lr_warmup_steps", To: "actor.optim.warmup_steps"},
	{From: "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", To: "actor.optim.warmup_steps_ratio"},
	{From: "actor_rollout_ref.actor.optim.warmup_style", To: "actor.optim.lr_scheduler"},
	{From: "actor_rollout_ref.actor.policy_loss.loss_mode", To: "actor.policy_loss"},
	{From: "actor_rollout_ref.actor", To: "actor", Prefix: true},
	{From: "actor_rollout_ref.model.path", To: "backend.tinker.base_model"},
	{From: "trainer.max_actor_ckpt_to_keep", To: "trainer.max_ckpt_to_keep"},
	{From: "rllm.agent.agent_args", To: "agent.args", Prefix: true},
	{From: "rllm.agent", To: "agent", Prefix: true},
	{From: "rllm.env.env_args", To: "env.args", Prefix: true},
	{From: "rllm.env", To: "env", Prefix: true},
	{From: "rllm.workflow.workflow_args", To: "workflow.args", Prefix: true},
	{From: "rllm.workflow", To: "workflow", Prefix: true},
	{From: "rllm.stepwise_advantage", To: "algorithm.stepwise_advantage", Prefix: true},
	{From: "rllm.rejection_sample", To: "filters.rejection_sample", Prefix: true},
	{From: "rllm.compact_filtering", To: "filters.compact_filtering", Prefix: true},
	{From: "rllm.mask_truncated_samples", To: "filters.mask_truncated_samples"},
	{From: "rllm.filter_token_mismatch", To: "filters.filter_token_mismatch"},
	{From: "rllm.disable_thinking", To: "rollout.disable_thinking"},
	{From: "rllm.accumulate_reasoning", To: "rollout.accumulate_reasoning"},
	{From: "rllm.agent.overlong_filter", To: "agent.overlong_filter"},
	{From: "rllm.async_training", To: "async_training", Prefix: true},
}

// canonical returns rllm's name for key and whether it was an alias.
func canonical(key string) (string, bool) {
	for _, a := range Aliases {
		switch {
		case key == a.From:
			return a.To, true
		case a.Prefix && strings.HasPrefix(key, a.From+"."):
			return a.To + key[len(a.From):], true
		}
	}
	return key, false
}

// aliasSection reports whether key is a proper prefix of some alias
// (actor_rollout_ref, rllm, ...): a mapping there is walked into rather
// than refused.
func aliasSection(key string) bool {
	for _, a := range Aliases {
		if strings.HasPrefix(a.From, key+".") {
			return true
		}
	}
	return false
}
