package trainer

import (
	"fmt"
	"math"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// Warning is something the run should tell its user: learning has stalled
// or collapsed, with the likely causes and the keys that move them.
type Warning struct {
	Step    int    `json:"step"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Warning kinds.
const (
	WarnNoSignal         = "no_signal"
	WarnZeroGradient     = "zero_gradient"
	WarnEntropyCollapse  = "entropy_collapse"
	WarnNonFinite        = "non_finite"
	WarnValidationFallen = "validation_fallen"
	// WarnFirstTurn: most episodes of a step (or a validation) ended the
	// same abnormal way before their first reply.
	WarnFirstTurn = "first_turn_failure"
)

// diagnosis watches each step's metrics for the ways a run stops learning
// and says so once per episode of trouble (again only after the run has
// recovered), so a stalled run is never silent.
type diagnosis struct {
	// Patience is how many consecutive steps a condition must hold.
	Patience int
	// EntropyFloor is the mean token entropy (nats) below which the policy
	// counts as collapsed.
	EntropyFloor float64
	// ValDrop is the fraction of the best validation pass@1 below which a
	// validation counts as fallen.
	ValDrop float64
	// Window is the span, in steps, of the reward's moving average.
	Window int
	// Stall is how many steps without a new best reward or validation
	// make a flat run.
	Stall int
	// Solved is the accuracy (batch/accuracy or val/pass@1) at which a
	// task counts as solved: low entropy there is convergence.
	Solved float64

	// endings are the first-turn endings of the rollouts noted since the
	// last observe, by phase.
	endings map[string]*rollout.FirstTurnEndings

	diagnosisState
}

// diagnosisState is what the diagnosis carries from step to step, saved
// with each checkpoint so a resumed run goes on judging where it left off.
type diagnosisState struct {
	Streak  map[string]int  `json:"streak,omitempty"`
	Warned  map[string]bool `json:"warned,omitempty"`
	BestVal float64         `json:"best_val,omitempty"`
	// The smoothed reward and accuracy, the best smoothed reward and the
	// steps of the best reward and validation, the last validation.
	RewardEMA   float64 `json:"reward_ema,omitempty"`
	AccuracyEMA float64 `json:"accuracy_ema,omitempty"`
	BestReward  float64 `json:"best_reward,omitempty"`
	RewardSteps int     `json:"reward_steps,omitempty"`
	BestStep    int     `json:"best_step,omitempty"`
	BestValStep int     `json:"best_val_step,omitempty"`
	LastVal     float64 `json:"last_val,omitempty"`
}

func newDiagnosis() *diagnosis {
	return &diagnosis{Patience: 5, EntropyFloor: 0.05, ValDrop: 0.5, Window: 10, Stall: 100, Solved: 0.8,
		diagnosisState: diagnosisState{Streak: map[string]int{}, Warned: map[string]bool{}}}
}

// Phases of rollouts whose endings the diagnosis reads.
const (
	phaseRollouts   = "rollouts"
	phaseValidation = "validation"
)

// noteEpisodes counts a phase's episodes for the next observe: whether
// most of them ended the same abnormal way before their first reply.
func (d *diagnosis) noteEpisodes(phase string, eps []*episode.Episode) {
	if d.endings == nil {
		d.endings = map[string]*rollout.FirstTurnEndings{}
	}
	f := d.endings[phase]
	if f == nil {
		f = &rollout.FirstTurnEndings{}
		d.endings[phase] = f
	}
	for _, ep := range eps {
		f.Add(ep)
	}
}

// improving reports whether the run is still getting better, or has not
// run long enough to tell: the smoothed reward or the validation set a
// new best (by more than noise) within the last Stall steps, or the task
// is solved (smoothed accuracy or the last validation at Solved or more).
func (d *diagnosis) improving(step int) bool {
	switch {
	case d.RewardSteps > 0 && step-d.BestStep < d.Stall:
		return true
	case d.LastVal >= d.Solved || (d.RewardSteps > 0 && d.AccuracyEMA >= d.Solved):
		return true
	}
	return d.BestValStep > 0 && step-d.BestValStep < d.Stall
}

// track follows the smoothed reward and accuracy (an exponential moving
// average over about Window steps) and the best validation.
func (d *diagnosis) track(step int, m map[string]float64) {
	const noise = 0.01
	alpha := 2 / (float64(d.Window) + 1)
	if r, ok := m["critic/score/mean"]; ok && !math.IsNaN(r) && !math.IsInf(r, 0) {
		a, _ := m["batch/accuracy"]
		if d.RewardSteps == 0 {
			d.RewardEMA, d.AccuracyEMA, d.BestReward, d.BestStep = r, a, r, step
		}
		d.RewardEMA += alpha * (r - d.RewardEMA)
		d.AccuracyEMA += alpha * (a - d.AccuracyEMA)
		d.RewardSteps++
		if d.RewardEMA > d.BestReward+noise {
			d.BestReward, d.BestStep = d.RewardEMA, step
		}
	}
	if v, ok := m["val/pass@1"]; ok {
		if d.BestValStep == 0 || v > d.BestVal+noise {
			d.BestValStep = step
		}
		d.LastVal = v
	}
}

// zeroAdvantage is the largest |advantage| that counts as none: a group
// of equal rewards gives exactly zero up to rounding (the group mean of
// equal floats can differ from them in the last bit).
const zeroAdvantage = 1e-6

// noLearningSignal reports whether a step trained on nothing: it was
// skipped (all of it), or the advantages of its trained tokens are all zero. It reads
// the advantages, not the solve fractions: with partial credit (arith,
// F1) a group none of whose episodes is correct still has a spread of
// rewards and so advantages that train. Only a step whose metrics carry
// no advantages (every token masked) falls back to the solve fractions.
func noLearningSignal(m map[string]float64) bool {
	if skipped := m["batch/skipped"]; skipped >= 1 {
		return true // every optimizer step of it (an async step may skip some)
	}
	lo, hasLo := m["critic/advantages/min"]
	hi, hasHi := m["critic/advantages/max"]
	if hasLo && hasHi {
		return math.Max(math.Abs(lo), math.Abs(hi)) <= zeroAdvantage
	}
	partial, hasSolve := m["batch/solve_partial"]
	return hasSolve && partial == 0
}

// observe reads one step's metrics and returns the warnings it raises.
func (d *diagnosis) observe(step int, m map[string]float64) []Warning {
	var out []Warning
	checkKey := func(key, kind string, holds bool, immediate bool, msg string) {
		if !holds {
			d.Streak[key], d.Warned[key] = 0, false
			return
		}
		d.Streak[key]++
		if !d.Warned[key] && (immediate || d.Streak[key] >= d.Patience) {
			d.Warned[key] = true
			out = append(out, Warning{Step: step, Kind: kind, Message: msg})
		}
	}
	check := func(kind string, holds bool, immediate bool, msg string) { checkKey(kind, kind, holds, immediate, msg) }

	// First: most episodes ending the same abnormal way before any reply
	// is the cause of whatever follows (no signal, zero gradient).
	for _, phase := range []string{phaseRollouts, phaseValidation} {
		f, noted := d.endings[phase]
		if !noted {
			continue // no such rollouts this step: the state stands
		}
		fail, holds := f.Dominant()
		where := "this step's rollouts"
		if phase == phaseValidation {
			where = "validation"
		}
		checkKey(WarnFirstTurn+"/"+phase, WarnFirstTurn, holds, true, "in "+where+": "+fail.String())
	}
	d.endings = nil
	d.track(step, m) // before the validation check below updates BestVal

	noSignal := noLearningSignal(m)
	check(WarnNoSignal, noSignal, false, fmt.Sprintf(
		"no learning signal for %d steps: within every group of episodes the rewards were equal (solved by all or by none, or the same partial credit), so every advantage was zero and nothing trained. "+
			"Likely causes: sampling too deterministic (raise rollout.temperature), groups too small (raise rollout.n or data.train_batch_size), "+
			"the task out of reach or already mastered, or replies cut short (backend.local.context, data.max_response_length)", d.Patience))

	grad, hasGrad := m["actor/grad_norm"]
	check(WarnZeroGradient, hasGrad && grad == 0 && !noSignal, false, fmt.Sprintf(
		"the gradient norm was 0 for %d steps: the updates change nothing. "+
			"Likely causes: zero advantages (see rollout.temperature, rollout.n), every token masked by the filters (filters.*, agent.overlong_filter), or actor.optim.lr at 0", d.Patience))

	// Low entropy while the reward or validation still rises, or on a
	// solved task, is convergence; a collapse is low entropy with a flat
	// or falling reward. Once warned, only a clear recovery (twice the
	// floor) re-arms the warning, so entropy hovering at the floor warns
	// once, not every few steps.
	if ent, hasEnt := m["actor/entropy"]; hasEnt {
		low := ent < d.EntropyFloor
		switch {
		case low && !d.improving(step):
			check(WarnEntropyCollapse, true, false, fmt.Sprintf(
				"the policy's entropy stayed below %.2g nats for %d steps while the reward stopped improving: it has collapsed onto fixed replies and explores nothing. "+
					"Likely causes: a learning rate too high (actor.optim.lr), no entropy bonus (actor.entropy_coeff) or KL anchor (actor.use_kl_loss)", d.EntropyFloor, d.Patience))
		case low:
			d.Streak[WarnEntropyCollapse] = 0 // converging: not a stall, but not a recovery
		case ent >= 2*d.EntropyFloor:
			check(WarnEntropyCollapse, false, false, "")
		}
	}

	var bad []string
	for _, k := range []string{"actor/pg_loss", "actor/grad_norm", "critic/score/mean", "critic/rewards/mean", "actor/entropy", "actor/kl_loss"} {
		if v, ok := m[k]; ok && (math.IsNaN(v) || math.IsInf(v, 0)) {
			bad = append(bad, k)
		}
	}
	check(WarnNonFinite, len(bad) > 0, true, fmt.Sprintf(
		"%s went NaN or infinite: the weights may be ruined. Likely causes: a learning rate too high (actor.optim.lr), no gradient clipping (actor.optim.grad_clip), or a reward function returning NaN",
		strings.Join(bad, ", ")))

	if v, ok := m["val/pass@1"]; ok {
		fallen := d.BestVal >= 0.1 && v < d.ValDrop*d.BestVal
		check(WarnValidationFallen, fallen, true, fmt.Sprintf(
			"validation pass@1 fell to %.3f, below half its best of %.3f: the policy is getting worse. "+
				"Likely causes: a learning rate too high (actor.optim.lr), too many updates per batch (actor.ppo_epochs, actor.ppo_mini_batch_size), entropy collapse", v, d.BestVal))
		d.BestVal = math.Max(d.BestVal, v)
	}
	return out
}
