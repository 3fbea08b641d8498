package config

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// The values each enumerated key accepts. Packages that implement them
// (pkg/ppo's estimator registry, the backends) test that they agree.
var (
	Engines       = []string{"auto", "openai", "vllm", "sglang"}
	PolicyLosses  = []string{"ppo", "vanilla", "importance_sampling", "cispo", "gspo"}
	LossAggModes  = []string{"token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"}
	KLLossTypes   = []string{"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"}
	LRSchedulers  = []string{"constant", "cosine"}
	AdvEstimators = []string{"grpo", "drgrpo", "rloo", "reinforce", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "opo", "gae"}
	StepwiseModes = []string{"broadcast", "per_step"}
	// GroupingLevels are rLLM's algorithm.grouping_level values that rllm has.
	GroupingLevels = []string{"trajectory", "step"}
	// RolloutISModes are verl's algorithm.rollout_correction.rollout_is levels.
	RolloutISModes = []string{"token", "sequence"}
	// RolloutRSOptions are verl's algorithm.rollout_correction.rollout_rs
	// criteria (pkg/ppo's RolloutRSOptions).
	RolloutRSOptions = []string{"token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
		"seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3"}
	// RolloutLossTypes are verl's algorithm.rollout_correction.loss_type
	// values (the loss of bypass mode).
	RolloutLossTypes = []string{"ppo_clip", "reinforce"}
	// RewardManagers are the verl reward managers rllm has
	// (reward.manager, verl's reward_model.reward_manager).
	RewardManagers = []string{"naive", "dapo"}
	Loggers        = []string{"console", "jsonl", "tensorboard", "wandb", "mlflow"}
	ResumeModes    = []string{"auto", "disable", "resume_path"}
	BackendNames   = []string{"local", "tinker"}
	// MaxN bounds rollout.n, rollout.val_kwargs.n and eval's --n.
	MaxN = 100000
	// MaxEpisodesPerStep bounds the episodes of one training step.
	MaxEpisodesPerStep = 1 << 20
	valueModelLacked   = "needs a value model (critic), which no rllm backend has yet; use grpo, rloo or reinforce_plus_plus"
)

type validator struct {
	errs   Errors
	origin func(string) Origin
}

func (v *validator) fail(key, format string, args ...any) {
	v.errs.add(key, v.origin(key), format, args...)
}

func (v *validator) atLeast(key string, got, lo int) {
	if got < lo {
		v.fail(key, "must be at least %d, got %d", lo, got)
	}
}

func (v *validator) between(key string, got, lo, hi int) {
	if got < lo || got > hi {
		v.fail(key, "must be from %d to %d, got %d", lo, hi, got)
	}
}

// envName checks a key that names an environment variable. A value that
// is not a variable name may be the secret itself pasted in the wrong
// place, so it is never repeated.
func (v *validator) envName(key, got string) {
	if got != "" && !envName.MatchString(got) {
		v.fail(key, "must be the name of an environment variable (letters, digits and _), and its value is not one (not shown: it may be the key itself); write the variable's name, e.g. %s=OPENAI_API_KEY, and put the key in that variable", key)
	}
}

func (v *validator) oneOf(key, got string, allowed []string) {
	for _, a := range allowed {
		if got == a {
			return
		}
	}
	v.fail(key, "must be one of %s, got %q", strings.Join(allowed, ", "), got)
}

func (v *validator) inRange(key string, got, lo, hi float64, loOpen, hiOpen bool) {
	bad := got < lo || got > hi || (loOpen && got == lo) || (hiOpen && got == hi)
	if bad {
		l, h := "[", "]"
		if loOpen {
			l = "("
		}
		if hiOpen {
			h = ")"
		}
		v.fail(key, "must be in %s%g, %g%s, got %g", l, lo, hi, h, got)
	}
}

func (v *validator) positive(key string, got float64) {
	if got <= 0 {
		v.fail(key, "must be greater than 0, got %g", got)
	}
}

func (v *validator) nonNegative(key string, got float64) {
	if got < 0 {
		v.fail(key, "must be 0 or more, got %g", got)
	}
}

func validate(c *Config, origin func(string) Origin) Errors {
	v := &validator{origin: origin}

	d := c.Data
	v.atLeast("data.train_batch_size", d.TrainBatchSize, 1)
	if d.ValBatchSize != -1 && d.ValBatchSize < 1 {
		v.fail("data.val_batch_size", "must be -1 (the whole set) or at least 1, got %d", d.ValBatchSize)
	}
	v.atLeast("data.max_prompt_length", d.MaxPromptLength, 1)
	v.atLeast("data.max_response_length", d.MaxResponseLength, 1)
	v.atLeast("data.generated_train_size", d.GeneratedTrainSize, 1)
	v.atLeast("data.generated_val_size", d.GeneratedValSize, 1)

	r := c.Rollout
	v.oneOf("rollout.engine", r.Engine, Engines)
	v.between("rollout.n", r.N, 1, MaxN)
	if d.TrainBatchSize >= 1 && r.N >= 1 && r.N <= MaxN && d.TrainBatchSize*r.N*max(c.Filters.RejectionSample.Multiplier, 1) > MaxEpisodesPerStep {
		v.fail("rollout.n", "(%d) x data.train_batch_size (%d) x filters.rejection_sample.multiplier (%d) is more than %d episodes per step; lower one of them",
			r.N, d.TrainBatchSize, c.Filters.RejectionSample.Multiplier, MaxEpisodesPerStep)
	}
	v.nonNegative("rollout.temperature", r.Temperature)
	v.inRange("rollout.top_p", r.TopP, 0, 1, true, false)
	if r.TopK != -1 && r.TopK < 1 {
		v.fail("rollout.top_k", "must be -1 (off) or at least 1, got %d", r.TopK)
	}
	if r.MaxTokens != nil {
		v.atLeast("rollout.max_tokens", *r.MaxTokens, 1)
	}
	v.positive("rollout.request_timeout_s", r.RequestTimeoutS)
	v.between("rollout.max_response_mb", r.MaxResponseMB, 1, 4096)
	v.atLeast("rollout.retry.max_attempts", r.Retry.MaxAttempts, 1)
	v.nonNegative("rollout.retry.backoff_base_s", r.Retry.BackoffBaseS)
	if r.Retry.BackoffMaxS < r.Retry.BackoffBaseS {
		v.fail("rollout.retry.backoff_max_s", "must be at least rollout.retry.backoff_base_s (%g), got %g", r.Retry.BackoffBaseS, r.Retry.BackoffMaxS)
	}
	v.nonNegative("rollout.val_kwargs.temperature", r.ValKwargs.Temperature)
	v.inRange("rollout.val_kwargs.top_p", r.ValKwargs.TopP, 0, 1, true, false)
	if r.ValKwargs.TopK != -1 && r.ValKwargs.TopK < 1 {
		v.fail("rollout.val_kwargs.top_k", "must be -1 (off) or at least 1, got %d", r.ValKwargs.TopK)
	}
	v.between("rollout.val_kwargs.n", r.ValKwargs.N, 1, MaxN)
	v.envName("rollout.api_key_env", r.APIKeyEnv)
	v.envName("backend.tinker.api_key_env", c.Backend.Tinker.APIKeyEnv)
	if r.APIKeyEnv != "" && r.APIKeyFile != "" {
		v.fail("rollout.api_key_file", "and rollout.api_key_env are both set; keep one")
	}
	if r.Engine != "auto" {
		if len(r.Endpoints) == 0 {
			v.fail("rollout.endpoints", "is empty, but rollout.engine is %s; list the server URLs, e.g. rollout.endpoints=[http://127.0.0.1:8000]", r.Engine)
		}
		if r.Model == "" {
			v.fail("rollout.model", "is empty, but rollout.engine is %s; set the model name the endpoints serve", r.Engine)
		}
	}
	for i, e := range r.Endpoints {
		if !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://") {
			v.fail("rollout.endpoints", "item %d (%q) must be an http:// or https:// URL", i, e)
		}
	}

	a := c.Actor
	if mb := a.PPOMiniBatchSize; mb != nil {
		v.atLeast("actor.ppo_mini_batch_size", *mb, 1)
		if *mb >= 1 && d.TrainBatchSize >= 1 && d.TrainBatchSize%*mb != 0 {
			v.fail("actor.ppo_mini_batch_size", "(%d tasks, %d episodes with rollout.n=%d) must divide data.train_batch_size x rollout.n (%d); pick a divisor of data.train_batch_size (%d), or null for the whole batch",
				*mb, *mb*r.N, r.N, d.TrainBatchSize*r.N, d.TrainBatchSize)
		}
	}
	v.atLeast("actor.ppo_epochs", a.PPOEpochs, 1)
	v.oneOf("actor.policy_loss", a.PolicyLoss, PolicyLosses)
	v.positive("actor.clip_ratio_low", a.ClipRatioLow)
	v.positive("actor.clip_ratio_high", a.ClipRatioHigh)
	if a.ClipRatioC <= 1 {
		v.fail("actor.clip_ratio_c", "must be greater than 1 (dual clip), got %g", a.ClipRatioC)
	}
	v.oneOf("actor.loss_agg_mode", a.LossAggMode, LossAggModes)
	v.nonNegative("actor.entropy_coeff", a.EntropyCoeff)
	if a.KLLossCoef != nil {
		v.nonNegative("actor.kl_loss_coef", *a.KLLossCoef)
	}
	v.oneOf("actor.kl_loss_type", a.KLLossType, KLLossTypes)
	o := a.Optim
	if o.LR != nil {
		v.positive("actor.optim.lr", *o.LR)
	}
	v.nonNegative("actor.optim.weight_decay", o.WeightDecay)
	if len(o.Betas) != 2 {
		v.fail("actor.optim.betas", "must have two numbers [beta1, beta2], got %d", len(o.Betas))
	} else {
		v.inRange("actor.optim.betas", o.Betas[0], 0, 1, false, true)
		v.inRange("actor.optim.betas", o.Betas[1], 0, 1, false, true)
	}
	v.positive("actor.optim.eps", o.Eps)
	v.positive("actor.optim.grad_clip", o.GradClip)
	if o.WarmupSteps < -1 {
		v.fail("actor.optim.warmup_steps", "must be -1 (use warmup_steps_ratio) or 0 or more, got %d", o.WarmupSteps)
	}
	v.inRange("actor.optim.warmup_steps_ratio", o.WarmupStepsRatio, 0, 1, false, false)
	v.oneOf("actor.optim.lr_scheduler", o.LRScheduler, LRSchedulers)
	v.inRange("actor.optim.min_lr_ratio", o.MinLRRatio, 0, 1, false, false)

	al := c.Algorithm
	v.oneOf("algorithm.adv_estimator", al.AdvEstimator, AdvEstimators)
	roles := slices.Sorted(maps.Keys(al.AdvEstimatorByRole))
	for _, role := range roles {
		v.oneOf("algorithm.adv_estimator_by_role."+role, al.AdvEstimatorByRole[role], AdvEstimators)
		if al.AdvEstimatorByRole[role] == "gae" {
			v.fail("algorithm.adv_estimator_by_role."+role, "is gae, which %s", valueModelLacked)
		}
	}
	if al.AdvEstimator == "gae" {
		v.fail("algorithm.adv_estimator", "is gae, which %s", valueModelLacked)
	}
	v.inRange("algorithm.gamma", al.Gamma, 0, 1, false, false)
	v.inRange("algorithm.lam", al.Lam, 0, 1, false, false)
	v.nonNegative("algorithm.kl_coef", al.KLCoef)
	v.oneOf("algorithm.stepwise_advantage.mode", al.StepwiseAdvantage.Mode, StepwiseModes)
	v.groupingLevel(al)
	if rc := al.RolloutCorrection; rc.RolloutIS != nil {
		v.oneOf("algorithm.rollout_correction.rollout_is", *rc.RolloutIS, RolloutISModes)
	}
	if th := al.RolloutCorrection.RolloutISThreshold; !(th >= 1) || math.IsInf(th, 0) {
		v.fail("algorithm.rollout_correction.rollout_is_threshold", "must be a finite number of at least 1 (an importance weight's upper cap), got %g", th)
	}
	if rs := al.RolloutCorrection.RolloutRS; rs != nil && *rs != "" && *rs != "null" {
		for _, o := range strings.Split(*rs, ",") {
			if o = strings.TrimSpace(o); o != "" && !slices.Contains(RolloutRSOptions, o) {
				v.fail("algorithm.rollout_correction.rollout_rs", "has the unknown criterion %q; use one or more (comma-separated) of %s, or null", o, strings.Join(RolloutRSOptions, ", "))
			}
		}
	}
	v.oneOf("algorithm.rollout_correction.loss_type", al.RolloutCorrection.LossType, RolloutLossTypes)

	rw := c.Reward
	if !slices.Contains(RewardManagers, rw.Manager) {
		v.fail("reward.manager", "is %q, a verl reward manager rllm does not have; naive (the env's reward as it is) and dapo (with DAPO's overlong penalty) are (episodes are scored by the env's reward function: env.name; rllm list rewards)", rw.Manager)
	}
	if rw.Manager != "dapo" {
		// verl's other managers take no such arguments.
		for _, key := range []string{"reward.overlong_buffer.enable", "reward.overlong_buffer.len", "reward.overlong_buffer.penalty_factor", "reward.overlong_buffer.log", "reward.max_resp_len"} {
			if o := origin(key); o.Layer != "" && o.Layer != "default" {
				v.fail(key, "is set, but reward.manager is %s; the overlong buffer is the dapo reward manager's: set reward.manager=dapo (reward_model.reward_manager=dapo) or remove it", rw.Manager)
			}
		}
	}
	if ob := rw.OverlongBuffer; ob.Enable {
		v.atLeast("reward.overlong_buffer.len", ob.Len, 1)
		if !(ob.PenaltyFactor >= 0) || math.IsInf(ob.PenaltyFactor, 0) {
			v.fail("reward.overlong_buffer.penalty_factor", "must be a finite number of 0 or more (the penalty at max_resp_len), got %g", ob.PenaltyFactor)
		}
		maxLen, key := c.EffectiveMaxRespLen(), "data.max_response_length"
		if rw.MaxRespLen != nil {
			key = "reward.max_resp_len"
		}
		if ob.Len >= 1 && maxLen < ob.Len {
			v.fail("reward.overlong_buffer.len", "(%d) is longer than %s (%d), where the buffer ends; verl requires max_resp_len >= overlong_buffer.len", ob.Len, key, maxLen)
		}
	}
	if rw.MaxRespLen != nil {
		v.atLeast("reward.max_resp_len", *rw.MaxRespLen, 1)
	}
	as := c.AsyncTraining
	if !as.Enable {
		// rLLM's async trainer is its own entry point; here the switch is
		// async_training.enable, and these keys mean nothing without it.
		for _, key := range []string{"async_training.staleness_threshold", "async_training.trigger_parameter_sync_step", "async_training.mini_batch_size", "async_training.partial_rollout"} {
			if o := origin(key); o.Layer != "" && o.Layer != "default" {
				v.fail(key, "is set, but async_training.enable is false, so training is synchronous and it has no effect; set async_training.enable=true (rLLM's fully-async trainer) or remove it")
			}
		}
	}
	if st := as.StalenessThreshold; !(st >= 0) || math.IsInf(st, 0) {
		v.fail("async_training.staleness_threshold", "must be a finite number ≥ 0 (0: no sample older than the weights being trained), got %g", st)
	}
	v.atLeast("async_training.trigger_parameter_sync_step", as.TriggerParameterSyncStep, 1)
	if as.MiniBatchSize != nil {
		v.atLeast("async_training.mini_batch_size", *as.MiniBatchSize, 1)
	}

	t := c.Trainer
	v.atLeast("trainer.total_epochs", t.TotalEpochs, 1)
	if t.TotalTrainingSteps != nil {
		v.atLeast("trainer.total_training_steps", *t.TotalTrainingSteps, 1)
	}
	if t.SaveFreq == 0 || t.SaveFreq < -1 {
		v.fail("trainer.save_freq", "must be -1 (never) or at least 1, got %d", t.SaveFreq)
	}
	if t.TestFreq == 0 || t.TestFreq < -1 {
		v.fail("trainer.test_freq", "must be -1 (never) or at least 1, got %d", t.TestFreq)
	}
	for _, lg := range t.Logger {
		v.oneOf("trainer.logger", lg, Loggers)
	}
	if t.ProjectName == "" {
		v.fail("trainer.project_name", "is empty; name the project")
	}
	if t.ExperimentName == "" {
		v.fail("trainer.experiment_name", "is empty; name the experiment")
	}
	if t.DefaultLocalDir == "" {
		v.fail("trainer.default_local_dir", "is empty; give a checkpoint directory")
	}
	v.oneOf("trainer.resume_mode", t.ResumeMode, ResumeModes)
	if t.ResumeMode == "resume_path" && (t.ResumeFromPath == nil || *t.ResumeFromPath == "") {
		v.fail("trainer.resume_from_path", "is not set, but trainer.resume_mode is resume_path; give the checkpoint directory to resume from")
	}
	if t.MaxCkptToKeep != nil {
		v.atLeast("trainer.max_ckpt_to_keep", *t.MaxCkptToKeep, 1)
	}
	if e := t.Episodes; e.SaveFreq == 0 || e.SaveFreq < -1 {
		v.fail("trainer.episodes.save_freq", "must be -1 (never) or at least 1, got %d", e.SaveFreq)
	}
	if t.Episodes.MaxGroups != nil {
		v.atLeast("trainer.episodes.max_groups", *t.Episodes.MaxGroups, 1)
	}
	if t.Episodes.MaxMB != nil {
		v.atLeast("trainer.episodes.max_mb", *t.Episodes.MaxMB, 1)
	}

	v.atLeast("agent.max_steps", c.Agent.MaxSteps, 1)
	if c.Agent.TrajectoryTimeout != nil {
		v.positive("agent.trajectory_timeout_s", *c.Agent.TrajectoryTimeout)
	}
	w := c.Workflow
	v.atLeast("workflow.n_parallel_tasks", w.NParallelTasks, 1)
	v.atLeast("workflow.retry_limit", w.RetryLimit, 0)
	if w.UseWorkflow {
		// rLLM's AgentTrainer refuses agent/env settings next to a
		// workflow: they belong in the workflow's own arguments.
		for _, key := range []string{"agent.name", "agent.args", "env.name", "env.args"} {
			if o := origin(key); o.Layer != "" && o.Layer != "default" {
				v.fail(key, "is set, but workflow.use_workflow is true; put agent and env settings under workflow.args (agent_cls, agent_args, env_cls, env_args)")
			}
		}
		if w.Name == "" {
			v.fail("workflow.name", "is empty, but workflow.use_workflow is true; name a registered workflow (rllm list workflows)")
		}
	}

	f := c.Filters
	v.atLeast("filters.rejection_sample.multiplier", f.RejectionSample.Multiplier, 1)
	v.atLeast("filters.rejection_sample.min_partial_solve_tasks", f.RejectionSample.MinPartialSolveTasks, 0)

	b := c.Backend
	switch b.Name {
	case "verl", "fireworks":
		v.fail("backend.name", "rllm has no %s backend: a real model trains on a service speaking the Tinker API (hosted Tinker, or SkyRL or TuFT on your GPUs): set backend.name=tinker (rllm/backend=tinker)", b.Name)
	default:
		v.oneOf("backend.name", b.Name, BackendNames)
	}
	if o := origin("backend.tinker.base_model"); b.Name == "local" && o.Layer != "" && o.Layer != "default" && b.Tinker.BaseModel != "" {
		// The embedded policy would train in its place, silently.
		v.fail("backend.tinker.base_model", "names the model %s, but backend.name is local, the embedded policy, which cannot load it; set backend.name=tinker to train it on a Tinker-API service, or backend.local.weights=DIR to start from a local safetensors checkpoint", b.Tinker.BaseModel)
	}
	// The embedded policy's own bounds (pkg/backend/local Config.Validate).
	v.between("backend.local.layers", b.Local.Layers, 1, 64)
	v.between("backend.local.d_model", b.Local.DModel, 1, 4096)
	v.atLeast("backend.local.heads", b.Local.Heads, 1)
	if b.Local.Heads >= 1 && b.Local.DModel%b.Local.Heads != 0 {
		v.fail("backend.local.heads", "(%d) must divide backend.local.d_model (%d)", b.Local.Heads, b.Local.DModel)
	}
	v.between("backend.local.context", b.Local.Context, 2, 8192)
	v.positive("backend.local.lr", b.Local.LR)
	v.atLeast("backend.local.threads", b.Local.Threads, 0)
	v.atLeast("backend.local.warmup_steps", b.Local.WarmupSteps, 0)
	v.positive("backend.local.warmup_lr", b.Local.WarmupLR)
	v.oneOf("backend.local.warmup_agent", b.Local.WarmupAgent, []string{"auto", "builtin", "workflow"})
	if b.Name == "local" && b.Local.Context < 2 {
		v.fail("backend.local.context", "is too small")
	}
	tk := b.Tinker
	if b.Name == "tinker" {
		if !strings.HasPrefix(tk.BaseURL, "http://") && !strings.HasPrefix(tk.BaseURL, "https://") {
			v.fail("backend.tinker.base_url", "must be an http:// or https:// URL, got %q", tk.BaseURL)
		}
		if tk.APIKeyEnv == "" && tk.APIKeyFile == "" {
			v.fail("backend.tinker.api_key_env", "and backend.tinker.api_key_file are both empty; name the variable (e.g. TINKER_API_KEY) or file that holds the key")
		}
		if tk.BaseModel == "" {
			v.fail("backend.tinker.base_model", "is empty; name the base model, e.g. Qwen/Qwen3-8B")
		}
	}
	if tk.APIKeyEnv != "" && tk.APIKeyFile != "" {
		v.fail("backend.tinker.api_key_file", "and backend.tinker.api_key_env are both set; keep one")
	}
	v.atLeast("backend.tinker.lora_rank", tk.LoRARank, 1)
	v.positive("backend.tinker.heartbeat_s", tk.HeartbeatS)
	v.positive("backend.tinker.request_timeout_s", tk.RequestTimeoutS)
	if tk.SamplerTTLS != nil && *tk.SamplerTTLS < 1 {
		v.fail("backend.tinker.sampler_ttl_s", "must be at least 1 second or null (no expiry), got %g", *tk.SamplerTTLS)
	}

	sb := c.Sandbox
	v.oneOf("sandbox.backend", sb.Backend, SandboxBackends)
	v.atLeast("sandbox.max_concurrent", sb.MaxConcurrent, 0)
	v.inRange("sandbox.limits.wall_time_s", sb.Limits.WallTimeS, 0, 86400, true, false)
	v.inRange("sandbox.limits.cpu_time_s", sb.Limits.CPUTimeS, 0, 86400, true, false)
	v.between("sandbox.limits.memory_mb", sb.Limits.MemoryMB, 16, 1<<20)
	v.between("sandbox.limits.processes", sb.Limits.Processes, 1, 1<<16)
	v.between("sandbox.limits.file_size_mb", sb.Limits.FileSizeMB, 1, 1<<20)
	v.between("sandbox.limits.output_kb", sb.Limits.OutputKB, 1, 1<<20)
	v.between("sandbox.docker.warm_pool", sb.Docker.WarmPool, 0, 64)
	for i, p := range sb.BindRO {
		if !strings.HasPrefix(p, "/") || strings.Contains(p, "..") || p == "/" {
			v.fail(fmt.Sprintf("sandbox.bind_ro[%d]", i), "must be an absolute host directory other than / and without .., got %q", p)
		}
	}
	for k := range sb.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			v.fail("sandbox.env", "%q is not an environment variable name", k)
		}
	}
	return v.errs
}

// SandboxBackends are the values of sandbox.backend (pkg/sandbox).
var SandboxBackends = []string{"auto", "bwrap", "docker", "unsafe-host"}

// EffectiveLR is actor.optim.lr, or the backend's recommended rate when
// it is null.
func (c *Config) EffectiveLR() float64 {
	if c.Actor.Optim.LR != nil {
		return *c.Actor.Optim.LR
	}
	if c.Backend.Name == "tinker" {
		return 2e-5
	}
	return c.Backend.Local.LR
}

// EffectiveKLLoss is actor.use_kl_loss and actor.kl_loss_coef, or when
// null the backend's recommendation: the embedded policy, which starts
// from a small warm-up rather than a pretrained model, keeps its
// exploration with a KL penalty of 0.1 to that start (without it the
// default run's policy turns deterministic on wrong answers and stalls);
// other backends follow verl (off; 0.001 when turned on).
func (c *Config) EffectiveKLLoss() (on bool, coef float64) {
	local := c.Backend.Name == "local"
	on, coef = local, 0.001
	if local {
		coef = 0.1
	}
	if c.Actor.UseKLLoss != nil {
		on = *c.Actor.UseKLLoss
	}
	if c.Actor.KLLossCoef != nil {
		coef = *c.Actor.KLLossCoef
	}
	return on, coef
}

// EffectiveMiniBatch is actor.ppo_mini_batch_size in tasks, or the whole
// training batch when it is null.
func (c *Config) EffectiveMiniBatch() int {
	if c.Actor.PPOMiniBatchSize != nil {
		return *c.Actor.PPOMiniBatchSize
	}
	return c.Data.TrainBatchSize
}

// EffectiveMaxTokens is rollout.max_tokens, or data.max_response_length
// when it is null.
func (c *Config) EffectiveMaxTokens() int {
	if c.Rollout.MaxTokens != nil {
		return *c.Rollout.MaxTokens
	}
	return c.Data.MaxResponseLength
}

// EffectiveMaxRespLen is reward.max_resp_len, or data.max_response_length
// when it is null.
func (c *Config) EffectiveMaxRespLen() int {
	if c.Reward.MaxRespLen != nil {
		return *c.Reward.MaxRespLen
	}
	return c.Data.MaxResponseLength
}

// EffectiveBypass is algorithm.rollout_correction.bypass_mode, or when it
// is null verl's default (false: decoupled PPO, verl/trainer/config/
// algorithm.py, RolloutCorrectionConfig.bypass_mode, at verl commit
// b178a3cd) when rollout_is asks for importance weights, and bypass
// otherwise: without weights to apply, the sampler's logprobs serve as
// PPO's old policy and spare a forward pass.
func (c *Config) EffectiveBypass() bool {
	rc := c.Algorithm.RolloutCorrection
	if rc.BypassMode != nil {
		return *rc.BypassMode
	}
	return rc.RolloutIS == nil || *rc.RolloutIS == "" || *rc.RolloutIS == "null" || *rc.RolloutIS == "none"
}

// groupingLevel checks algorithm.grouping_level (rLLM's Tinker trainer,
// rllm/trainer/deprecated/tinker_data_processor.py at rllm-org/rllm
// 7982c508: trajectory groups by task and trajectory name, step by task,
// name and step index, and any other value by episode) against the
// stepwise advantage keys that say the same here.
func (v *validator) groupingLevel(al Algorithm) {
	const key = "algorithm.grouping_level"
	if al.GroupingLevel == nil {
		return
	}
	sw := al.StepwiseAdvantage
	switch gl := *al.GroupingLevel; gl {
	case "trajectory":
		if sw.Enable && sw.Mode == "per_step" {
			v.fail(key, "is trajectory (each trajectory scored by its reward among those of its task and name), but algorithm.stepwise_advantage.mode is per_step (each step among the same steps); keep one: grouping_level=step is per_step")
		}
	case "step":
		if sw.Enable && sw.Mode == "broadcast" {
			v.fail(key, "is step (each step scored by its reward among the same steps of its task's trajectories), but algorithm.stepwise_advantage.mode is broadcast (every step gets its trajectory's advantage); keep one: grouping_level=trajectory goes with broadcast")
		}
	case "episode":
		v.fail(key, "is episode, which groups the trajectories of one episode together (a solver with its own judge, each rollout its own group); rllm compares each trajectory with the trajectories of the same task and name: use trajectory")
	default:
		v.oneOf(key, gl, GroupingLevels)
	}
}

// EffectiveStepwise is whether advantages are computed per step, and in
// which mode: algorithm.stepwise_advantage, or per_step when
// algorithm.grouping_level is step (rLLM's Tinker spelling of it).
func (c *Config) EffectiveStepwise() (enable bool, mode string) {
	if gl := c.Algorithm.GroupingLevel; gl != nil && *gl == "step" {
		return true, "per_step"
	}
	sw := c.Algorithm.StepwiseAdvantage
	return sw.Enable, sw.Mode
}
