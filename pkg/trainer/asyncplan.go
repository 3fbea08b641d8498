package trainer

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/ppo"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// CorrectionPlan is the off-policy correction of the loss (verl's
// algorithm.rollout_correction; docs/algorithms.md).
type CorrectionPlan struct {
	// Decoupled (bypass_mode=false) runs a forward pass at the start of
	// each step for π_old, the proximal policy PPO's ratio is taken
	// against (decoupled PPO: Hilton et al. 2022, arXiv:2110.00641; AReaL,
	// Fu et al. 2025, arXiv:2505.24298). Off, the sampler's logprobs are
	// π_old (verl's bypass mode).
	Decoupled bool
	// IS and Threshold weight each token's loss by the truncated ratio
	// π_train/π_rollout (ppo.RolloutCorrection), π_train being π_old in
	// decoupled mode and π_θ in bypass mode (with Reinforce only: PPO's
	// ratio is the weight there); BatchNormalize divides them by their
	// batch mean. RS leaves the tokens it rejects out of the loss.
	IS             ppo.RolloutISMode
	Threshold      float64
	BatchNormalize bool
	RS             []ppo.RSCriterion
	// Reinforce is bypass mode's loss_type=reinforce: the policy loss is
	// −A·log π_θ (ppo.LossReinforce) instead of actor.policy_loss.
	Reinforce bool
	// Metrics logs verl's rollout_corr/ metrics: always in decoupled
	// mode, and in bypass mode when bypass_mode is set true or a
	// correction is on (verl's bypass_mode loss computes them each step).
	Metrics bool
}

// Active reports whether the correction changes the loss: weights or a
// rejection mask.
func (c CorrectionPlan) Active() bool { return c.IS != ppo.RolloutISNone || len(c.RS) > 0 }

// ppo is the correction as pkg/ppo takes it.
func (c CorrectionPlan) ppo() ppo.Correction {
	return ppo.Correction{IS: c.IS, Threshold: c.Threshold, BatchNormalize: c.BatchNormalize, RS: c.RS}
}

func (c CorrectionPlan) String() string {
	var s string
	if !c.Decoupled {
		s = "bypass: the sampler's logprobs are PPO's old policy (ratio π_θ/π_rollout)"
		if c.Reinforce {
			s = "bypass with loss_type reinforce: −A·log π_θ"
		}
	} else {
		s = "decoupled PPO: ratio π_θ/π_old, π_old from a forward pass at the start of each step"
	}
	train := "π_old"
	if !c.Decoupled {
		train = "π_θ"
	}
	if c.IS != ppo.RolloutISNone {
		s += fmt.Sprintf("; %s-level importance weights min(%s/π_rollout, %g)", c.IS, train, c.Threshold)
		if c.BatchNormalize {
			s += " normalised to mean 1"
		}
	}
	if len(c.RS) > 0 {
		names := make([]string, len(c.RS))
		for i, r := range c.RS {
			names[i] = r.Option
		}
		s += fmt.Sprintf("; rejection sampling by %s (%s vs π_rollout)", strings.Join(names, ", "), train)
	}
	return s
}

// AsyncPlan is asynchronous training (async_training.*, rLLM's
// rllm.async_training): rollouts run as a producer bounded by Quota task
// groups in flight, drawing tasks one by one from the dataloader (whose
// batches of data.train_batch_size tasks only say how many it reads at a
// time, as in rLLM); the trainer consumes finished groups, steps the
// optimizer every MiniBatch groups and publishes every SyncSteps
// optimizer steps (one training step).
type AsyncPlan struct {
	Enabled   bool
	Staleness float64
	// MaxLag is the most versions a trained group's oldest turn may be
	// behind the weights it trains: ceil(Staleness). Groups beyond it are
	// dropped and counted.
	MaxLag    int
	SyncSteps int
	MiniBatch int
	Partial   bool
	// Quota is int((1 + Staleness) × SyncSteps × MiniBatch), rLLM's (and
	// verl's fully-async) bound on groups in flight.
	Quota int
}

// GroupsPerStep is the task groups one training step consumes.
func (a AsyncPlan) GroupsPerStep() int { return a.SyncSteps * a.MiniBatch }

func (a AsyncPlan) String() string {
	partial := "new model calls wait while weights are published"
	if a.Partial {
		partial = "partial rollouts (episodes in flight continue on new weights)"
	}
	return fmt.Sprintf("%d groups per optimizer step, publish every %d, at most %d groups in flight (staleness %g, groups more than %d versions behind dropped); %s",
		a.MiniBatch, a.SyncSteps, a.Quota, a.Staleness, a.MaxLag, partial)
}

// correctionAndAsync reads algorithm.rollout_correction and
// async_training, refusing what cannot act.
func correctionAndAsync(c *config.Config, p *Plan, refuse func(string, ...any)) (CorrectionPlan, AsyncPlan) {
	rc := c.Algorithm.RolloutCorrection
	bypass := c.EffectiveBypass()
	cp := CorrectionPlan{Decoupled: !bypass, Threshold: rc.RolloutISThreshold, BatchNormalize: rc.RolloutISBatchNormalize,
		Reinforce: rc.LossType == "reinforce"}
	const key = "algorithm.rollout_correction."
	if rc.RolloutIS != nil {
		mode, err := ppo.ParseRolloutIS(*rc.RolloutIS)
		switch {
		case err != nil:
			refuse(key+"rollout_is: unknown level %q; use token, sequence or null", *rc.RolloutIS)
		case mode != ppo.RolloutISNone && bypass && !cp.Reinforce:
			// verl's compute_policy_loss_bypass_mode computes them for its
			// metrics only: applying them would count the ratio twice.
			refuse(key + "rollout_is: in bypass mode with loss_type=ppo_clip, PPO's ratio π_θ/π_rollout already is the importance weight and verl applies no rollout_is weights; set algorithm.rollout_correction.loss_type=reinforce (weights on −A·log π_θ), bypass_mode=false (decoupled PPO, weights π_old/π_rollout) or rollout_is=null")
		default:
			cp.IS = mode
		}
	}
	if !(cp.Threshold >= 1) || math.IsInf(cp.Threshold, 0) {
		refuse(key+"rollout_is_threshold: %g must be a finite number of at least 1", cp.Threshold)
	}
	if cp.BatchNormalize && (rc.RolloutIS == nil || cp.IS == ppo.RolloutISNone) {
		refuse(key + "rollout_is_batch_normalize: normalises the rollout_is weights, and rollout_is is null; set rollout_is=token or sequence, or remove it")
	}
	rs := ""
	if rc.RolloutRS != nil {
		rs = *rc.RolloutRS
	}
	if crit, err := ppo.ParseRolloutRS(rs, rc.RolloutRSThreshold); err != nil {
		refuse("%v", err)
	} else {
		cp.RS = crit
	}
	if (rs == "" || rs == "null") && rc.RolloutRSThreshold != nil && *rc.RolloutRSThreshold != "" && *rc.RolloutRSThreshold != "null" {
		refuse(key + "rollout_rs_threshold: is set, but rollout_rs is null, so nothing is rejected; set rollout_rs (e.g. token_k1) or remove it")
	}
	if cp.Reinforce {
		if !bypass {
			refuse(key + "loss_type: reinforce is the loss of bypass mode, and bypass_mode is false (decoupled PPO runs actor.policy_loss); set bypass_mode=true or loss_type=ppo_clip")
		}
		if l := c.Actor.PolicyLoss; l != "ppo" && l != "vanilla" {
			refuse(key+"loss_type: reinforce replaces the policy loss, so actor.policy_loss=%s would be ignored (as verl ignores it); set actor.policy_loss=ppo or loss_type=ppo_clip", l)
		}
	}
	if len(cp.RS) > 0 && cp.Decoupled {
		// verl rejects before computing advantages, so a token-level
		// estimator whitens over the kept tokens; rllm's π_old comes after
		// the advantages.
		names := append([]string{c.Algorithm.AdvEstimator}, slices.Sorted(maps.Values(c.Algorithm.AdvEstimatorByRole))...)
		for _, n := range names {
			if e, err := ppo.Lookup(n); err == nil && e.Level == ppo.Token {
				refuse(key+"rollout_rs: in decoupled mode verl rejects tokens before the advantages, and %s (a token-level estimator) whitens over the tokens kept, which rllm cannot do (its π_old forward pass follows the advantages); use an outcome estimator (grpo, rloo, ...) or bypass_mode=true", n)
				break
			}
		}
	}
	cp.Metrics = cp.Decoupled || cp.Active() || (rc.BypassMode != nil && *rc.BypassMode)

	a := c.AsyncTraining
	if !a.Enable {
		return cp, AsyncPlan{}
	}
	ap := AsyncPlan{Enabled: true, Staleness: a.StalenessThreshold, SyncSteps: a.TriggerParameterSyncStep, Partial: a.PartialRollout}
	ap.MiniBatch = c.EffectiveMiniBatch()
	if a.MiniBatchSize != nil {
		ap.MiniBatch = *a.MiniBatchSize
	}
	ok := true
	if st := a.StalenessThreshold; !(st >= 0) || math.IsInf(st, 0) {
		refuse("async_training.staleness_threshold: %g must be a finite number ≥ 0 (0: no group sampled on older weights than those it trains)", st)
		ok = false
	}
	if ap.SyncSteps < 1 {
		refuse("async_training.trigger_parameter_sync_step: %d must be at least 1", ap.SyncSteps)
		ok = false
	}
	// An optimizer step takes mini_batch_size groups whatever
	// data.train_batch_size is: in rLLM's unified trainer that is the
	// dataloader's batch, the tasks handed to the producer at a time (it
	// asserts 1: rllm/experimental/unified_trainer.py, _fit_fully_async,
	// at rllm-org/rllm 7982c508), and so it is here.
	if ap.MiniBatch < 1 {
		refuse("async_training.mini_batch_size: %d must be at least 1", ap.MiniBatch)
		ok = false
	}
	if c.Filters.RejectionSample.Enable {
		refuse("filters.rejection_sample.enable: rejection sampling chooses among a step's draw, which asynchronous training does not have (groups arrive one by one); set it to false or async_training.enable=false")
	}
	if c.Trainer.ValOnly {
		refuse("async_training.enable: trainer.val_only trains nothing; set async_training.enable=false")
	}
	if ok {
		ap.MaxLag = int(math.Ceil(ap.Staleness))
		ap.Quota = int((1 + ap.Staleness) * float64(ap.GroupsPerStep()))
		// Each optimizer step is one mini-batch of the update.
		p.Update.MiniBatchTasks = ap.MiniBatch
	}
	return cp, ap
}

// ConcurrentSampler is implemented by a backend that can say whether the
// samplers it publishes keep sampling while it trains and publishes
// again, which asynchronous training needs. A backend that does not
// implement it is taken to: the built-in ones publish snapshots (the
// embedded policy's immutable weights, Tinker's sampler paths), and
// inference servers load a new version while serving (SGLang's
// update_weights_from_disk, vLLM's and SGLang's load_lora_adapter).
type ConcurrentSampler interface {
	SamplesWhileTraining() bool
}

// checkAsyncBackend refuses asynchronous training on a backend that
// cannot sample while it trains.
func (p *Plan) checkAsyncBackend(be any) error {
	if cs, ok := be.(ConcurrentSampler); ok && p.Async.Enabled && !cs.SamplesWhileTraining() {
		return usererr.Errorf("async_training.enable: the %s backend cannot sample while it trains and publishes new weights; set async_training.enable=false", p.Backend)
	}
	return nil
}
