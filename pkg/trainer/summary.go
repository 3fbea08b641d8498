package trainer

import "fmt"

// valRecord is one validation's pass@1 and the step it was taken at.
type valRecord struct {
	passAt1 float64
	step    int
	seen    bool
}

// noteVal records a step's (or the pre-training) validation in res: the
// first one, the last and the best pass@1 of the run.
func (res *Result) noteVal(step int, m map[string]float64) {
	v, ok := m["val/pass@1"]
	if !ok {
		return
	}
	if res.FirstVal == nil {
		res.FirstVal, res.firstValStep = m, step
	}
	if !res.best.seen || v > res.best.passAt1 {
		res.best = valRecord{passAt1: v, step: step, seen: true}
	}
	res.last = valRecord{passAt1: v, step: step, seen: true}
}

// keepBest takes b as the best validation when it beats the one noted
// (a checkpoint's record of the run's best, read on resume).
func (res *Result) keepBest(b valRecord) {
	if b.seen && (!res.best.seen || b.passAt1 > res.best.passAt1 || (b.passAt1 == res.best.passAt1 && b.step < res.best.step)) {
		res.best = b
	}
}

// valSummary is the run's last line: where validation started, where it
// ended, and its best, each with its step.
func (res *Result) valSummary() (string, bool) {
	if !res.last.seen {
		return "", false
	}
	s := fmt.Sprintf("validation pass@1: %.3f at step %d", res.last.passAt1, res.last.step)
	if res.FirstVal != nil && res.firstValStep != res.last.step {
		s = fmt.Sprintf("validation pass@1: %.3f at step %d -> %.3f at step %d", res.FirstVal["val/pass@1"], res.firstValStep, res.last.passAt1, res.last.step)
	}
	s += fmt.Sprintf("; best %.3f at step %d", res.best.passAt1, res.best.step)
	switch {
	case res.BestCheckpoint != "":
		s += " (" + res.BestCheckpoint + ")"
	case res.best.step == 0:
		s += " (before training)"
	}
	return s, true
}

// complete reports a run that has already trained every step it was asked
// for: nothing is trained, and the line says how to train further.
func (t *Trainer) complete(res *Result) *Result {
	res.Steps = t.step
	if t.savedStep == t.step {
		res.Checkpoint = stepDir(t.plan.Dir, t.step)
	}
	t.logf("the run in %s is complete: step %d of %d is trained and checkpointed; raise trainer.total_training_steps (or trainer.total_epochs) to train further", t.plan.Dir, t.step, t.totalSteps)
	return res
}
