package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rllm-org/rllm-go/internal/anyval"
)

// Alias is one row of the table of keys spelled the rLLM/verl way. A row
// does one of three things with the key it matches:
//   - To set: it is rllm's key To (a prefix row renames a whole subtree:
//     actor_rollout_ref.rollout.* → rollout.*);
//   - Group set: it has no effect here, and the keys of one group are
//     named together in one notice when the run starts (verl's GPU
//     placement, which the training engine does);
//   - Refused set: it is refused, with why and what to use instead.
//
// Check, when set, looks at the value (and the rest of the configuration)
// and returns why that value would change what is trained, which refuses
// it: a key is only without effect for the values that are.
type Alias struct {
	From, To string
	Prefix   bool
	Group    Group
	Refused  string
	Check    func(v any, c *Config, set func(key string) bool) string
	// When says, for the docs, which values Check lets through.
	When string
}

// Group is a set of keys without effect named in one notice.
type Group string

// The groups of keys without effect.
const (
	// GroupEngine keys place and run the model on GPUs.
	GroupEngine Group = "engine"
	// GroupSame keys ask for what rllm does anyway.
	GroupSame Group = "same"
	// GroupCritic keys configure verl's critic when no critic is trained.
	GroupCritic Group = "critic"
)

// groupNotice words the notice of a group of n keys.
func groupNotice(g Group, keys []string) string {
	these, verb, they := fmt.Sprintf("these %d keys", len(keys)), "", "they have"
	if len(keys) == 1 {
		these, verb, they = "this key", "s", "it has"
	}
	list := strings.Join(keys, ", ")
	switch g {
	case GroupEngine:
		return fmt.Sprintf("%s place%s and run%s the model on GPUs (parallelism, memory, offload, micro-batches, kernels, profilers), which the training engine (backend.name) decides: %s; %s no effect here", these, verb, verb, list, they)
	case GroupCritic:
		return fmt.Sprintf("%s configure%s verl's critic, which only algorithm.adv_estimator=gae trains and this run does not: %s; %s no effect here", these, verb, list, they)
	}
	return fmt.Sprintf("%s ask%s for what rllm does anyway: %s; %s no effect here", these, verb, list, they)
}

// engine is a prefix row of verl's placement keys.
func engine(from string, prefix bool) Alias {
	return Alias{From: from, Prefix: prefix, Group: GroupEngine}
}

// valueIs lets the values in ok through and refuses others with why.
func valueIs(why string, ok ...any) func(any, *Config, func(string) bool) string {
	return func(v any, _ *Config, _ func(string) bool) string {
		for _, o := range ok {
			if fmt.Sprint(v) == fmt.Sprint(o) {
				return ""
			}
		}
		return why
	}
}

const (
	critic        = "verl trains a critic (value model) for its default estimator, gae; rllm has none and defaults to grpo: set algorithm.adv_estimator=grpo (or rloo, reinforce_plus_plus) to train without one, and drop the critic.* keys"
	rewardModel   = "a reward model is not supported: episodes are scored by the env's reward function (env.name; rllm list rewards)"
	multiTurn     = "verl's multi-turn tool config is not supported: rllm's tool agents take their tools from tools.builtin and tools.mcp (agent.name=tool_agent; rllm list tools)"
	remoteRuntime = "a remote runtime (Harbor on Daytona or Modal) is not supported: Harbor tasks run in local containers (env.name=task, sandbox.backend=docker; docs/tasks.md)"
	longPrompts   = "rllm keeps the last data.max_prompt_length tokens of a longer prompt (verl's truncation=left), or with data.filter_overlong_prompts=true leaves the task out of training; set one of those"
)

// criticCheck lets critic keys through when the run chose an estimator
// without a critic: left at verl's default (gae), verl would train one.
func criticCheck(_ any, c *Config, set func(string) bool) string {
	if set("algorithm.adv_estimator") && c.Algorithm.AdvEstimator != "gae" {
		return ""
	}
	return critic
}

// Aliases is the table docs/config.md reproduces (go test ./pkg/config
// -run TestAliasTableDoc -update). Order matters: the first match wins,
// so the rows without effect and the refused rows come before the prefix
// aliases that would catch them, and exact renames before their prefix.
var Aliases = []Alias{
	// verl's placement of the model on GPUs: the training engine's job.
	engine("actor_rollout_ref.hybrid_engine", false),
	engine("actor_rollout_ref.nccl_timeout", false),
	engine("actor_rollout_ref.actor.fsdp_config", true),
	engine("actor_rollout_ref.ref.fsdp_config", true),
	engine("actor_rollout_ref.actor.megatron", true),
	engine("actor_rollout_ref.ref.megatron", true),
	engine("actor_rollout_ref.actor.strategy", false),
	engine("actor_rollout_ref.ref.strategy", false),
	engine("actor_rollout_ref.actor.ppo_micro_batch_size", false),
	engine("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", false),
	engine("actor_rollout_ref.actor.use_dynamic_bsz", false),
	engine("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", false),
	engine("actor_rollout_ref.actor.ulysses_sequence_parallel_size", false),
	engine("actor_rollout_ref.actor.entropy_checkpointing", false),
	engine("actor_rollout_ref.actor.entropy_from_logits_with_chunking", false),
	engine("actor_rollout_ref.actor.use_torch_compile", false),
	engine("actor_rollout_ref.actor.profiler", true),
	engine("actor_rollout_ref.ref.log_prob_micro_batch_size", false),
	engine("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", false),
	engine("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", false),
	engine("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", false),
	engine("actor_rollout_ref.ref.ulysses_sequence_parallel_size", false),
	engine("actor_rollout_ref.ref.profiler", true),
	engine("actor_rollout_ref.model.use_remove_padding", false),
	engine("actor_rollout_ref.model.enable_gradient_checkpointing", false),
	engine("actor_rollout_ref.model.enable_activation_offload", false),
	engine("actor_rollout_ref.model.use_fused_kernels", false),
	engine("actor_rollout_ref.model.use_shm", false),
	engine("actor_rollout_ref.model.lora.merge", false),
	engine("actor_rollout_ref.rollout.name", false),
	engine("actor_rollout_ref.rollout.mode", false),
	engine("actor_rollout_ref.rollout.tensor_model_parallel_size", false),
	engine("actor_rollout_ref.rollout.gpu_memory_utilization", false),
	engine("actor_rollout_ref.rollout.log_prob_micro_batch_size", false),
	engine("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", false),
	engine("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", false),
	engine("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", false),
	engine("actor_rollout_ref.rollout.enforce_eager", false),
	engine("actor_rollout_ref.rollout.free_cache_engine", false),
	engine("actor_rollout_ref.rollout.enable_chunked_prefill", false),
	engine("actor_rollout_ref.rollout.max_num_batched_tokens", false),
	engine("actor_rollout_ref.rollout.max_num_seqs", false),
	engine("actor_rollout_ref.rollout.max_model_len", false),
	engine("actor_rollout_ref.rollout.dtype", false),
	engine("actor_rollout_ref.rollout.load_format", false),
	engine("actor_rollout_ref.rollout.layered_summon", false),
	engine("actor_rollout_ref.rollout.multi_stage_wake_up", false),
	engine("actor_rollout_ref.rollout.calculate_log_probs", false),
	engine("actor_rollout_ref.rollout.engine_kwargs", true),
	engine("actor_rollout_ref.rollout.agent.num_workers", false),
	engine("actor_rollout_ref.rollout.profiler", true),
	engine("trainer.n_gpus_per_node", false),
	engine("trainer.nnodes", false),
	engine("trainer.device", false),
	engine("trainer.balance_batch", false),
	engine("trainer.use_legacy_worker_impl", false),
	engine("trainer.ray_wait_register_center_timeout", false),
	engine("trainer.default_hdfs_dir", false),
	engine("rollout.nnodes", false),
	engine("rollout.n_gpus_per_node", false),
	engine("global_profiler", true),
	engine("ray_init", true),
	engine("ray_kwargs", true),
	engine("data.filter_overlong_prompts_workers", false),
	engine("data.dataloader_num_workers", false),
	engine("rllm.async_training.fwd_bwd_group_size", false),
	engine("rllm.gateway.port", false),
	engine("rllm.gateway.public_url", false),

	// verl's critic, which only gae trains.
	{From: "trainer.critic_warmup", Group: GroupCritic, When: "0, or a critic-free algorithm.adv_estimator set",
		Check: func(v any, c *Config, set func(string) bool) string {
			if n, ok := anyval.Float(v); ok && n == 0 {
				return ""
			}
			return criticCheck(v, c, set)
		}},
	{From: "critic", Prefix: true, Group: GroupCritic, Check: criticCheck, When: "algorithm.adv_estimator set to an estimator without a critic"},

	// What rllm does anyway, for the values that ask for it.
	{From: "actor_rollout_ref.rollout.val_kwargs.do_sample", Group: GroupSame, When: "true",
		Check: valueIs("false is greedy decoding; set rollout.val_kwargs.temperature=0 instead", true)},
	{From: "data.truncation", Group: GroupSame, When: "left, or error with data.filter_overlong_prompts=true (no long prompt is left to raise on)",
		Check: func(v any, c *Config, _ func(string) bool) string {
			if s := fmt.Sprint(v); s == "left" || (s == "error" && c.Data.FilterOverlongPrompts) {
				return ""
			}
			return longPrompts
		}},
	{From: "data.return_raw_chat", Group: GroupSame, When: "true (rllm renders every prompt from its messages)",
		Check: valueIs("rllm renders every prompt from its chat messages; remove the key", true)},
	{From: "data.prompt_key", Group: GroupSame, When: "prompt (rllm reads a row's question, problem or prompt)",
		Check: valueIs("rllm reads a row's question, problem or prompt column; rename the column", "prompt")},
	{From: "reward_model.enable", Group: GroupSame, When: "false", Check: valueIs(rewardModel, false)},
	{From: "rllm.algorithm.use_rllm", Group: GroupSame, When: "true (advantages are always rLLM's)",
		Check: valueIs("advantages are always computed as rLLM computes them; remove the key", true)},
	{From: "rllm.workflow.raise_on_error", Group: GroupSame, When: "false (a failed episode is recorded, not raised)",
		Check: valueIs("a failed episode is recorded with termination error (filters.compact_filtering.mask_error), never raised; remove the key", false)},
	{From: "algorithm.kl_ctrl.type", Group: GroupSame, When: "fixed", Check: valueIs("an adaptive KL controller is not supported; algorithm.kl_coef is a fixed coefficient", "fixed")},
	{From: "training.max_length", Group: GroupSame, When: "at least data.max_prompt_length + data.max_response_length",
		Check: func(v any, c *Config, _ func(string) bool) string {
			if n, ok := anyval.Float(v); ok && n >= float64(c.Data.MaxPromptLength+c.Data.MaxResponseLength) {
				return ""
			}
			return fmt.Sprintf("sequences are bounded by data.max_prompt_length + data.max_response_length (%d); lower those instead", c.Data.MaxPromptLength+c.Data.MaxResponseLength)
		}},
	{From: "trainer.log_val_generations", Group: GroupSame, When: "any (every validation episode is kept in the run directory: rllm view)",
		Check: func(any, *Config, func(string) bool) string { return "" }},

	// verl's DAPO reward manager and its arguments (the other reward_model
	// keys are refused below).
	{From: "reward_model.reward_manager", To: "reward.manager"},
	{From: "reward_model.reward_kwargs.overlong_buffer_cfg", To: "reward.overlong_buffer", Prefix: true},
	{From: "reward_model.reward_kwargs.max_resp_len", To: "reward.max_resp_len"},
	{From: "reward_model.reward_kwargs", Prefix: true, Refused: "of the reward managers' arguments rllm has the dapo manager's: overlong_buffer_cfg.enable, len, penalty_factor, log and max_resp_len (reward.*)"},

	// What rllm lacks.
	{From: "reward_model", Prefix: true, Refused: rewardModel},
	{From: "custom_reward_function", Prefix: true, Refused: "a reward function in a Python file is not supported: use a registered reward (env.name; rllm list rewards) or an env in another process (env.name=exec)"},
	{From: "actor_rollout_ref.rollout.multi_turn", Prefix: true, Refused: multiTurn},
	{From: "rllm.remote_runtime", Prefix: true, Refused: remoteRuntime},
	{From: "rllm.gateway.sampling_params_priority", Refused: "the gateway always samples with the run's rollout.* parameters"},
	{From: "actor_rollout_ref.model.lora.alpha", Refused: "the LoRA alpha is the training service's (backend.tinker); only the rank is set here (backend.tinker.lora_rank)"},
	{From: "actor_rollout_ref.model.lora_alpha", Refused: "the LoRA alpha is the training service's (backend.tinker); only the rank is set here (backend.tinker.lora_rank)"},
	{From: "data.gen_batch_size", Refused: "rllm draws data.train_batch_size × filters.rejection_sample.multiplier tasks for rejection sampling to choose from: set filters.rejection_sample.multiplier"},
	{From: "async_training.require_batches", Refused: "an optimizer step takes async_training.mini_batch_size task groups: set that"},
	{From: "async_training.required_samples", Refused: "an optimizer step takes async_training.mini_batch_size task groups: set that"},
	{From: "async_training.use_rollout_log_probs", Refused: "which policy PPO clips against is algorithm.rollout_correction.bypass_mode (true: the sampler's logprobs)"},
	{From: "async_training.compute_prox_log_prob", Refused: "which policy PPO clips against is algorithm.rollout_correction.bypass_mode (false: a forward pass gives the proximal policy)"},
	{From: "rollout.total_rollout_steps", Refused: "the run's length is trainer.total_training_steps or trainer.total_epochs"},
	{From: "rollout.total_epochs", Refused: "the run's length is trainer.total_epochs (rollouts and training run for the same epochs)"},
	{From: "rollout.test_freq", Refused: "validation runs every trainer.test_freq steps"},
	{From: "rollout.rejection_sample", Refused: "rejection sampling is filters.rejection_sample.enable"},
	{From: "actor_rollout_ref.model.path", To: "backend.tinker.base_model"},
	{From: "actor_rollout_ref.model.lora_rank", To: "backend.tinker.lora_rank"},
	{From: "actor_rollout_ref.model.lora.rank", To: "backend.tinker.lora_rank"},

	// Renames.
	{From: "actor_rollout_ref.rollout.val_kwargs", To: "rollout.val_kwargs", Prefix: true},
	{From: "actor_rollout_ref.rollout.response_length", To: "rollout.max_tokens"},
	{From: "actor_rollout_ref.rollout", To: "rollout", Prefix: true},
	{From: "actor_rollout_ref.actor.grad_clip", To: "actor.optim.grad_clip"},
	{From: "actor_rollout_ref.actor.optim.lr_warmup_steps", To: "actor.optim.warmup_steps"},
	{From: "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", To: "actor.optim.warmup_steps_ratio"},
	{From: "actor_rollout_ref.actor.optim.warmup_style", To: "actor.optim.lr_scheduler"},
	{From: "actor_rollout_ref.actor.policy_loss.loss_mode", To: "actor.policy_loss"},
	{From: "actor_rollout_ref.actor", To: "actor", Prefix: true},
	{From: "trainer.max_actor_ckpt_to_keep", To: "trainer.max_ckpt_to_keep"},
	{From: "data.train_dataset_name", To: "data.train_files"},
	{From: "data.val_dataset_name", To: "data.val_files"},
	{From: "algorithm.kl_ctrl.kl_coef", To: "algorithm.kl_coef"},
	// rLLM's unified trainer (Tinker-cookbook spellings).
	{From: "rllm/backend", To: "backend.name"},
	{From: "model.name", To: "backend.tinker.base_model"},
	{From: "model.lora_rank", To: "backend.tinker.lora_rank"},
	{From: "training.group_size", To: "rollout.n"},
	{From: "training.learning_rate", To: "actor.optim.lr"},
	{From: "validation.group_size", To: "rollout.val_kwargs.n"},
	{From: "sampling.train", To: "rollout", Prefix: true},
	{From: "sampling.val", To: "rollout.val_kwargs", Prefix: true},
	{From: "sampling", To: "rollout", Prefix: true},
	{From: "rllm.rollout.train", To: "rollout", Prefix: true},
	{From: "rllm.rollout.val", To: "rollout.val_kwargs", Prefix: true},
	{From: "rllm.trainer", To: "trainer", Prefix: true},
	{From: "rllm.algorithm", To: "algorithm", Prefix: true},
	{From: "rllm.agent.agent_args", To: "agent.args", Prefix: true},
	{From: "rllm.agent.trajectory_timeout", To: "agent.trajectory_timeout_s"},
	{From: "agent.trajectory_timeout", To: "agent.trajectory_timeout_s"},
	{From: "rllm.agent.overlong_filter", To: "agent.overlong_filter"},
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
	{From: "rllm.async_training", To: "async_training", Prefix: true},
}

// match returns the first row of the table that key falls under.
func match(key string) (Alias, bool) {
	for _, a := range Aliases {
		if key == a.From || (a.Prefix && strings.HasPrefix(key, a.From+".")) {
			return a, true
		}
	}
	return Alias{}, false
}

// canonical returns rllm's name for key and whether it was an alias.
func canonical(key string) (string, bool) {
	a, ok := match(key)
	if !ok || a.To == "" {
		return key, false
	}
	if key == a.From {
		return a.To, true
	}
	return a.To + key[len(a.From):], true
}

// foreign returns the row of a key that is not rllm's (one without effect
// or refused).
func foreign(key string) (Alias, bool) {
	a, ok := match(key)
	if !ok || a.To != "" {
		return Alias{}, false
	}
	return a, true
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

// foreignKey is a key of rLLM/verl with no rllm counterpart, as set.
type foreignKey struct {
	raw    string
	row    Alias
	value  any
	origin Origin
}

// judgeForeign turns the keys without counterpart into one notice per
// group, or errors: refused rows, and values their Check refuses.
func judgeForeign(keys []foreignKey, c *Config, set func(string) bool) (notices []string, errs Errors) {
	groups := map[Group][]string{}
	for _, f := range keys {
		msg := f.row.Refused
		if msg == "" && f.row.Check != nil {
			msg = f.row.Check(f.value, c, set)
		}
		if msg != "" {
			errs.add(f.raw, f.origin, "%s", msg)
			continue
		}
		groups[f.row.Group] = append(groups[f.row.Group], f.raw)
	}
	for _, g := range []Group{GroupEngine, GroupCritic, GroupSame} {
		if keys := groups[g]; len(keys) > 0 {
			notices = append(notices, groupNotice(g, slices.Compact(keys)))
		}
	}
	return notices, errs
}
