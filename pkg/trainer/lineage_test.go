package trainer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/runs"
)

func trainRun(t *testing.T, overrides ...string) (*Trainer, error) {
	t.Helper()
	tr, err := New(context.Background(), smallConfig(t, overrides...), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, err = tr.Train(context.Background())
	return tr, err
}

func stepsOn(t *testing.T, dir string) string {
	t.Helper()
	steps, err := runs.Steps(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, n := range steps {
		s = append(s, stepDir("", n))
	}
	return strings.Join(s, ",")
}

// Resuming from global_step_2 of a run that has steps 4-6 writes
// global_step_3; pruning keeps it and the checkpoint it came from and
// never touches the other lineage (before, it kept the highest steps and
// deleted both, leaving latest pointing at nothing).
func TestPruneKeepsTheLineage(t *testing.T) {
	dir := filepath.ToSlash(t.TempDir())
	if _, err := trainRun(t, "trainer.default_local_dir="+dir, "trainer.total_training_steps=6", "trainer.save_freq=1", "trainer.max_ckpt_to_keep=null"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 3} {
		os.RemoveAll(stepDir(dir, n))
	}
	if got := stepsOn(t, dir); got != "global_step_2,global_step_4,global_step_5,global_step_6" {
		t.Fatalf("before: %s", got)
	}
	if _, err := trainRun(t, "trainer.default_local_dir="+dir, "trainer.total_training_steps=3", "trainer.save_freq=1", "trainer.max_ckpt_to_keep=1",
		"trainer.resume_mode=resume_path", "trainer.resume_from_path="+stepDir(dir, 2)); err != nil {
		t.Fatal(err)
	}
	if got := stepsOn(t, dir); got != "global_step_2,global_step_3,global_step_4,global_step_5,global_step_6" {
		t.Fatalf("after resuming from step 2 and writing step 3: %s", got)
	}
	// The next run resumes from step 3 (latest) and prunes its own
	// lineage only: 4 descends from 3, then 2 goes; 5 and 6 stay.
	tr, err := trainRun(t, "trainer.default_local_dir="+dir, "trainer.total_training_steps=4", "trainer.save_freq=1", "trainer.max_ckpt_to_keep=1")
	if err != nil {
		t.Fatal(err)
	}
	if tr.resumedFrom != stepDir(dir, 3) {
		t.Fatalf("resumed from %q", tr.resumedFrom)
	}
	if got := stepsOn(t, dir); got != "global_step_3,global_step_4,global_step_5,global_step_6" {
		t.Fatalf("after the next run: %s", got)
	}
}

// A plain run keeps its newest max_ckpt_to_keep checkpoints.
func TestPruneLinearRun(t *testing.T) {
	dir := filepath.ToSlash(t.TempDir())
	if _, err := trainRun(t, "trainer.default_local_dir="+dir, "trainer.total_training_steps=4", "trainer.save_freq=1", "trainer.max_ckpt_to_keep=2"); err != nil {
		t.Fatal(err)
	}
	if got := stepsOn(t, dir); got != "global_step_3,global_step_4" {
		t.Fatalf("%s", got)
	}
}

// A truncated newest checkpoint: the error names the newest intact one
// and the exact flags to resume from it.
func TestTruncatedNewestCheckpointNamesIntactOne(t *testing.T) {
	dir := filepath.ToSlash(t.TempDir())
	if _, err := trainRun(t, "trainer.default_local_dir="+dir, "trainer.total_training_steps=3", "trainer.save_freq=1", "trainer.max_ckpt_to_keep=null"); err != nil {
		t.Fatal(err)
	}
	w := filepath.Join(stepDir(dir, 3), modelDir, local.WeightsFile)
	b, err := os.ReadFile(w)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = trainRun(t, "trainer.default_local_dir="+dir, "trainer.total_training_steps=5")
	want := stepDir(dir, 2) + " is intact: resume from it with trainer.resume_mode=resume_path trainer.resume_from_path=" + stepDir(dir, 2)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v\nwant it to contain %q", err, want)
	}
}

// The checkpoint of the best validation is written even off the
// trainer.save_freq cadence, survives trainer.max_ckpt_to_keep, is still
// kept after a resume, and the last line names it. Validation here is a
// stand-in with a fixed pass@1 per step: the best is step 3, which is
// not a save step (save_freq 2) and is older than the one checkpoint
// kept.
func TestBestCheckpointIsKept(t *testing.T) {
	dir := filepath.ToSlash(t.TempDir())
	passAt1 := map[int]float64{1: 0.2, 2: 0.3, 3: 0.9, 4: 0.5, 5: 0.4, 6: 0.1, 7: 0.1, 8: 0.2, 9: 0.95, 10: 0.1}
	run := func(steps string) (*Result, string) {
		t.Helper()
		var log strings.Builder
		tr, err := New(context.Background(), smallConfig(t, "trainer.default_local_dir="+dir, "trainer.total_training_steps="+steps,
			"trainer.test_freq=1", "trainer.save_freq=2", "trainer.max_ckpt_to_keep=1", "trainer.logger=[console]"), Options{Log: &log})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		tr.validator = func(context.Context) (map[string]float64, error) {
			return map[string]float64{"val/pass@1": passAt1[tr.step]}, nil
		}
		res, err := tr.Train(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return res, log.String()
	}
	res, log := run("6")
	best := stepDir(dir, 3)
	if got := stepsOn(t, dir); got != "global_step_3,global_step_6" {
		t.Fatalf("checkpoints %s, want the best (3) and the newest (6)", got)
	}
	if res.BestCheckpoint != best || !strings.Contains(log, "best 0.900 at step 3 ("+best+")") {
		t.Fatalf("best checkpoint %q; log:\n%s", res.BestCheckpoint, log)
	}
	// Resumed (metrics.jsonl is off: the best comes from the checkpoint's
	// state), the run goes on and step 3 is still kept.
	run("6") // complete: nothing trains, nothing is pruned
	if got := stepsOn(t, dir); got != "global_step_3,global_step_6" {
		t.Fatalf("after a complete run: %s", got)
	}
	// Resumed, 3 is still the best and still kept (metrics.jsonl is off:
	// the best comes from the checkpoint's state); 6 stays as the
	// checkpoint this run resumed from (prune never removes that one).
	res, log = run("8")
	if got := stepsOn(t, dir); got != "global_step_3,global_step_6,global_step_8" {
		t.Fatalf("after resuming: %s, want 3, 6 and 8", got)
	}
	if res.BestCheckpoint != best || !strings.Contains(log, "best 0.900 at step 3 ("+best+")") {
		t.Fatalf("after resuming, best checkpoint %q; log:\n%s", res.BestCheckpoint, log)
	}
	// A better validation at 9: 3 goes.
	res, log = run("10")
	if got := stepsOn(t, dir); got != "global_step_8,global_step_9,global_step_10" {
		t.Fatalf("after a new best at 9: %s, want 8 (resumed from), 9 and 10", got)
	}
	if want := "best 0.950 at step 9 (" + stepDir(dir, 9) + ")"; res.BestCheckpoint != stepDir(dir, 9) || !strings.Contains(log, want) {
		t.Fatalf("best checkpoint %q; log lacks %q:\n%s", res.BestCheckpoint, want, log)
	}
}
