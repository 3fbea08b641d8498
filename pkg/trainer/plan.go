package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/ppo"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/tasks"
	"github.com/rllm-org/rllm-go/pkg/tracking"
	"github.com/rllm-org/rllm-go/pkg/usererr"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// Plan is the configuration read once and checked once: everything the
// loop below needs, in the loop's own terms. Nothing under the plan reads
// the config. NewPlan refuses whatever the trainer cannot honour, and
// `rllm validate-config` calls it too, so both refuse with the same words.
type Plan struct {
	Backend string

	// Data: tasks per step, and how many are drawn before rejection
	// sampling keeps BatchSize of them (rejection_sample.multiplier).
	BatchSize, DrawSize int
	Shuffle, DropLast   bool
	DataSeed            uint64
	// TotalEpochs bounds the run unless TotalSteps is set.
	TotalEpochs int
	TotalSteps  *int

	// Rollouts.
	Workflow         workflow.Spec
	Train, Val       RolloutPlan
	Runner           rollout.RunnerOptions
	Assemble         rollout.AssembleOptions
	ValBatchSize     int
	MaxResponseLen   int
	ChatTemplateArgs map[string]any

	Filters   FilterPlan
	Reward    RewardPlan
	Remote    RemotePlan
	Reference ReferencePlan
	Advantage AdvantagePlan
	Update    UpdatePlan
	Cadence   CadencePlan
	Warmup    WarmupPlan
	// Notes are said when the run starts: what the configuration will
	// not do that a user may expect of it.
	Notes []string
	// Async is asynchronous training (async_training.*); zero when off.
	Async AsyncPlan

	Dir  string
	Seed int
	// Episodes is which episodes the run keeps, and where (episodes.go).
	Episodes EpisodesPlan
	// Identity is what a resumed run must share with this one.
	Identity RunIdentity

	// schedule, once the training tasks are known (Describe), is printed
	// by String.
	schedule *Schedule
}

// Schedule is how much a run does, known once its training tasks are.
type Schedule struct {
	// Tasks is the training set's size, StepsPerEpoch the batches of
	// DrawSize tasks it makes, Steps the run's length.
	Tasks, StepsPerEpoch, Steps int
}

// Schedule counts the steps a run over the training tasks takes:
// trainer.total_training_steps, else total_epochs passes over them. A set
// that cannot fill one batch with data.drop_last is refused.
func (p *Plan) Schedule(train []episode.Task) (Schedule, error) {
	if n := p.DrawSize; p.DropLast && n > len(train) {
		return Schedule{}, usererr.Errorf("data.train_batch_size: %d tasks per step (× rejection_sample.multiplier) is more than the training set's %d tasks, so there is no full batch; lower it, add tasks or set data.drop_last=false", n, len(train))
	}
	l, err := dataset.NewLoader(train, dataset.LoaderOptions{BatchSize: p.DrawSize, DropLast: p.DropLast})
	if err != nil {
		return Schedule{}, err
	}
	s := Schedule{Tasks: len(train), StepsPerEpoch: l.BatchesPerEpoch()}
	s.Steps = p.TotalEpochs * s.StepsPerEpoch
	if a := p.Async; a.Enabled {
		// An async step is trigger_parameter_sync_step optimizer steps: a.GroupsPerStep() groups.
		s.Steps = max(1, p.TotalEpochs*s.StepsPerEpoch*p.DrawSize/a.GroupsPerStep())
	}
	if p.TotalSteps != nil {
		s.Steps = *p.TotalSteps
	}
	return s, nil
}

// Preflight is what training checks before its first step that needs no
// backend: the plan, the training and validation tasks (read or
// generated as the run would) and the schedule over them. Every problem
// is returned at once: `rllm validate-config` and `rllm train --dry-run`
// both call it, so they refuse the same configurations with the same
// words as New does.
func Preflight(ctx context.Context, c *config.Config, opts Options) (*Plan, Schedule, error) {
	p, perr := NewPlan(c)
	train, _, derr := loadTasks(ctx, c, opts)
	if err := errors.Join(perr, derr); err != nil {
		return nil, Schedule{}, err
	}
	s, err := p.Schedule(train)
	if err != nil {
		return nil, Schedule{}, err
	}
	p.schedule = &s
	return p, s, nil
}

// RolloutPlan is one phase's sampling: N episodes per task with Params.
type RolloutPlan struct {
	N      int
	Params sampler.Params
}

// FilterPlan is which episodes train (rLLM's rllm.rejection_sample,
// compact_filtering).
type FilterPlan struct {
	// Rejection drops groups that are all solved or all unsolved and skips
	// the step when fewer than MinPartial groups remain.
	Rejection  bool
	MinPartial int
	// DropZeroAdvantage drops groups whose advantages are all zero
	// (filter_uniform_groups), after the estimators ran, as rLLM does.
	DropZeroAdvantage bool
	Compact           ppo.CompactFilter
	// DropOverlongPrompts drops the groups of tasks whose prompt was longer
	// than data.max_prompt_length (data.filter_overlong_prompts).
	DropOverlongPrompts bool
}

// RewardPlan shapes the training rewards before advantages (verl's
// reward manager, reward.*): DAPO's overlong penalty.
type RewardPlan struct {
	// Overlong adds ppo.OverlongPenalty of each sample's response length
	// to its reward (reward.overlong_buffer.enable with manager dapo).
	Overlong        bool
	MaxRespLen, Len int
	PenaltyFactor   float64
	// Log logs the step means batch/overlong_reward and batch/overlong.
	Log bool
}

// RemotePlan is training with rollouts from inference servers
// (rollout.engine=openai): after every optimizer step the new policy is
// published to every endpoint before the next rollouts.
type RemotePlan struct {
	Enabled   bool
	Endpoints []string
	Mode      rollout.PublishMode
}

// ReferencePlan is the frozen reference policy the KL terms compare
// against, and the in-reward KL penalty.
type ReferencePlan struct {
	// Needed when a KL loss or an in-reward KL is on.
	Needed bool
	// Path is a checkpoint the backend loads as the reference
	// (actor.ref_path); empty means the policy as training starts.
	Path string
	// RewardKLCoef and RewardKLType fold β·kl(old, ref) into the rewards
	// (algorithm.use_kl_in_reward, kl_coef, kl_penalty); 0 disables it.
	RewardKLCoef float64
	RewardKLType ppo.KLType
}

// StepwiseMode says how multi-step trajectories get advantages.
type StepwiseMode string

// Stepwise modes (rllm.stepwise_advantage).
const (
	StepwiseOff       StepwiseMode = ""
	StepwiseBroadcast StepwiseMode = "broadcast"
	StepwisePerStep   StepwiseMode = "per_step"
)

// AdvantagePlan is how rewards become advantages (pkg/ppo).
type AdvantagePlan struct {
	Estimators       ppo.RoleEstimators
	Config           ppo.Config
	Stepwise         StepwiseMode
	NormalizeBySteps bool
}

// UpdatePlan is how a batch updates the policy.
type UpdatePlan struct {
	// Loss is computed client side (pkg/ppo): a forward for the current
	// logprobs, the loss and its gradient in Go, then forward_backward
	// with cross_entropy and weights = −gradient. It gives verl's
	// objective exactly on any backend that has cross_entropy.
	Loss ppo.LossConfig
	// MiniBatchTasks is actor.ppo_mini_batch_size in task groups; each
	// mini-batch is one optimizer step, repeated for Epochs passes.
	MiniBatchTasks, Epochs int
	// OnPolicyFirst skips the forward pass of the first mini-batch: the
	// rollouts came from the backend's own sampler on the current weights,
	// so their raw (temperature-1) logprobs are the policy's.
	OnPolicyFirst bool
	// Builtin, when set, is the backend's own loss that computes exactly
	// the configured one (importance_sampling, with the aggregation folded
	// into the advantages): sent by name, it spares the forward pass.
	// Empty runs the loss client side.
	Builtin string
	// Correction is the off-policy correction of the loss
	// (algorithm.rollout_correction).
	Correction CorrectionPlan
	LR         LRSchedule
	Adam       backend.AdamParams // LearningRate set per step
}

// LRSchedule is Hugging Face's warm-up then constant or cosine, as verl
// uses it.
type LRSchedule struct {
	Base        float64
	WarmupSteps int     // < 0: WarmupRatio of the total steps
	WarmupRatio float64 // used when WarmupSteps < 0
	Cosine      bool
	MinRatio    float64
}

// At is the learning rate of step s (0-based) of total.
func (l LRSchedule) At(s, total int) float64 {
	warm := l.WarmupSteps
	if warm < 0 {
		warm = int(l.WarmupRatio * float64(total))
	}
	if s < warm {
		return l.Base * float64(s) / float64(warm)
	}
	if !l.Cosine || total <= warm {
		return l.Base
	}
	progress := float64(s-warm) / float64(total-warm)
	return l.Base * (l.MinRatio + (1-l.MinRatio)*0.5*(1+math.Cos(math.Pi*progress)))
}

// CadencePlan is when the loop validates, checkpoints and logs.
type CadencePlan struct {
	SaveFreq, TestFreq      int
	ValBeforeTrain, ValOnly bool
	MaxCkptToKeep           *int
	MetricsAddr             string
	ResumeMode              string
	ResumeFrom              string
	// Loggers are trainer.logger's sinks (pkg/tracking names).
	Loggers []string
}

// WarmupPlan is the embedded policy's answer-format warm-up
// (backend.local.warmup_steps).
type WarmupPlan struct {
	Steps int
	LR    float64
	// Format writes the replies the model is fitted to (the env's format
	// examples); nil fits shuffled ground truths.
	Format tasks.FormatExample
	// Workflow is where the warm-up's prompts come from
	// (backend.local.warmup_agent): the run's workflow, or the env's
	// built-in agent in place of an agent program.
	Workflow workflow.Spec
	// Builtin says Workflow is the built-in agent standing in for the
	// run's workflow.
	Builtin bool
}

// NewPlan reads c into a plan, refusing (all at once, one line each)
// every setting the trainer would otherwise accept and ignore.
func NewPlan(c *config.Config) (*Plan, error) {
	var errs []error
	refuse := func(format string, args ...any) { errs = append(errs, usererr.Errorf(format, args...)) }

	stepwise, stepwiseMode := c.EffectiveStepwise()
	p := &Plan{
		Backend:   c.Backend.Name,
		BatchSize: c.Data.TrainBatchSize, DrawSize: c.Data.TrainBatchSize,
		Shuffle: c.Data.Shuffle, DropLast: c.Data.DropLast, DataSeed: uint64(c.Data.Seed),
		TotalEpochs: c.Trainer.TotalEpochs, TotalSteps: c.Trainer.TotalTrainingSteps,
		Workflow:       workflow.SpecFromConfig(c),
		Train:          RolloutPlan{N: c.Rollout.N, Params: seededParams(rollout.TrainParams(c), c)},
		Val:            RolloutPlan{N: c.Rollout.ValKwargs.N, Params: seededParams(rollout.ValParams(c), c)},
		Runner:         rollout.RunnerOptionsFromConfig(c),
		ValBatchSize:   c.Data.ValBatchSize,
		MaxResponseLen: c.Data.MaxResponseLength,
		Assemble: rollout.AssembleOptions{
			MaxPromptLength:      c.Data.MaxPromptLength,
			MaxResponseLength:    c.Data.MaxResponseLength,
			PerStep:              stepwise,
			FilterTokenMismatch:  c.Filters.FilterTokenMismatch,
			OverlongFilter:       c.Agent.OverlongFilter,
			MaskTruncatedSamples: c.Filters.MaskTruncatedSamples,
		},
		Dir:      c.Trainer.DefaultLocalDir,
		Seed:     c.Trainer.Seed,
		Identity: runIdentity(c),
		Episodes: episodesPlan(c, c.Trainer.DefaultLocalDir),
	}
	if why := p.Workflow.FreshPrompts(); why != "" && !p.Assemble.PerStep {
		// As one sequence per trajectory, each turn after the first would
		// be a token mismatch: the trajectory cut at its first turn.
		refuse("%s, so a turn's prompt does not extend the last and a trajectory is not one sequence; set algorithm.stepwise_advantage.enable=true (each step its own sequence) or keep the history", why)
	}

	// Backend and where rollouts come from.
	kind, known := backend.KindOf(c.Backend.Name)
	if !known {
		refuse("backend.name: the %s backend is not available in this build; use one of %s", c.Backend.Name, strings.Join(backend.Names(), ", "))
	}
	if c.Rollout.Engine != "auto" {
		p.Remote = RemotePlan{Enabled: true}
		// One spelling of each endpoint (http://h:8000/v1/ is
		// http://h:8000), so the publisher posts to the right routes and
		// a dropped endpoint is matched by the rollout client.
		for _, e := range c.Rollout.Endpoints {
			n, err := rollout.NormalizeEndpoint(e)
			if err != nil {
				refuse("%v", err)
				continue
			}
			p.Remote.Endpoints = append(p.Remote.Endpoints, n)
		}
		switch {
		case c.Backend.Name == "local" && c.Rollout.Engine == "vllm":
			refuse("rollout.engine: vLLM cannot load the embedded policy; serve it with rllm serve (SGLang's weight API) and use rollout.engine=sglang or openai")
		case c.Backend.Name == "local":
			p.Remote.Mode = rollout.PublishFullWeights
		case c.Rollout.Engine == "sglang":
			p.Remote.Mode = rollout.PublishSGLangLoRA
		default:
			p.Remote.Mode = rollout.PublishVLLMLoRA
		}
		if len(c.Rollout.Endpoints) == 0 {
			refuse("rollout.endpoints: rollout.engine=%s trains on rollouts from inference servers; list them (rollout.endpoints=[http://host:8000]) or use rollout.engine=auto", c.Rollout.Engine)
		}
	}
	if c.Backend.Name == "local" {
		if c.Rollout.Tokenizer != "" {
			refuse("rollout.tokenizer: the embedded policy (backend.name=local) samples with its own byte tokenizer and ChatML template; remove rollout.tokenizer or train a model that uses it")
		}
		if c.Rollout.DisableThinking {
			refuse("rollout.disable_thinking: the embedded policy's template has no thinking mode to disable; set it to false")
		}
	}
	if c.Rollout.AccumulateReasoning {
		refuse("rollout.accumulate_reasoning: keeping earlier turns' reasoning in the prompt is not supported by the built-in workflows yet; set it to false")
	}

	// Filters.
	rs := c.Filters.RejectionSample
	if rs.Multiplier < 1 {
		refuse("filters.rejection_sample.multiplier: %d must be at least 1", rs.Multiplier)
	} else if rs.Multiplier > 1 {
		if !rs.Enable {
			refuse("filters.rejection_sample.multiplier: %d draws extra tasks for rejection sampling to choose from, which is off; set filters.rejection_sample.enable=true or multiplier=1", rs.Multiplier)
		}
		p.DrawSize = c.Data.TrainBatchSize * rs.Multiplier
	}
	if ob := c.Reward.OverlongBuffer; ob.Enable && c.Reward.Manager == "dapo" {
		p.Reward = RewardPlan{Overlong: true, MaxRespLen: c.EffectiveMaxRespLen(), Len: ob.Len, PenaltyFactor: ob.PenaltyFactor, Log: ob.Log}
		if c.Algorithm.StepwiseAdvantage.Enable {
			refuse("reward.overlong_buffer.enable: DAPO's overlong penalty is on each response's length, and with algorithm.stepwise_advantage.enable the advantages come from each step's or the trajectory's own reward; turn one of them off")
		}
	} else if ob.Log {
		refuse("reward.overlong_buffer.log: logs the overlong penalty, which is off (reward.overlong_buffer.enable=false); set enable=true or log=false")
	}
	cf := c.Filters.CompactFiltering
	if c.Data.FilterOverlongPrompts && stepwise {
		refuse("data.filter_overlong_prompts: with stepwise advantages (algorithm.stepwise_advantage.enable, or grouping_level=step) each step's prompt holds the turns before it, so a long prompt there is not a long task; turn one of them off")
	}
	p.Filters = FilterPlan{
		DropOverlongPrompts: c.Data.FilterOverlongPrompts,
		Rejection:           rs.Enable, MinPartial: rs.MinPartialSolveTasks, DropZeroAdvantage: rs.FilterUniformGroups,
		Compact: ppo.CompactFilter{
			Enable:                        cf.Enable,
			MaskMaxPromptLengthExceeded:   cf.MaskMaxPromptLengthExceeded,
			MaskMaxResponseLengthExceeded: cf.MaskMaxResponseLengthExceeded,
			MaskEnvDone:                   cf.MaskEnvDone,
			MaskMaxTurnsExceeded:          cf.MaskMaxTurnsExceeded,
			MaskTimeout:                   cf.MaskTimeout,
			MaskUnknown:                   cf.MaskUnknown,
			MaskError:                     cf.MaskError,
		},
	}

	// Advantages.
	alg := c.Algorithm
	p.Advantage.Estimators = ppo.RoleEstimators{Default: alg.AdvEstimator, ByRole: alg.AdvEstimatorByRole}
	p.Advantage.Config = ppo.DefaultConfig()
	p.Advantage.Config.NormAdvByStd = alg.NormAdvByStdInGRPO
	p.Advantage.Config.Gamma, p.Advantage.Config.Lam = alg.Gamma, alg.Lam
	if stepwise {
		p.Advantage.Stepwise = StepwiseMode(stepwiseMode)
		p.Advantage.NormalizeBySteps = alg.StepwiseAdvantage.NormalizeBySteps
		if p.Advantage.Stepwise != StepwiseBroadcast && p.Advantage.Stepwise != StepwisePerStep {
			refuse("algorithm.stepwise_advantage.mode: %q is not a mode; use broadcast or per_step", alg.StepwiseAdvantage.Mode)
		}
	} else if alg.StepwiseAdvantage.NormalizeBySteps {
		refuse("algorithm.stepwise_advantage.normalize_by_steps: applies to stepwise advantages, which are off; set algorithm.stepwise_advantage.enable=true or normalize_by_steps=false")
	}
	if err := p.Advantage.Config.Validate(); err != nil {
		errs = append(errs, usererr.Wrap(err))
	}
	roles := []string{"algorithm.adv_estimator"}
	names := []string{alg.AdvEstimator}
	for role, n := range alg.AdvEstimatorByRole {
		roles, names = append(roles, "algorithm.adv_estimator_by_role."+role), append(names, n)
	}
	for i, n := range names {
		est, err := ppo.Lookup(n)
		switch {
		case err != nil:
			refuse("%s: unknown estimator %q; use one of %s", roles[i], n, strings.Join(ppo.Names(), ", "))
		case n == "gae":
			refuse("%s: gae needs a value model (critic), which no backend here trains; use grpo, rloo, reinforce_plus_plus or reinforce_plus_plus_baseline", roles[i])
		case est.Level == ppo.Token && stepwise:
			refuse("%s: %s works on token rewards and cannot be combined with stepwise advantages (algorithm.stepwise_advantage.enable, or grouping_level=step); use an outcome estimator such as grpo, or turn stepwise advantages off", roles[i], n)
		}
	}
	if alg.UseKLInReward {
		kind, err := ppo.ParseKLType(alg.KLPenalty)
		switch {
		case err != nil:
			refuse("algorithm.kl_penalty: unknown KL estimator %q; use kl (k1), abs, mse (k2) or low_var_kl (k3)", alg.KLPenalty)
		case alg.KLCoef < 0 || math.IsNaN(alg.KLCoef) || math.IsInf(alg.KLCoef, 0):
			refuse("algorithm.kl_coef: %g must be a finite number ≥ 0", alg.KLCoef)
		default:
			p.Reference.Needed, p.Reference.RewardKLCoef, p.Reference.RewardKLType = true, alg.KLCoef, kind
		}
	}

	// The update.
	a := c.Actor
	lc := ppo.DefaultLossConfig()
	if kind, err := ppo.ParsePolicyLoss(a.PolicyLoss); err != nil {
		refuse("actor.policy_loss: unknown loss %q; use vanilla (ppo), importance_sampling, cispo or gspo", a.PolicyLoss)
	} else {
		lc.Loss = kind
	}
	if agg, err := ppo.ParseAggMode(a.LossAggMode); err != nil {
		refuse("actor.loss_agg_mode: unknown aggregation %q; use token-mean, seq-mean-token-sum, seq-mean-token-mean or seq-mean-token-sum-norm", a.LossAggMode)
	} else {
		lc.AggMode = agg
		if agg == ppo.AggSeqMeanTokenSumNorm {
			lc.NormLength = float64(c.Data.MaxResponseLength)
		}
	}
	lc.ClipRatioLow, lc.ClipRatioHigh, lc.ClipRatioC = a.ClipRatioLow, a.ClipRatioHigh, a.ClipRatioC
	if useKL, klCoef := c.EffectiveKLLoss(); useKL {
		kind, err := ppo.ParseKLType(a.KLLossType)
		switch {
		case err != nil:
			refuse("actor.kl_loss_type: %q needs the whole next-token distributions or is unknown; use kl (k1), abs, mse (k2) or low_var_kl (k3), optionally with a trailing +", a.KLLossType)
		case klCoef < 0 || math.IsNaN(klCoef) || math.IsInf(klCoef, 0):
			refuse("actor.kl_loss_coef: %g must be a finite number ≥ 0", klCoef)
		default:
			lc.KLCoef, lc.KLType = klCoef, kind
			p.Reference.Needed = true
		}
	}
	if math.IsNaN(a.EntropyCoeff) || math.IsInf(a.EntropyCoeff, 0) {
		refuse("actor.entropy_coeff: %g must be a finite number", a.EntropyCoeff)
	} else {
		lc.EntropyCoeff = a.EntropyCoeff
		if known && a.EntropyCoeff != 0 && !kind.Entropy {
			errs = append(errs, entropyRefusal(c.Backend.Name))
		}
	}
	p.Reference.Path = a.RefPath
	if a.RefPath != "" && !p.Reference.Needed {
		refuse("actor.ref_path: names a reference policy, which only the KL terms use and both are off; set actor.use_kl_loss=true or algorithm.use_kl_in_reward=true, or remove actor.ref_path")
	}
	if err := lc.Validate(); err != nil && len(errs) == 0 {
		errs = append(errs, usererr.Wrap(err))
	}
	mini := c.EffectiveMiniBatch()
	o := a.Optim
	p.Update = UpdatePlan{
		Loss: lc, MiniBatchTasks: mini, Epochs: a.PPOEpochs,
		// The embedded policy samples with the weights it trains and
		// reports raw logprobs; a remote sampler or service may differ.
		OnPolicyFirst: c.Backend.Name == "local" && c.Rollout.Engine == "auto",
		LR: LRSchedule{Base: c.EffectiveLR(), WarmupSteps: o.WarmupSteps, WarmupRatio: o.WarmupStepsRatio,
			Cosine: o.LRScheduler == "cosine", MinRatio: o.MinLRRatio},
		Adam: backend.AdamParams{Beta1: o.Betas[0], Beta2: o.Betas[1], Eps: o.Eps, WeightDecay: o.WeightDecay, GradClipNorm: o.GradClip},
	}

	p.Update.Correction, p.Async = correctionAndAsync(c, p, refuse)
	if p.Update.Correction.Reinforce {
		p.Update.Loss.Loss = ppo.LossReinforce // bypass mode's loss_type=reinforce
	}

	// Data sizes known before any file is read.
	if !c.Workflow.UseWorkflow && len(c.Data.TrainFiles) == 0 {
		if _, ok := tasks.GeneratorFor(c.Env.Name); ok && c.Data.GeneratedTrainSize < p.DrawSize && c.Data.DropLast {
			refuse("data.generated_train_size: %d generated tasks cannot fill one batch of %d (data.train_batch_size × rejection_sample.multiplier); raise data.generated_train_size or lower data.train_batch_size", c.Data.GeneratedTrainSize, p.DrawSize)
		}
	}

	// Cadence and output.
	t := c.Trainer
	p.Cadence = CadencePlan{
		SaveFreq: t.SaveFreq, TestFreq: t.TestFreq, ValBeforeTrain: t.ValBeforeTrain, ValOnly: t.ValOnly,
		MaxCkptToKeep: t.MaxCkptToKeep, ResumeMode: t.ResumeMode, MetricsAddr: t.MetricsAddr,
		Loggers: slices.Clone(t.Logger),
	}
	if t.ResumeFromPath != nil {
		p.Cadence.ResumeFrom = *t.ResumeFromPath
	}
	for _, l := range t.Logger {
		if !slices.Contains(tracking.Names, l) {
			refuse("trainer.logger: %q is not a logger this build has; use any of %s", l, strings.Join(tracking.Names, ", "))
		}
	}
	if c.Backend.Name == "local" && c.Backend.Local.Weights == "" {
		p.Warmup = WarmupPlan{Steps: c.Backend.Local.WarmupSteps, LR: c.Backend.Local.WarmupLR}
		if f, ok := tasks.FormatExampleForWorkflow(p.Workflow.Name); ok {
			p.Warmup.Format = f
		} else if !c.Workflow.UseWorkflow {
			p.Warmup.Format, _ = tasks.FormatExampleFor(c.Env.Name)
		}
		var err error
		if p.Warmup.Workflow, p.Warmup.Builtin, err = warmupWorkflow(c, p.Workflow); err != nil {
			errs = append(errs, err)
		}
		if c.Env.Name == "task" {
			p.Notes = append(p.Notes, "env task with the embedded policy: the warm-up teaches a model trained from scratch to call the bash tool and to stop (each of its episodes runs in the task's container, as RL's do), not to fix repositories, so the reward will likely stay 0; tasks need a real model to learn (backend.local.weights, or rollout.engine=openai with rollout.endpoints; docs/tasks.md)")
		}
		if c.Env.Name == "code" {
			p.Notes = append(p.Notes, "env code with the embedded policy: a model trained from scratch learns the reply's format (a fenced code block) in the warm-up, not to write programs, so the reward will likely stay 0; code tasks need a real model (backend.local.weights, or rollout.engine=openai with rollout.endpoints; docs/code.md)")
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// CheckBackend refuses what the plan needs and the opened backend cannot
// do, naming the key.
func (p *Plan) CheckBackend(info backend.ModelInfo) error {
	if !slices.Contains(info.SupportedLosses, backend.LossCrossEntropy) {
		return usererr.Errorf("backend.name: the %s backend (%s) has no cross_entropy loss, which the trainer's client-side policy losses run on", p.Backend, info.Name)
	}
	if p.Update.Loss.EntropyCoeff != 0 && !info.Entropy {
		return entropyRefusal(p.Backend)
	}
	// A loss the backend computes itself, exactly, is sent by name.
	l := p.Update.Loss
	if l.Loss == ppo.LossImportanceSampling && l.KLCoef == 0 && l.EntropyCoeff == 0 && !p.Update.Correction.Decoupled && !p.Update.Correction.Active() && slices.Contains(info.SupportedLosses, backend.LossImportanceSampling) {
		p.Update.Builtin = backend.LossImportanceSampling
	}
	return nil
}

// entropyRefusal is what NewPlan (from the backend kind's declaration)
// and CheckBackend (from the opened model) say when the backend returns
// no entropies, so validate-config and train refuse with the same words.
func entropyRefusal(backendName string) error {
	return usererr.Errorf("actor.entropy_coeff: the %s backend does not return per-token entropies (the Tinker API never does), so the entropy bonus cannot be computed; set it to 0", backendName)
}

// Adam is the optimizer setting of training step s of total.
func (p *Plan) Adam(s, total int) backend.AdamParams {
	a := p.Update.Adam
	a.LearningRate = p.Update.LR.At(s, total)
	return a
}

// String prints the plan as `rllm train --dry-run` shows it.
func (p *Plan) String() string {
	var b strings.Builder
	for _, l := range p.Lines() {
		fmt.Fprintf(&b, "%-12s %s\n", l.Key+":", l.Value)
	}
	return b.String()
}

// PlanLine is one line of the plan as --dry-run prints it.
type PlanLine struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Lines is the plan as --dry-run prints it, line by line (-o json prints
// them as an object).
func (p *Plan) Lines() []PlanLine {
	var out []PlanLine
	line := func(k, format string, args ...any) {
		out = append(out, PlanLine{Key: k, Value: fmt.Sprintf(format, args...)})
	}
	line("backend", "%s", p.Backend)
	line("workflow", "%s", p.Workflow)
	perStep := fmt.Sprintf("%d tasks per step (drawn %d)", p.BatchSize, p.DrawSize)
	if a := p.Async; a.Enabled {
		// data.train_batch_size is only the dataloader's batch here.
		perStep = fmt.Sprintf("%s per step (%s of %s, data.train_batch_size %d: the tasks the producer reads at a time)",
			plural(a.GroupsPerStep(), "task group"), plural(a.SyncSteps, "optimizer step"), plural(a.MiniBatch, "group"), p.DrawSize)
	}
	switch sc := p.schedule; {
	case sc == nil:
		steps := plural(p.TotalEpochs, "epoch")
		if p.TotalSteps != nil {
			steps = plural(*p.TotalSteps, "step")
		}
		line("data", "%s, %s, shuffle %t", perStep, steps, p.Shuffle)
	default:
		line("data", "%s from %s, shuffle %t", perStep, plural(sc.Tasks, "training task"), p.Shuffle)
		how, perStep := fmt.Sprintf("%s of %d", plural(p.TotalEpochs, "epoch"), sc.StepsPerEpoch), p.DrawSize
		if p.Async.Enabled {
			perStep = p.Async.GroupsPerStep()
			how = fmt.Sprintf("%s of %s, %d a step", plural(p.TotalEpochs, "epoch"), plural(sc.Tasks, "task"), perStep)
		}
		if p.TotalSteps != nil {
			how = "trainer.total_training_steps"
		}
		line("steps", "%d (%s): %s drawn, %s", sc.Steps, how, plural(sc.Steps*perStep, "task"), plural(sc.Steps*perStep*p.Train.N, "episode"))
		if note := programNote(p.Workflow, sc.Steps*perStep*p.Train.N); note != "" {
			line("program", "%s", note)
		}
	}
	line("rollouts", "%d per task, temperature %g, max %d tokens; validation %d per task at temperature %g",
		p.Train.N, p.Train.Params.Temperature, p.Train.Params.MaxTokens, p.Val.N, p.Val.Params.Temperature)
	if p.Remote.Enabled {
		line("sampling", "inference servers %s, each step's weights published with %s", strings.Join(p.Remote.Endpoints, ", "), p.Remote.Mode)
	}
	line("runner", "%d episodes in flight, each run up to %d times, timeout %s", p.Runner.NParallel, p.Runner.RetryLimit, durationOrNone(p.Runner.EpisodeTimeout))
	var filters []string
	if p.Filters.Rejection {
		filters = append(filters, fmt.Sprintf("rejection sampling (min %d partial)", p.Filters.MinPartial))
	}
	if p.Filters.DropZeroAdvantage {
		filters = append(filters, "drop zero-advantage groups")
	}
	if p.Filters.Compact.Enable {
		filters = append(filters, "compact filtering")
	}
	if p.Filters.DropOverlongPrompts {
		filters = append(filters, "drop tasks with overlong prompts")
	}
	if p.Assemble.OverlongFilter {
		filters = append(filters, "overlong filter")
	}
	if r := p.Reward; r.Overlong {
		filters = append(filters, fmt.Sprintf("DAPO overlong penalty (up to −%g over the last %d of %d tokens)", r.PenaltyFactor, r.Len, r.MaxRespLen))
	}
	if p.Assemble.MaskTruncatedSamples {
		filters = append(filters, "mask truncated")
	}
	if len(filters) == 0 {
		filters = []string{"none"}
	}
	line("filters", "%s", strings.Join(filters, ", "))
	adv := p.Advantage.Estimators.Default
	for role, n := range p.Advantage.Estimators.ByRole {
		adv += fmt.Sprintf(", %s for %s", n, role)
	}
	if p.Advantage.Stepwise != StepwiseOff {
		adv += fmt.Sprintf(", stepwise %s", p.Advantage.Stepwise)
	}
	line("advantages", "%s", adv)
	loss := fmt.Sprintf("%s, %s", p.Update.Loss.Loss, p.Update.Loss.AggMode)
	if p.Update.Loss.KLCoef != 0 {
		loss += fmt.Sprintf(", KL %s × %g", p.Update.Loss.KLType, p.Update.Loss.KLCoef)
	}
	if p.Update.Loss.EntropyCoeff != 0 {
		loss += fmt.Sprintf(", entropy bonus × %g", p.Update.Loss.EntropyCoeff)
	}
	where := "client side (forward, pkg/ppo gradient, cross_entropy weights)"
	if p.Update.Builtin != "" {
		where = "the backend's built-in " + p.Update.Builtin
	} else if p.Update.Loss.Loss == ppo.LossImportanceSampling && p.Update.Loss.KLCoef == 0 && p.Update.Loss.EntropyCoeff == 0 {
		where = "the backend's built-in importance_sampling where it has one, else client side"
	}
	line("loss", "%s, %s", loss, where)
	if p.Reference.Needed {
		ref := "the policy as training starts"
		if p.Reference.Path != "" {
			ref = p.Reference.Path
		}
		if p.Reference.RewardKLCoef != 0 {
			ref += fmt.Sprintf("; in-reward KL %s × %g", p.Reference.RewardKLType, p.Reference.RewardKLCoef)
		}
		line("reference", "%s", ref)
	}
	line("update", "%d task groups per mini-batch, %s, lr %g", p.Update.MiniBatchTasks, plural(p.Update.Epochs, "epoch"), p.Update.LR.Base)
	line("off-policy", "%s", p.Update.Correction)
	if p.Async.Enabled {
		line("async", "%s", p.Async)
	}
	if p.Warmup.Steps > 0 {
		line("warm-up", "%d steps at lr %g%s", p.Warmup.Steps, p.Warmup.LR, p.Warmup.agentNote(p.Workflow))
	}
	line("cadence", "validate every %d, save every %d, keep %s checkpoints", p.Cadence.TestFreq, p.Cadence.SaveFreq, keepString(p.Cadence.MaxCkptToKeep))
	line("output", "%s", p.Dir)
	return out
}

// plural is "1 epoch", "25 epochs".
func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

func durationOrNone(d time.Duration) string {
	if d <= 0 {
		return "none"
	}
	return d.String()
}

func keepString(k *int) string {
	if k == nil {
		return "all"
	}
	return fmt.Sprint(*k)
}

// seededParams seeds training and validation sampling: rollout.seed, or
// trainer.seed when rollout.seed is unset, so that a fixed trainer.seed
// reproduces a run. Each request gets its own seed derived from it, the
// step and the episode (sampler.Seeded), so the samples of a group differ.
func seededParams(p sampler.Params, c *config.Config) sampler.Params {
	if p.Seed == nil {
		seed := int64(c.Trainer.Seed)
		p.Seed = &seed
	}
	return p
}

