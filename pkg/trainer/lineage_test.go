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
