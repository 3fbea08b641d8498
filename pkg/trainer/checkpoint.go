package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/runs"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Checkpoints follow verl's layout (pkg/runs): default_local_dir/global_step_N/
// with the model (weights and optimizer) under model/ and the trainer's
// own state beside it, and latest_checkpointed_iteration.txt naming the
// newest N.
const (
	latestFile = runs.LatestFile
	stateFile  = runs.StateFile
	modelDir   = runs.ModelDir
)

// trainerState is what resuming needs besides the model.
type trainerState struct {
	GlobalStep int                 `json:"global_step"`
	Dataloader dataset.LoaderState `json:"dataloader"`
	// ModelPath is where the backend saved the model when it is not the
	// model/ directory beside this file (a remote backend's tinker://
	// path).
	ModelPath string `json:"model_path,omitempty"`
	// Diagnosis is the stall watcher's state.
	Diagnosis diagnosisState `json:"diagnosis"`
	// ParentStep is the step of the checkpoint in the same directory this
	// one descends from (the previous one of the run, or the one it
	// resumed from); -1 when none. Absent (nil) in checkpoints written
	// before lineages were kept: their parent is taken to be the next
	// older step.
	ParentStep *int `json:"parent_step,omitempty"`
	// BestValidation is the run's best validation so far, whose
	// checkpoint pruning keeps.
	BestValidation *bestValidation `json:"best_validation,omitempty"`
}

// bestValidation is a validation's pass@1 and step, as a checkpoint
// records the run's best.
type bestValidation struct {
	Step    int     `json:"step"`
	PassAt1 float64 `json:"pass_at_1"`
}

// checkpoint writes global_step_N for the last completed step through a
// temporary directory renamed into place (so a crash never leaves a half
// checkpoint under the real name), points latest_checkpointed_iteration.txt
// at it and prunes old ones.
func (t *Trainer) checkpoint(ctx context.Context) (string, error) {
	dir := stepDir(t.plan.Dir, t.step)
	if t.savedStep == t.step {
		return dir, nil // nothing trained since
	}
	d, err := atomicfile.CreateDir(dir)
	if err != nil {
		return "", err
	}
	defer d.Abort()
	local := filepath.Join(d.TempPath(), modelDir)
	saved, err := t.be.SaveState(ctx, local).Result(ctx)
	if err != nil {
		return "", fmt.Errorf("saving the model for step %d: %w", t.step, err)
	}
	parent := t.parentStep()
	st := trainerState{GlobalStep: t.step, Dataloader: t.loader.State(), Diagnosis: t.diag.diagnosisState, ParentStep: &parent}
	if t.best.seen {
		st.BestValidation = &bestValidation{Step: t.best.step, PassAt1: t.best.passAt1}
	}
	if saved != local {
		st.ModelPath = saved
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(d.TempPath(), stateFile), append(b, '\n'), atomicfile.FileMode); err != nil {
		return "", err
	}
	if err := d.Commit(); err != nil {
		return "", err
	}
	if err := atomicfile.WriteFile(filepath.Join(t.plan.Dir, latestFile), []byte(strconv.Itoa(t.step)+"\n")); err != nil {
		return "", err
	}
	t.savedStep = t.step
	return dir, t.prune()
}

// intactAdvice names the newest checkpoint of the run's directory other
// than bad that loads (its trainer state reads and the backend loads its
// model) and the exact flags to resume from it.
func (t *Trainer) intactAdvice(ctx context.Context, bad string) string {
	steps, _ := runs.Steps(t.plan.Dir)
	for i := len(steps) - 1; i >= 0; i-- {
		dir := stepDir(t.plan.Dir, steps[i])
		if sameDir(dir, bad) {
			continue
		}
		st, err := readState(dir)
		if err != nil {
			continue
		}
		model := filepath.Join(dir, modelDir)
		if st.ModelPath != "" {
			model = st.ModelPath
		}
		if _, err := t.be.LoadState(ctx, model, true).Result(ctx); err != nil {
			continue
		}
		return fmt.Sprintf("%s is intact: resume from it with trainer.resume_mode=resume_path trainer.resume_from_path=%s, or start over in another trainer.default_local_dir", dir, dir)
	}
	return "no other checkpoint in " + t.plan.Dir + " is intact: start over in another trainer.default_local_dir (or remove this one)"
}

func stepDir(root string, step int) string {
	return filepath.Join(root, runs.StepDir(step))
}

// parentStep is the step of the checkpoint in this run's directory the
// next checkpoint descends from: the newest this run wrote or resumed
// from; -1 when there is none (a fresh run, or one resumed from another
// directory that has not checkpointed yet).
func (t *Trainer) parentStep() int {
	if t.savedStep < 0 {
		return -1
	}
	if t.resumedFrom != "" && t.savedStep == t.resumedStep() && !sameDir(t.resumedFrom, stepDir(t.plan.Dir, t.savedStep)) {
		return -1
	}
	return t.savedStep
}

// resumedStep is the step of resumedFrom (-1 when none).
func (t *Trainer) resumedStep() int {
	if n, ok := runs.StepOf(filepath.Base(t.resumedFrom)); ok && t.resumedFrom != "" {
		return n
	}
	return -1
}

func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

func sameDir(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// prune keeps trainer.max_ckpt_to_keep checkpoints of the lineage of the
// one just written (it, its parent, its parent's parent...) and removes
// older ones of that lineage only: a checkpoint of another lineage (steps
// of an earlier run that this one, resumed from an older step, branched
// off) is never removed, nor is the checkpoint just written, the one
// this run resumed from or the one of the best validation.
func (t *Trainer) prune() error {
	keep := t.plan.Cadence.MaxCkptToKeep
	if keep == nil {
		t.formerBest = nil
		return nil
	}
	lineage, err := checkpointLineage(t.plan.Dir, t.step)
	if err != nil {
		return err
	}
	kept := map[int]bool{t.step: true}
	if t.best.seen {
		kept[t.best.step] = true
	}
	var remove []int
	for i, step := range lineage {
		if i < max(*keep, 1) {
			kept[step] = true
		} else {
			remove = append(remove, step)
		}
	}
	// A former best is no longer protected; the lineage may not reach
	// it (the checkpoint after it was pruned while it was the best).
	remove = append(remove, t.formerBest...)
	t.formerBest = nil
	for _, step := range remove {
		dir := stepDir(t.plan.Dir, step)
		if kept[step] || (t.resumedFrom != "" && sameDir(dir, t.resumedFrom)) || !dirExists(dir) {
			continue
		}
		t.deleteRemote(dir)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	return nil
}

// checkpointLineage lists the steps of the checkpoint step of dir and its
// ancestors, newest first.
func checkpointLineage(dir string, step int) ([]int, error) {
	steps, err := runs.Steps(dir)
	if err != nil {
		return nil, err
	}
	var out []int
	seen := map[int]bool{}
	for step >= 0 && !seen[step] {
		if _, err := os.Stat(stepDir(dir, step)); err != nil {
			break
		}
		seen[step] = true
		out = append(out, step)
		parent := -1
		st, err := readState(stepDir(dir, step))
		switch {
		case err == nil && st.ParentStep != nil:
			parent = *st.ParentStep
		case err == nil || errors.Is(err, fs.ErrNotExist):
			// Written before lineages were kept: the next older step.
			for _, s := range steps {
				if s < step {
					parent = s
				}
			}
		default:
			// A damaged state ends the lineage: keep what is older.
		}
		if parent >= step {
			break // a lineage only goes back in steps
		}
		step = parent
	}
	return out, nil
}

// readState reads a checkpoint's trainer state.
func readState(dir string) (trainerState, error) {
	var st trainerState
	b, err := boundedio.ReadFile(context.Background(), filepath.Join(dir, stateFile), 16<<20)
	if err != nil {
		return st, err
	}
	err = json.Unmarshal(b, &st)
	return st, err
}

// resume restores the model, the optimizer, the step and the dataloader
// from a checkpoint, as trainer.resume_mode says: auto takes the newest
// in default_local_dir if there is one, resume_path the one named by
// trainer.resume_from_path, disable none. Temporary files a killed run
// left behind are removed first.
func (t *Trainer) resume(ctx context.Context) (bool, error) {
	if _, err := atomicfile.CleanTemp(t.plan.Dir); err != nil {
		return false, err
	}
	var dir string
	switch t.plan.Cadence.ResumeMode {
	case "disable":
		return false, nil
	case "resume_path":
		dir = t.plan.Cadence.ResumeFrom
	default:
		latest := filepath.Join(t.plan.Dir, latestFile)
		b, err := boundedio.ReadFile(ctx, latest, 64)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || n < 0 {
			return false, usererr.Errorf("%s holds %q, not a step number; %s", latest, strings.TrimSpace(string(b)), t.intactAdvice(ctx, ""))
		}
		dir = stepDir(t.plan.Dir, n)
	}
	if t.plan.Cadence.ResumeMode != "resume_path" {
		note, err := checkResume(t.plan.Dir, t.plan.Identity)
		if err != nil {
			return false, err
		}
		if note != "" {
			t.logf("%s", note)
		}
	}
	b, err := boundedio.ReadFile(ctx, filepath.Join(dir, stateFile), 16<<20)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, usererr.Errorf("%s is not a training checkpoint (no %s); %s", dir, stateFile, t.intactAdvice(ctx, dir))
		}
		return false, err
	}
	var st trainerState
	if err := json.Unmarshal(b, &st); err != nil {
		return false, usererr.Errorf("%s: %v; the checkpoint is damaged; %s", filepath.Join(dir, stateFile), err, t.intactAdvice(ctx, dir))
	}
	model := filepath.Join(dir, modelDir)
	if st.ModelPath != "" {
		model = st.ModelPath
	}
	if _, err := t.be.LoadState(ctx, model, true).Result(ctx); err != nil {
		if ctx.Err() != nil {
			return false, err
		}
		return false, &usererr.Error{Msg: fmt.Sprintf("resuming from %s: %v; %s", dir, err, t.intactAdvice(ctx, dir)), Err: err}
	}
	t.resumedFrom = dir
	if err := t.loader.Restore(st.Dataloader); err != nil {
		return false, fmt.Errorf("resuming from %s: %w", dir, err)
	}
	t.step, t.savedStep = st.GlobalStep, st.GlobalStep
	if st.Diagnosis.Streak != nil && st.Diagnosis.Warned != nil {
		t.diag.diagnosisState = st.Diagnosis
	}
	if b := st.BestValidation; b != nil {
		t.best = valRecord{passAt1: b.PassAt1, step: b.Step, seen: true}
	}
	t.logf("resumed from %s (step %d)", dir, t.step)
	return true, nil
}
