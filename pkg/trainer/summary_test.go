package trainer

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// A run that has trained every step says it is complete when run again:
// no step trains, no progress bar starts, and the line says how to go on.
func TestCompleteRunRunAgain(t *testing.T) {
	c := smallConfig(t, "trainer.total_training_steps=1")
	run := func() (*Result, *recProgress, string) {
		var log strings.Builder
		rec := &recProgress{phases: map[string][2]int64{}}
		tr, err := New(context.Background(), c, Options{Progress: rec, Log: &log})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		res, err := tr.Train(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return res, rec, log.String() + strings.Join(rec.lines, "\n")
	}
	run()
	res, rec, log := run()
	if res.Steps != 1 || res.Checkpoint != filepath.Join(c.Trainer.DefaultLocalDir, "global_step_1") {
		t.Errorf("steps %d, checkpoint %q", res.Steps, res.Checkpoint)
	}
	if _, ok := rec.phases["train"]; ok {
		t.Errorf("a complete run started a progress bar: %v", rec.phases)
	}
	if !strings.Contains(log, "is complete: step 1 of 1 is trained and checkpointed; raise trainer.total_training_steps") {
		t.Errorf("log:\n%s", log)
	}
	for _, bad := range []string{"training 0 steps", "done:"} {
		if strings.Contains(log, bad) {
			t.Errorf("log says %q:\n%s", bad, log)
		}
	}
}

// The run keeps the best validation and its step for its last line.
func TestValSummary(t *testing.T) {
	res := &Result{}
	if _, ok := res.valSummary(); ok {
		t.Fatal("a summary without validation")
	}
	for step, v := range []float64{0.078, 0.5, 0.875, 0.812} {
		res.noteVal(step*50, map[string]float64{"val/pass@1": v})
		res.noteVal(step*50+1, map[string]float64{"critic/score/mean": 1}) // steps without validation
	}
	got, _ := res.valSummary()
	if want := "validation pass@1: 0.078 at step 0 -> 0.812 at step 150; best 0.875 at step 100"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if b := res.best; !b.seen || b.passAt1 != 0.875 || b.step != 100 {
		t.Errorf("best %+v", b)
	}
}

// A resumed run's last line starts at the run's first validation, read
// back from metrics.jsonl, not at the first one after the resume.
func TestValSummaryAfterResume(t *testing.T) {
	over := []string{"trainer.val_before_train=true", "trainer.test_freq=1", "trainer.save_freq=1"}
	c := smallConfig(t, append(over, "trainer.total_training_steps=2")...)
	first := mustTrain(t, c)
	three := 3
	c.Trainer.TotalTrainingSteps = &three
	res := mustTrain(t, c)
	if first.firstValStep != 0 || res.firstValStep != 0 || res.FirstVal["val/pass@1"] != first.FirstVal["val/pass@1"] {
		t.Fatalf("first validation after resume: step %d %v, want step 0 %v", res.firstValStep, res.FirstVal, first.FirstVal)
	}
	got, _ := res.valSummary()
	if !strings.HasPrefix(got, "validation pass@1: ") || !strings.Contains(got, "at step 0 -> ") || !strings.Contains(got, "at step 3;") {
		t.Errorf("summary %q, want it from step 0 to step 3", got)
	}
	if res.best.step > 3 || (res.best.passAt1 < first.best.passAt1) {
		t.Errorf("best %+v after resume, before %+v", res.best, first.best)
	}
}

// In JSON mode the last line is a log event whose message reads as the
// text one does: "->", not "-\u003e".
func TestJSONSummaryNotHTMLEscaped(t *testing.T) {
	c := smallConfig(t, "trainer.total_training_steps=1", "trainer.val_before_train=true", "trainer.test_freq=1")
	var log strings.Builder
	tr, err := New(context.Background(), c, Options{Log: &log, JSON: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), `\u003e`) || !strings.Contains(log.String(), `"message":"validation pass@1: `) || !strings.Contains(log.String(), " at step 0 -> ") {
		t.Errorf("log:\n%s", log.String())
	}
}
