package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/dataset"
)

// Checkpoints follow verl's layout: default_local_dir/global_step_N/ with
// the model (weights and optimizer) under model/ and the trainer's own
// state beside it, and latest_checkpointed_iteration.txt naming the
// newest N.
const (
	latestFile     = "latest_checkpointed_iteration.txt"
	stateFile      = "trainer_state.json"
	modelDir       = "model"
	stepDirPrefix  = "global_step_"
	checkpointPerm = 0o755
)

// trainerState is what resuming needs besides the model.
type trainerState struct {
	GlobalStep int                 `json:"global_step"`
	Dataloader dataset.LoaderState `json:"dataloader"`
}

// checkpoint writes global_step_N for the last completed step, through a
// temporary directory renamed into place so that a crash never leaves a
// half checkpoint under the real name, then prunes old ones.
func (t *Trainer) checkpoint(ctx context.Context) (string, error) {
	dir := filepath.Join(t.dir, fmt.Sprintf("%s%d", stepDirPrefix, t.step))
	if t.savedStep == t.step {
		return dir, nil // nothing trained since
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if _, err := t.be.SaveState(ctx, filepath.Join(tmp, modelDir)).Result(ctx); err != nil {
		return "", fmt.Errorf("saving the model to %s: %w", tmp, err)
	}
	st, err := json.MarshalIndent(trainerState{GlobalStep: t.step, Dataloader: t.loader.State()}, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, stateFile), append(st, '\n'), 0o644); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	if err := writeAtomic(filepath.Join(t.dir, latestFile), []byte(strconv.Itoa(t.step)+"\n")); err != nil {
		return "", err
	}
	t.savedStep = t.step
	return dir, t.prune()
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// prune keeps the newest trainer.max_ckpt_to_keep checkpoints.
func (t *Trainer) prune() error {
	keep := t.cfg.Trainer.MaxCkptToKeep
	if keep == nil {
		return nil
	}
	entries, err := os.ReadDir(t.dir)
	if err != nil {
		return err
	}
	var steps []int
	for _, e := range entries {
		if n, ok := stepOfDir(e.Name()); ok && e.IsDir() {
			steps = append(steps, n)
		}
	}
	sort.Ints(steps)
	for len(steps) > *keep {
		if err := os.RemoveAll(filepath.Join(t.dir, fmt.Sprintf("%s%d", stepDirPrefix, steps[0]))); err != nil {
			return err
		}
		steps = steps[1:]
	}
	return nil
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
// trainer.resume_from_path, disable none.
func (t *Trainer) resume(ctx context.Context) (bool, error) {
	var dir string
	switch t.cfg.Trainer.ResumeMode {
	case "disable":
		return false, nil
	case "resume_path":
		dir = *t.cfg.Trainer.ResumeFromPath
	default:
		b, err := os.ReadFile(filepath.Join(t.dir, latestFile))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || n < 0 {
			return false, configErrorf("%s holds %q, not a step number; remove it or set trainer.resume_mode=disable", filepath.Join(t.dir, latestFile), strings.TrimSpace(string(b)))
		}
		dir = filepath.Join(t.dir, fmt.Sprintf("%s%d", stepDirPrefix, n))
	}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, configErrorf("%s is not a training checkpoint (no %s); point trainer.resume_from_path at a global_step_N directory or set trainer.resume_mode=disable", dir, stateFile)
		}
		return false, err
	}
	var st trainerState
	if err := json.Unmarshal(b, &st); err != nil {
		return false, configErrorf("%s: %v; the checkpoint is damaged, resume from another one or set trainer.resume_mode=disable", filepath.Join(dir, stateFile), err)
	}
	if _, err := t.be.LoadState(ctx, filepath.Join(dir, modelDir), true).Result(ctx); err != nil {
		return false, fmt.Errorf("resuming from %s: %w", dir, err)
	}
	if err := t.loader.Restore(st.Dataloader); err != nil {
		return false, fmt.Errorf("resuming from %s: %w", dir, err)
	}
	t.step, t.savedStep = st.GlobalStep, st.GlobalStep
	t.logf("resumed from %s (step %d)", dir, t.step)
	return true, nil
}
