package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/rllm-org/rllm-go/internal/boundedio"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Checkpoints follow verl's layout: default_local_dir/global_step_N/ with
// the model (weights and optimizer) under model/ and the trainer's own
// state beside it, and latest_checkpointed_iteration.txt naming the
// newest N.
const (
	latestFile    = "latest_checkpointed_iteration.txt"
	stateFile     = "trainer_state.json"
	modelDir      = "model"
	stepDirPrefix = "global_step_"
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
	st := trainerState{GlobalStep: t.step, Dataloader: t.loader.State(), Diagnosis: t.diag.diagnosisState}
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

func stepDir(root string, step int) string {
	return filepath.Join(root, fmt.Sprintf("%s%d", stepDirPrefix, step))
}

// prune keeps the newest trainer.max_ckpt_to_keep checkpoints.
func (t *Trainer) prune() error {
	keep := t.plan.Cadence.MaxCkptToKeep
	if keep == nil {
		return nil
	}
	steps, err := checkpointSteps(t.plan.Dir)
	if err != nil {
		return err
	}
	for len(steps) > *keep {
		t.deleteRemote(stepDir(t.plan.Dir, steps[0]))
		if err := os.RemoveAll(stepDir(t.plan.Dir, steps[0])); err != nil {
			return err
		}
		steps = steps[1:]
	}
	return nil
}

// checkpointSteps lists the steps of the checkpoints under dir, oldest
// first.
func checkpointSteps(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var steps []int
	for _, e := range entries {
		if n, ok := stepOfDir(e.Name()); ok && e.IsDir() {
			steps = append(steps, n)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

func stepOfDir(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, stepDirPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
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
			return false, usererr.Errorf("%s holds %q, not a step number; remove it or set trainer.resume_mode=disable", latest, strings.TrimSpace(string(b)))
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
			return false, usererr.Errorf("%s is not a training checkpoint (no %s); point trainer.resume_from_path at a global_step_N directory or set trainer.resume_mode=disable", dir, stateFile)
		}
		return false, err
	}
	var st trainerState
	if err := json.Unmarshal(b, &st); err != nil {
		return false, usererr.Errorf("%s: %v; the checkpoint is damaged, resume from another one or set trainer.resume_mode=disable", filepath.Join(dir, stateFile), err)
	}
	model := filepath.Join(dir, modelDir)
	if st.ModelPath != "" {
		model = st.ModelPath
	}
	if _, err := t.be.LoadState(ctx, model, true).Result(ctx); err != nil {
		return false, fmt.Errorf("resuming from %s: %w", dir, err)
	}
	if err := t.loader.Restore(st.Dataloader); err != nil {
		return false, fmt.Errorf("resuming from %s: %w", dir, err)
	}
	t.step, t.savedStep = st.GlobalStep, st.GlobalStep
	if st.Diagnosis.Streak != nil && st.Diagnosis.Warned != nil {
		t.diag.diagnosisState = st.Diagnosis
	}
	t.logf("resumed from %s (step %d)", dir, t.step)
	return true, nil
}
