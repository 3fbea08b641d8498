// Package runs knows the layout of a training run directory, verl's:
//
//	RUN_DIR/                               trainer.default_local_dir
//	  latest_checkpointed_iteration.txt    the newest N
//	  metrics.jsonl
//	  global_step_N/
//	    trainer_state.json
//	    model/                             the model (weights, optimizer, manifest)
//
// and resolves the directory a user points at (the run, a global_step_N,
// or the model directory itself) to the model directory a backend loads.
// It imports nothing of ours but usererr, so commands can use it without
// reaching into the trainer.
package runs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Names in a run directory.
const (
	LatestFile    = "latest_checkpointed_iteration.txt"
	StateFile     = "trainer_state.json"
	ModelDir      = "model"
	StepDirPrefix = "global_step_"
	// ModelMarker is the file that makes a directory a model checkpoint
	// (the local backend's manifest).
	ModelMarker = "manifest.json"
	// MetricsFile is the run's one JSON object a step; ConfigFile the
	// configuration it runs with (RunConfig), for rllm view.
	MetricsFile = "metrics.jsonl"
	ConfigFile  = "config.json"
)

// RunConfig is what ConfigFile holds: the resolved configuration and the
// steps the run is to train.
type RunConfig struct {
	TotalSteps int `json:"total_steps"`
	Config     any `json:"config"`
}

// StepDir is the name of step n's checkpoint directory.
func StepDir(n int) string { return StepDirPrefix + strconv.Itoa(n) }

// StepOf parses a global_step_N name.
func StepOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, StepDirPrefix)
	if !ok || rest == "" || strings.TrimLeft(rest, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil
}

// Latest returns the newest checkpoint of a run directory: the step
// latest_checkpointed_iteration.txt names, or, when that file is missing
// (a run killed before its first pointer write), the highest
// global_step_N that holds a model. ok is false when the run has none.
func Latest(runDir string) (step int, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(runDir, LatestFile))
	switch {
	case err == nil:
		s := strings.TrimSpace(string(b))
		n, perr := strconv.Atoi(s)
		if perr != nil || n < 0 {
			return 0, false, usererr.Errorf("%s holds %q, not a step number; write the newest global_step_N's N into it or remove it", filepath.Join(runDir, LatestFile), s)
		}
		return n, true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return 0, false, err
	}
	all, err := Steps(runDir)
	if err != nil {
		return 0, false, err
	}
	for i := len(all) - 1; i >= 0; i-- {
		if isModel(filepath.Join(runDir, StepDir(all[i]), ModelDir)) {
			return all[i], true, nil
		}
	}
	return 0, false, nil
}

// Steps lists the N of a run directory's global_step_N directories,
// oldest first.
func Steps(runDir string) ([]int, error) {
	entries, err := os.ReadDir(runDir)
	if err != nil {
		return nil, err
	}
	var steps []int
	for _, e := range entries {
		if n, ok := StepOf(e.Name()); ok && e.IsDir() {
			steps = append(steps, n)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

func isModel(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, ModelMarker))
	return err == nil && st.Mode().IsRegular()
}

// ResolveWeights turns what a user gave for weights (named by what, e.g.
// "--weights") into the model directory to load: path itself when it
// holds a model, path/model for a global_step_N directory, and the newest
// checkpoint's model for a run directory. Anything else is a user error
// that says which of the three to give.
func ResolveWeights(what, path string) (string, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", usererr.Errorf("%s %s does not exist; give a run directory (trainer.default_local_dir), one of its global_step_N directories or a model directory", what, path)
	}
	if err != nil {
		return "", usererr.Errorf("%s %s: %v", what, path, err)
	}
	if !st.IsDir() {
		return "", usererr.Errorf("%s %s is a file; give a run directory (trainer.default_local_dir), one of its global_step_N directories or a model directory", what, path)
	}
	if isModel(path) {
		return path, nil
	}
	if m := filepath.Join(path, ModelDir); isModel(m) {
		return m, nil
	}
	n, ok, err := Latest(path)
	if err != nil {
		return "", err
	}
	if ok {
		m := filepath.Join(path, StepDir(n), ModelDir)
		if !isModel(m) {
			return "", usererr.Errorf("%s %s: its newest checkpoint %s has no model (%s missing); point %s at an older global_step_N directory", what, path, filepath.Join(path, StepDir(n)), ModelMarker, what)
		}
		return m, nil
	}
	return "", usererr.Errorf("%s %s holds no checkpoint: no %s, no %s/%s and no global_step_N; give a run directory (trainer.default_local_dir), one of its global_step_N directories or a model directory", what, path, ModelMarker, ModelDir, ModelMarker)
}

// Describe names a resolved model directory relative to what was asked,
// for a log line: "run/global_step_20/model (step 20 of run)".
func Describe(asked, resolved string) string {
	if filepath.Clean(asked) == filepath.Clean(resolved) {
		return resolved
	}
	step := filepath.Base(filepath.Dir(resolved))
	if n, ok := StepOf(step); ok {
		return fmt.Sprintf("%s (step %d)", resolved, n)
	}
	return resolved
}
