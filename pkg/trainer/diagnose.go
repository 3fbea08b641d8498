package trainer

import (
	"fmt"
	"math"
	"strings"
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

	diagnosisState
}

// diagnosisState is what the diagnosis carries from step to step, saved
// with each checkpoint so a resumed run goes on judging where it left off.
type diagnosisState struct {
	Streak  map[string]int  `json:"streak,omitempty"`
	Warned  map[string]bool `json:"warned,omitempty"`
	BestVal float64         `json:"best_val,omitempty"`
}

func newDiagnosis() *diagnosis {
	return &diagnosis{Patience: 5, EntropyFloor: 0.05, ValDrop: 0.5, diagnosisState: diagnosisState{Streak: map[string]int{}, Warned: map[string]bool{}}}
}

// observe reads one step's metrics and returns the warnings it raises.
func (d *diagnosis) observe(step int, m map[string]float64) []Warning {
	var out []Warning
	check := func(kind string, holds bool, immediate bool, msg string) {
		if !holds {
			d.Streak[kind], d.Warned[kind] = 0, false
			return
		}
		d.Streak[kind]++
		if !d.Warned[kind] && (immediate || d.Streak[kind] >= d.Patience) {
			d.Warned[kind] = true
			out = append(out, Warning{Step: step, Kind: kind, Message: msg})
		}
	}
	partial, hasSolve := m["batch/solve_partial"]
	_, skipped := m["batch/skipped"]
	noSignal := (hasSolve && partial == 0) || skipped
	check(WarnNoSignal, noSignal, false, fmt.Sprintf(
		"no learning signal for %d steps: every group of episodes was solved by all or by none, so every advantage was zero and nothing trained. "+
			"Likely causes: sampling too deterministic (raise rollout.temperature), groups too small (raise rollout.n or data.train_batch_size), "+
			"the task out of reach or already mastered, or replies cut short (backend.local.context, data.max_response_length)", d.Patience))

	grad, hasGrad := m["actor/grad_norm"]
	check(WarnZeroGradient, hasGrad && grad == 0 && !noSignal, false, fmt.Sprintf(
		"the gradient norm was 0 for %d steps: the updates change nothing. "+
			"Likely causes: zero advantages (see rollout.temperature, rollout.n), every token masked by the filters (filters.*, agent.overlong_filter), or actor.optim.lr at 0", d.Patience))

	ent, hasEnt := m["actor/entropy"]
	check(WarnEntropyCollapse, hasEnt && ent < d.EntropyFloor, false, fmt.Sprintf(
		"the policy's entropy stayed below %.2g nats for %d steps: it has collapsed onto fixed replies and explores nothing. "+
			"Likely causes: a learning rate too high (actor.optim.lr), no entropy bonus (actor.entropy_coeff) or KL anchor (actor.use_kl_loss)", d.EntropyFloor, d.Patience))

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
