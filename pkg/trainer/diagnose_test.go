package trainer

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiagnosisWarnsOncePerStall(t *testing.T) {
	healthy := map[string]float64{"batch/solve_partial": 0.5, "actor/grad_norm": 0.3, "actor/entropy": 1.2, "actor/pg_loss": 0.1}
	tests := []struct {
		name  string
		bad   map[string]float64
		steps int // steps of bad metrics before the warning
		kind  string
	}{
		{"uniform groups", map[string]float64{"batch/solve_partial": 0}, 5, WarnNoSignal},
		{"skipped steps", map[string]float64{"batch/skipped": 1}, 5, WarnNoSignal},
		{"zero gradient with signal", map[string]float64{"actor/grad_norm": 0}, 5, WarnZeroGradient},
		{"entropy collapse", map[string]float64{"actor/entropy": 0.01}, 5, WarnEntropyCollapse},
		{"NaN loss", map[string]float64{"actor/pg_loss": math.NaN()}, 1, WarnNonFinite},
		{"infinite reward", map[string]float64{"critic/score/mean": math.Inf(1)}, 1, WarnNonFinite},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDiagnosis()
			step := 0
			feed := func(bad bool) []Warning {
				step++
				m := map[string]float64{}
				for k, v := range healthy {
					m[k] = v
				}
				if bad {
					for k, v := range tt.bad {
						m[k] = v
					}
				}
				return d.observe(step, m)
			}
			if w := feed(false); len(w) != 0 {
				t.Fatalf("healthy step warned: %v", w)
			}
			var got []Warning
			for i := 0; i < tt.steps+10; i++ {
				got = append(got, feed(true)...)
			}
			if len(got) != 1 || got[0].Kind != tt.kind || got[0].Step != 1+tt.steps {
				t.Fatalf("warnings %+v, want one %s at step %d", got, tt.kind, 1+tt.steps)
			}
			// Recovery, then the same trouble again: warned again.
			feed(false)
			got = nil
			for i := 0; i < tt.steps; i++ {
				got = append(got, feed(true)...)
			}
			if len(got) != 1 {
				t.Errorf("after recovering, %d warnings for a new stall, want 1", len(got))
			}
		})
	}
}

func TestDiagnosisValidationFallen(t *testing.T) {
	d := newDiagnosis()
	if w := d.observe(10, map[string]float64{"val/pass@1": 0.4}); len(w) != 0 {
		t.Fatal(w)
	}
	if w := d.observe(20, map[string]float64{"val/pass@1": 0.3}); len(w) != 0 {
		t.Fatalf("a small dip warned: %v", w)
	}
	w := d.observe(30, map[string]float64{"val/pass@1": 0.1})
	if len(w) != 1 || w[0].Kind != WarnValidationFallen {
		t.Fatalf("warnings %v", w)
	}
}

// A run whose groups carry no signal says so: greedy sampling makes the
// rollout.n samples of a task identical, so every group is uniform; after
// five such steps one warning goes to the log and metrics.jsonl.
func TestStalledRunWarns(t *testing.T) {
	c := smallConfig(t, "rollout.temperature=0", "trainer.total_training_steps=7", "trainer.logger=[console,jsonl]")
	var log strings.Builder
	tr, err := New(context.Background(), c, Options{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	res, err := tr.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || res.Warnings[0].Kind != WarnNoSignal || res.Warnings[0].Step != 5 {
		t.Fatalf("warnings %+v", res.Warnings)
	}
	if !strings.Contains(log.String(), "warning: step 5: no learning signal") || !strings.Contains(log.String(), "rollout.temperature") {
		t.Errorf("log:\n%s", log.String())
	}
	b, err := os.ReadFile(filepath.Join(c.Trainer.DefaultLocalDir, MetricsFile))
	if err != nil || !strings.Contains(string(b), `"event":"warning","kind":"no_signal"`) {
		t.Errorf("metrics.jsonl lacks the warning event (%v)", err)
	}
}
