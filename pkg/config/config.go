// Package config owns rllm's configuration tree: the embedded defaults,
// the layering of files, environment variables and overrides, rLLM/verl
// aliases, and strict validation that reports every problem at once.
//
// The Go structs below are the schema: a key exists if and only if a field
// exists, and configs/default.yaml must give every field a value and a
// comment (a test holds both to that).
package config

// Config is the whole resolved configuration.
type Config struct {
	Data      Data      `koanf:"data" json:"data" yaml:"data"`
	Rollout   Rollout   `koanf:"rollout" json:"rollout" yaml:"rollout"`
	Actor     Actor     `koanf:"actor" json:"actor" yaml:"actor"`
	Algorithm Algorithm `koanf:"algorithm" json:"algorithm" yaml:"algorithm"`
	Trainer   Trainer   `koanf:"trainer" json:"trainer" yaml:"trainer"`
	Agent     Agent     `koanf:"agent" json:"agent" yaml:"agent"`
	Env       Env       `koanf:"env" json:"env" yaml:"env"`
	Workflow  Workflow  `koanf:"workflow" json:"workflow" yaml:"workflow"`
	Filters   Filters   `koanf:"filters" json:"filters" yaml:"filters"`
	Backend   Backend   `koanf:"backend" json:"backend" yaml:"backend"`
	Tools     Tools     `koanf:"tools" json:"tools" yaml:"tools"`
	Sandbox   Sandbox   `koanf:"sandbox" json:"sandbox" yaml:"sandbox"`
	Reward    Reward    `koanf:"reward" json:"reward" yaml:"reward"`
	// AsyncTraining overlaps rollouts with the update (rLLM's
	// rllm.async_training).
	AsyncTraining AsyncTraining `koanf:"async_training" json:"async_training" yaml:"async_training"`
}

// AsyncTraining runs rollouts as a producer that never waits for the
// update, bounded by a staleness quota (rLLM's rllm.async_training, verl's
// fully-async recipe).
type AsyncTraining struct {
	Enable                   bool    `koanf:"enable" json:"enable" yaml:"enable"`
	StalenessThreshold       float64 `koanf:"staleness_threshold" json:"staleness_threshold" yaml:"staleness_threshold"`
	TriggerParameterSyncStep int     `koanf:"trigger_parameter_sync_step" json:"trigger_parameter_sync_step" yaml:"trigger_parameter_sync_step"`
	MiniBatchSize            *int    `koanf:"mini_batch_size" json:"mini_batch_size" yaml:"mini_batch_size"`
	PartialRollout           bool    `koanf:"partial_rollout" json:"partial_rollout" yaml:"partial_rollout"`
}

// RolloutCorrection corrects the loss for samples drawn by another policy
// than the one trained (verl's algorithm.rollout_correction).
type RolloutCorrection struct {
	RolloutIS          *string `koanf:"rollout_is" json:"rollout_is" yaml:"rollout_is"`
	RolloutISThreshold float64 `koanf:"rollout_is_threshold" json:"rollout_is_threshold" yaml:"rollout_is_threshold"`
	// RolloutISBatchNormalize divides the truncated weights by their
	// batch mean (verl's rollout_is_batch_normalize).
	RolloutISBatchNormalize bool `koanf:"rollout_is_batch_normalize" json:"rollout_is_batch_normalize" yaml:"rollout_is_batch_normalize"`
	// RolloutRS and RolloutRSThreshold are verl's rejection sampling:
	// comma-separated criteria (token_k1, seq_mean_k3, ...) and their
	// thresholds (a number, or lower_upper for the k1 criteria).
	RolloutRS          *string `koanf:"rollout_rs" json:"rollout_rs" yaml:"rollout_rs"`
	RolloutRSThreshold *string `koanf:"rollout_rs_threshold" json:"rollout_rs_threshold" yaml:"rollout_rs_threshold"`
	BypassMode         *bool   `koanf:"bypass_mode" json:"bypass_mode" yaml:"bypass_mode"`
	// LossType is the loss of bypass mode: ppo_clip or reinforce.
	LossType string `koanf:"loss_type" json:"loss_type" yaml:"loss_type"`
}

// Reward shapes the env's rewards before advantages are computed (verl's
// reward_model.reward_manager and reward_model.reward_kwargs).
type Reward struct {
	// Manager is verl's reward manager: naive (the reward as the env
	// gives it) or dapo (with DAPO's overlong penalty).
	Manager        string         `koanf:"manager" json:"manager" yaml:"manager"`
	OverlongBuffer OverlongBuffer `koanf:"overlong_buffer" json:"overlong_buffer" yaml:"overlong_buffer"`
	// MaxRespLen is the response length the overlong buffer ends at;
	// null is data.max_response_length.
	MaxRespLen *int `koanf:"max_resp_len" json:"max_resp_len" yaml:"max_resp_len"`
}

// OverlongBuffer is DAPO's soft overlong punishment (verl's
// reward_kwargs.overlong_buffer_cfg).
type OverlongBuffer struct {
	Enable        bool    `koanf:"enable" json:"enable" yaml:"enable"`
	Len           int     `koanf:"len" json:"len" yaml:"len"`
	PenaltyFactor float64 `koanf:"penalty_factor" json:"penalty_factor" yaml:"penalty_factor"`
	Log           bool    `koanf:"log" json:"log" yaml:"log"`
}

// Sandbox runs untrusted code: the code env's programs and the python
// tool's calls (see pkg/sandbox).
type Sandbox struct {
	Backend       string            `koanf:"backend" json:"backend" yaml:"backend"`
	BindRO        []string          `koanf:"bind_ro" json:"bind_ro" yaml:"bind_ro"`
	Env           map[string]string `koanf:"env" json:"env" yaml:"env"`
	MaxConcurrent int               `koanf:"max_concurrent" json:"max_concurrent" yaml:"max_concurrent"`
	Limits        SandboxLimits     `koanf:"limits" json:"limits" yaml:"limits"`
	Docker        SandboxDocker     `koanf:"docker" json:"docker" yaml:"docker"`
}

// SandboxLimits bound every sandboxed run.
type SandboxLimits struct {
	WallTimeS  float64 `koanf:"wall_time_s" json:"wall_time_s" yaml:"wall_time_s"`
	CPUTimeS   float64 `koanf:"cpu_time_s" json:"cpu_time_s" yaml:"cpu_time_s"`
	MemoryMB   int     `koanf:"memory_mb" json:"memory_mb" yaml:"memory_mb"`
	Processes  int     `koanf:"processes" json:"processes" yaml:"processes"`
	FileSizeMB int     `koanf:"file_size_mb" json:"file_size_mb" yaml:"file_size_mb"`
	OutputKB   int     `koanf:"output_kb" json:"output_kb" yaml:"output_kb"`
}

// SandboxDocker configures the docker backend.
type SandboxDocker struct {
	Image    string `koanf:"image" json:"image" yaml:"image"`
	WarmPool int    `koanf:"warm_pool" json:"warm_pool" yaml:"warm_pool"`
}

// Tools are offered to the model by tool-calling agents (tool_agent).
type Tools struct {
	Builtin      []string       `koanf:"builtin" json:"builtin" yaml:"builtin"`
	Args         map[string]any `koanf:"args" json:"args" yaml:"args"`
	MCP          map[string]any `koanf:"mcp" json:"mcp" yaml:"mcp"`
	CallTimeoutS float64        `koanf:"call_timeout_s" json:"call_timeout_s" yaml:"call_timeout_s"`
}

// Data selects the tasks and sizes the batches.
type Data struct {
	TrainFiles         []string `koanf:"train_files" json:"train_files" yaml:"train_files"`
	ValFiles           []string `koanf:"val_files" json:"val_files" yaml:"val_files"`
	GeneratedTrainSize int      `koanf:"generated_train_size" json:"generated_train_size" yaml:"generated_train_size"`
	GeneratedValSize   int      `koanf:"generated_val_size" json:"generated_val_size" yaml:"generated_val_size"`
	TrainBatchSize     int      `koanf:"train_batch_size" json:"train_batch_size" yaml:"train_batch_size"`
	ValBatchSize       int      `koanf:"val_batch_size" json:"val_batch_size" yaml:"val_batch_size"`
	MaxPromptLength    int      `koanf:"max_prompt_length" json:"max_prompt_length" yaml:"max_prompt_length"`
	MaxResponseLength  int      `koanf:"max_response_length" json:"max_response_length" yaml:"max_response_length"`
	// FilterOverlongPrompts leaves out of training the tasks whose prompt
	// is longer than MaxPromptLength (verl's data.filter_overlong_prompts).
	FilterOverlongPrompts bool   `koanf:"filter_overlong_prompts" json:"filter_overlong_prompts" yaml:"filter_overlong_prompts"`
	Shuffle               bool   `koanf:"shuffle" json:"shuffle" yaml:"shuffle"`
	Seed                  int    `koanf:"seed" json:"seed" yaml:"seed"`
	DropLast              bool   `koanf:"drop_last" json:"drop_last" yaml:"drop_last"`
	DatasetsDir           string `koanf:"datasets_dir" json:"datasets_dir" yaml:"datasets_dir"`
	// FieldMap maps the rows of hf:// files that are not in the catalog
	// to task fields (pkg/hub field specs).
	FieldMap map[string]string `koanf:"field_map" json:"field_map" yaml:"field_map"`
}

// Rollout configures how episodes sample from the policy.
type Rollout struct {
	Engine              string         `koanf:"engine" json:"engine" yaml:"engine"`
	Endpoints           []string       `koanf:"endpoints" json:"endpoints" yaml:"endpoints"`
	Model               string         `koanf:"model" json:"model" yaml:"model"`
	APIKeyEnv           string         `koanf:"api_key_env" json:"api_key_env" yaml:"api_key_env"`
	APIKeyFile          string         `koanf:"api_key_file" json:"api_key_file" yaml:"api_key_file"`
	Tokenizer           string         `koanf:"tokenizer" json:"tokenizer" yaml:"tokenizer"`
	N                   int            `koanf:"n" json:"n" yaml:"n"`
	Temperature         float64        `koanf:"temperature" json:"temperature" yaml:"temperature"`
	TopP                float64        `koanf:"top_p" json:"top_p" yaml:"top_p"`
	TopK                int            `koanf:"top_k" json:"top_k" yaml:"top_k"`
	MaxTokens           *int           `koanf:"max_tokens" json:"max_tokens" yaml:"max_tokens"`
	Stop                []string       `koanf:"stop" json:"stop" yaml:"stop"`
	Seed                *int           `koanf:"seed" json:"seed" yaml:"seed"`
	ChatTemplateKwargs  map[string]any `koanf:"chat_template_kwargs" json:"chat_template_kwargs" yaml:"chat_template_kwargs"`
	DisableThinking     bool           `koanf:"disable_thinking" json:"disable_thinking" yaml:"disable_thinking"`
	AccumulateReasoning bool           `koanf:"accumulate_reasoning" json:"accumulate_reasoning" yaml:"accumulate_reasoning"`
	RequestTimeoutS     float64        `koanf:"request_timeout_s" json:"request_timeout_s" yaml:"request_timeout_s"`
	MaxResponseMB       int            `koanf:"max_response_mb" json:"max_response_mb" yaml:"max_response_mb"`
	Retry               Retry          `koanf:"retry" json:"retry" yaml:"retry"`
	ValKwargs           ValKwargs      `koanf:"val_kwargs" json:"val_kwargs" yaml:"val_kwargs"`
}

// Retry bounds the retries of one model request.
type Retry struct {
	MaxAttempts  int     `koanf:"max_attempts" json:"max_attempts" yaml:"max_attempts"`
	BackoffBaseS float64 `koanf:"backoff_base_s" json:"backoff_base_s" yaml:"backoff_base_s"`
	BackoffMaxS  float64 `koanf:"backoff_max_s" json:"backoff_max_s" yaml:"backoff_max_s"`
}

// ValKwargs is the sampling used for validation.
type ValKwargs struct {
	Temperature float64 `koanf:"temperature" json:"temperature" yaml:"temperature"`
	TopP        float64 `koanf:"top_p" json:"top_p" yaml:"top_p"`
	TopK        int     `koanf:"top_k" json:"top_k" yaml:"top_k"`
	N           int     `koanf:"n" json:"n" yaml:"n"`
}

// Actor configures the policy update.
type Actor struct {
	PPOMiniBatchSize *int     `koanf:"ppo_mini_batch_size" json:"ppo_mini_batch_size" yaml:"ppo_mini_batch_size"`
	PPOEpochs        int      `koanf:"ppo_epochs" json:"ppo_epochs" yaml:"ppo_epochs"`
	PolicyLoss       string   `koanf:"policy_loss" json:"policy_loss" yaml:"policy_loss"`
	ClipRatioLow     float64  `koanf:"clip_ratio_low" json:"clip_ratio_low" yaml:"clip_ratio_low"`
	ClipRatioHigh    float64  `koanf:"clip_ratio_high" json:"clip_ratio_high" yaml:"clip_ratio_high"`
	ClipRatioC       float64  `koanf:"clip_ratio_c" json:"clip_ratio_c" yaml:"clip_ratio_c"`
	LossAggMode      string   `koanf:"loss_agg_mode" json:"loss_agg_mode" yaml:"loss_agg_mode"`
	EntropyCoeff     float64  `koanf:"entropy_coeff" json:"entropy_coeff" yaml:"entropy_coeff"`
	UseKLLoss        *bool    `koanf:"use_kl_loss" json:"use_kl_loss" yaml:"use_kl_loss"`
	KLLossCoef       *float64 `koanf:"kl_loss_coef" json:"kl_loss_coef" yaml:"kl_loss_coef"`
	KLLossType       string   `koanf:"kl_loss_type" json:"kl_loss_type" yaml:"kl_loss_type"`
	RefPath          string   `koanf:"ref_path" json:"ref_path" yaml:"ref_path"`
	Optim            Optim    `koanf:"optim" json:"optim" yaml:"optim"`
}

// Optim is the optimizer (AdamW) and its learning-rate schedule.
type Optim struct {
	LR               *float64  `koanf:"lr" json:"lr" yaml:"lr"`
	WeightDecay      float64   `koanf:"weight_decay" json:"weight_decay" yaml:"weight_decay"`
	Betas            []float64 `koanf:"betas" json:"betas" yaml:"betas"`
	Eps              float64   `koanf:"eps" json:"eps" yaml:"eps"`
	GradClip         float64   `koanf:"grad_clip" json:"grad_clip" yaml:"grad_clip"`
	WarmupSteps      int       `koanf:"warmup_steps" json:"warmup_steps" yaml:"warmup_steps"`
	WarmupStepsRatio float64   `koanf:"warmup_steps_ratio" json:"warmup_steps_ratio" yaml:"warmup_steps_ratio"`
	LRScheduler      string    `koanf:"lr_scheduler" json:"lr_scheduler" yaml:"lr_scheduler"`
	MinLRRatio       float64   `koanf:"min_lr_ratio" json:"min_lr_ratio" yaml:"min_lr_ratio"`
}

// Algorithm turns rewards into advantages.
type Algorithm struct {
	AdvEstimator       string            `koanf:"adv_estimator" json:"adv_estimator" yaml:"adv_estimator"`
	AdvEstimatorByRole map[string]string `koanf:"adv_estimator_by_role" json:"adv_estimator_by_role" yaml:"adv_estimator_by_role"`
	Gamma              float64           `koanf:"gamma" json:"gamma" yaml:"gamma"`
	Lam                float64           `koanf:"lam" json:"lam" yaml:"lam"`
	NormAdvByStdInGRPO bool              `koanf:"norm_adv_by_std_in_grpo" json:"norm_adv_by_std_in_grpo" yaml:"norm_adv_by_std_in_grpo"`
	UseKLInReward      bool              `koanf:"use_kl_in_reward" json:"use_kl_in_reward" yaml:"use_kl_in_reward"`
	KLCoef             float64           `koanf:"kl_coef" json:"kl_coef" yaml:"kl_coef"`
	KLPenalty          string            `koanf:"kl_penalty" json:"kl_penalty" yaml:"kl_penalty"`
	GroupingLevel      *string           `koanf:"grouping_level" json:"grouping_level" yaml:"grouping_level"`
	StepwiseAdvantage  StepwiseAdvantage `koanf:"stepwise_advantage" json:"stepwise_advantage" yaml:"stepwise_advantage"`
	RolloutCorrection  RolloutCorrection `koanf:"rollout_correction" json:"rollout_correction" yaml:"rollout_correction"`
}

// StepwiseAdvantage handles multi-step episodes.
type StepwiseAdvantage struct {
	Enable           bool   `koanf:"enable" json:"enable" yaml:"enable"`
	Mode             string `koanf:"mode" json:"mode" yaml:"mode"`
	NormalizeBySteps bool   `koanf:"normalize_by_steps" json:"normalize_by_steps" yaml:"normalize_by_steps"`
}

// Trainer drives the loop: length, cadence, checkpoints, logging.
type Trainer struct {
	TotalEpochs        int      `koanf:"total_epochs" json:"total_epochs" yaml:"total_epochs"`
	TotalTrainingSteps *int     `koanf:"total_training_steps" json:"total_training_steps" yaml:"total_training_steps"`
	SaveFreq           int      `koanf:"save_freq" json:"save_freq" yaml:"save_freq"`
	TestFreq           int      `koanf:"test_freq" json:"test_freq" yaml:"test_freq"`
	ValBeforeTrain     bool     `koanf:"val_before_train" json:"val_before_train" yaml:"val_before_train"`
	ValOnly            bool     `koanf:"val_only" json:"val_only" yaml:"val_only"`
	Logger             []string `koanf:"logger" json:"logger" yaml:"logger"`
	ProjectName        string   `koanf:"project_name" json:"project_name" yaml:"project_name"`
	ExperimentName     string   `koanf:"experiment_name" json:"experiment_name" yaml:"experiment_name"`
	DefaultLocalDir    string   `koanf:"default_local_dir" json:"default_local_dir" yaml:"default_local_dir"`
	ResumeMode         string   `koanf:"resume_mode" json:"resume_mode" yaml:"resume_mode"`
	ResumeFromPath     *string  `koanf:"resume_from_path" json:"resume_from_path" yaml:"resume_from_path"`
	MaxCkptToKeep      *int     `koanf:"max_ckpt_to_keep" json:"max_ckpt_to_keep" yaml:"max_ckpt_to_keep"`
	MetricsAddr        string   `koanf:"metrics_addr" json:"metrics_addr" yaml:"metrics_addr"`
	Seed               int      `koanf:"seed" json:"seed" yaml:"seed"`
	// RolloutDataDir and ValidationDataDir are verl's keys: where each
	// step's training and validation episodes go (pkg/episodestore).
	RolloutDataDir    *string         `koanf:"rollout_data_dir" json:"rollout_data_dir" yaml:"rollout_data_dir"`
	ValidationDataDir *string         `koanf:"validation_data_dir" json:"validation_data_dir" yaml:"validation_data_dir"`
	Episodes          TrainerEpisodes `koanf:"episodes" json:"episodes" yaml:"episodes"`
}

// TrainerEpisodes bounds the episodes a run keeps.
type TrainerEpisodes struct {
	SaveFreq  int  `koanf:"save_freq" json:"save_freq" yaml:"save_freq"`
	MaxGroups *int `koanf:"max_groups" json:"max_groups" yaml:"max_groups"`
	MaxMB     *int `koanf:"max_mb" json:"max_mb" yaml:"max_mb"`
}

// Agent selects the registered agent and its arguments.
type Agent struct {
	Name              string         `koanf:"name" json:"name" yaml:"name"`
	MaxSteps          int            `koanf:"max_steps" json:"max_steps" yaml:"max_steps"`
	TrajectoryTimeout *float64       `koanf:"trajectory_timeout_s" json:"trajectory_timeout_s" yaml:"trajectory_timeout_s"`
	OverlongFilter    bool           `koanf:"overlong_filter" json:"overlong_filter" yaml:"overlong_filter"`
	Args              map[string]any `koanf:"args" json:"args" yaml:"args"`
}

// Env selects the registered environment and its arguments.
type Env struct {
	Name string         `koanf:"name" json:"name" yaml:"name"`
	Args map[string]any `koanf:"args" json:"args" yaml:"args"`
}

// Workflow selects a registered workflow and how episodes run.
type Workflow struct {
	UseWorkflow    bool           `koanf:"use_workflow" json:"use_workflow" yaml:"use_workflow"`
	Name           string         `koanf:"name" json:"name" yaml:"name"`
	NParallelTasks int            `koanf:"n_parallel_tasks" json:"n_parallel_tasks" yaml:"n_parallel_tasks"`
	RetryLimit     int            `koanf:"retry_limit" json:"retry_limit" yaml:"retry_limit"`
	Args           map[string]any `koanf:"args" json:"args" yaml:"args"`
}

// Filters decide which episodes are trained on.
type Filters struct {
	RejectionSample      RejectionSample  `koanf:"rejection_sample" json:"rejection_sample" yaml:"rejection_sample"`
	CompactFiltering     CompactFiltering `koanf:"compact_filtering" json:"compact_filtering" yaml:"compact_filtering"`
	MaskTruncatedSamples bool             `koanf:"mask_truncated_samples" json:"mask_truncated_samples" yaml:"mask_truncated_samples"`
	FilterTokenMismatch  bool             `koanf:"filter_token_mismatch" json:"filter_token_mismatch" yaml:"filter_token_mismatch"`
}

// RejectionSample drops groups that carry no learning signal.
type RejectionSample struct {
	Enable               bool `koanf:"enable" json:"enable" yaml:"enable"`
	Multiplier           int  `koanf:"multiplier" json:"multiplier" yaml:"multiplier"`
	MinPartialSolveTasks int  `koanf:"min_partial_solve_tasks" json:"min_partial_solve_tasks" yaml:"min_partial_solve_tasks"`
	FilterUniformGroups  bool `koanf:"filter_uniform_groups" json:"filter_uniform_groups" yaml:"filter_uniform_groups"`
}

// CompactFiltering masks episodes by termination reason.
type CompactFiltering struct {
	Enable                        bool `koanf:"enable" json:"enable" yaml:"enable"`
	MaskMaxPromptLengthExceeded   bool `koanf:"mask_max_prompt_length_exceeded" json:"mask_max_prompt_length_exceeded" yaml:"mask_max_prompt_length_exceeded"`
	MaskMaxResponseLengthExceeded bool `koanf:"mask_max_response_length_exceeded" json:"mask_max_response_length_exceeded" yaml:"mask_max_response_length_exceeded"`
	MaskEnvDone                   bool `koanf:"mask_env_done" json:"mask_env_done" yaml:"mask_env_done"`
	MaskMaxTurnsExceeded          bool `koanf:"mask_max_turns_exceeded" json:"mask_max_turns_exceeded" yaml:"mask_max_turns_exceeded"`
	MaskTimeout                   bool `koanf:"mask_timeout" json:"mask_timeout" yaml:"mask_timeout"`
	MaskUnknown                   bool `koanf:"mask_unknown" json:"mask_unknown" yaml:"mask_unknown"`
	MaskError                     bool `koanf:"mask_error" json:"mask_error" yaml:"mask_error"`
}

// Backend selects the training engine.
type Backend struct {
	Name   string `koanf:"name" json:"name" yaml:"name"`
	Local  Local  `koanf:"local" json:"local" yaml:"local"`
	Tinker Tinker `koanf:"tinker" json:"tinker" yaml:"tinker"`
}

// Local sizes the embedded pure-Go policy.
type Local struct {
	Layers      int     `koanf:"layers" json:"layers" yaml:"layers"`
	DModel      int     `koanf:"d_model" json:"d_model" yaml:"d_model"`
	Heads       int     `koanf:"heads" json:"heads" yaml:"heads"`
	Context     int     `koanf:"context" json:"context" yaml:"context"`
	LR          float64 `koanf:"lr" json:"lr" yaml:"lr"`
	WarmupSteps int     `koanf:"warmup_steps" json:"warmup_steps" yaml:"warmup_steps"`
	WarmupLR    float64 `koanf:"warmup_lr" json:"warmup_lr" yaml:"warmup_lr"`
	WarmupAgent string  `koanf:"warmup_agent" json:"warmup_agent" yaml:"warmup_agent"`
	Threads     int     `koanf:"threads" json:"threads" yaml:"threads"`
	Weights     string  `koanf:"weights" json:"weights" yaml:"weights"`
}

// Tinker reaches a service speaking the Tinker API. The API key is only
// ever named (variable or file), never stored here.
type Tinker struct {
	BaseURL      string  `koanf:"base_url" json:"base_url" yaml:"base_url"`
	APIKeyEnv    string  `koanf:"api_key_env" json:"api_key_env" yaml:"api_key_env"`
	APIKeyFile   string  `koanf:"api_key_file" json:"api_key_file" yaml:"api_key_file"`
	BaseModel    string  `koanf:"base_model" json:"base_model" yaml:"base_model"`
	LoRARank     int     `koanf:"lora_rank" json:"lora_rank" yaml:"lora_rank"`
	TrainUnembed bool    `koanf:"train_unembed" json:"train_unembed" yaml:"train_unembed"`
	TrainMLP     bool    `koanf:"train_mlp" json:"train_mlp" yaml:"train_mlp"`
	TrainAttn    bool    `koanf:"train_attn" json:"train_attn" yaml:"train_attn"`
	HeartbeatS   float64 `koanf:"heartbeat_s" json:"heartbeat_s" yaml:"heartbeat_s"`
	// MaxRetries bounds the retries of one call (5xx, 429, dropped
	// connections, expired futures); RetryAfterCapS caps a 429's wait.
	MaxRetries     int     `koanf:"max_retries" json:"max_retries" yaml:"max_retries"`
	RetryAfterCapS float64 `koanf:"retry_after_cap_s" json:"retry_after_cap_s" yaml:"retry_after_cap_s"`
	// RequestTimeoutS bounds one HTTP request to the service;
	// SamplerTTLS is the life of each step's sampler snapshot on it.
	RequestTimeoutS float64  `koanf:"request_timeout_s" json:"request_timeout_s" yaml:"request_timeout_s"`
	SamplerTTLS     *float64 `koanf:"sampler_ttl_s" json:"sampler_ttl_s" yaml:"sampler_ttl_s"`
	// Weights are the starting weights (a tinker:// path or a directory
	// holding tinker.json) instead of a fresh LoRA adapter.
	Weights string `koanf:"weights" json:"weights" yaml:"weights"`
}
