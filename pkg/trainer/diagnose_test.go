package trainer

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/ppo"
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

// refusedEpisodes are n episodes a server refused on their first turn,
// as pkg/workflow records them.
func refusedEpisodes(n int) []*episode.Episode {
	eps := make([]*episode.Episode, n)
	for i := range eps {
		eps[i] = &episode.Episode{ID: fmt.Sprintf("t:%d", i), TerminationReason: episode.TerminationMaxPromptLength,
			Error: "sampling turn 1: http://127.0.0.1:9/v1/chat/completions answered 400 Bad Request: This model's maximum context length is 128 tokens. However, your request has 140 input tokens."}
	}
	return eps
}

// Most episodes ending the same abnormal way before a reply is named
// once, with the server's message and the keys, before no_signal.
func TestDiagnosisNamesFirstTurnFailures(t *testing.T) {
	d := newDiagnosis()
	var got []Warning
	for step := 1; step <= 12; step++ {
		eps := refusedEpisodes(8)
		eps[0] = &episode.Episode{TerminationReason: episode.TerminationEnvDone, Trajectories: []episode.Trajectory{{Steps: []episode.Step{{ResponseIDs: []int{1}}}}}}
		d.noteEpisodes(phaseRollouts, eps)
		if step%5 == 0 {
			d.noteEpisodes(phaseValidation, refusedEpisodes(4))
		}
		got = append(got, d.observe(step, map[string]float64{"batch/skipped": 1})...)
	}
	if len(got) != 3 || got[0].Kind != WarnFirstTurn || got[0].Step != 1 || got[1].Kind != WarnFirstTurn || got[1].Step != 5 || got[2].Kind != WarnNoSignal {
		t.Fatalf("warnings %+v, want first_turn_failure at step 1, then first_turn_failure of validation and no_signal at 5", got)
	}
	for _, want := range []string{"7 of 8 episodes ended max_prompt_length_exceeded before their first reply", "maximum context length is 128 tokens", "backend.local.context", "--max-model-len", "this step's rollouts"} {
		if !strings.Contains(got[0].Message, want) {
			t.Errorf("warning %q lacks %q", got[0].Message, want)
		}
	}
	if !strings.Contains(got[1].Message, "in validation: 4 of 4") {
		t.Errorf("validation warning %q", got[1].Message)
	}
	// Recovered, then failing again: warned again.
	d.noteEpisodes(phaseRollouts, nil)
	d.observe(13, map[string]float64{})
	d.noteEpisodes(phaseRollouts, refusedEpisodes(2))
	if w := d.observe(14, map[string]float64{}); len(w) != 1 || w[0].Kind != WarnFirstTurn {
		t.Fatalf("warnings %+v after a recovery, want first_turn_failure again", w)
	}
	// A step with nothing noted (no rollouts) changes nothing.
	if w := d.observe(15, map[string]float64{}); len(w) != 0 {
		t.Fatalf("warnings %+v", w)
	}
}

// Low entropy while validation rises is convergence: a default-like run
// whose entropy hovers around the floor as it learns is not warned about
// (it was warned 150 times in 5,000 steps); a run whose reward is flat
// with the same entropy is warned once.
func TestEntropyCollapseOnlyWhenStalled(t *testing.T) {
	run := func(reward func(step int) float64) []Warning {
		d := newDiagnosis()
		var got []Warning
		for step := 1; step <= 5000; step++ {
			ent := 0.04
			if step%7 == 0 {
				ent = 0.06 // hovering about the floor
			}
			m := map[string]float64{"actor/entropy": ent, "critic/score/mean": reward(step), "batch/accuracy": reward(step), "batch/solve_partial": 0.5, "actor/grad_norm": 0.1}
			if step%50 == 0 {
				m["val/pass@1"] = reward(step)
			}
			for _, w := range d.observe(step, m) {
				if w.Kind == WarnEntropyCollapse {
					got = append(got, w)
				}
			}
		}
		return got
	}
	learning := func(step int) float64 {
		return 0.078 + (0.92-0.078)*(1-math.Exp(-float64(step)/800)) + 0.02*math.Sin(float64(step))
	}
	if got := run(learning); len(got) != 0 {
		t.Errorf("a learning run warned %d times (first at step %d)", len(got), got[0].Step)
	}
	flat := func(step int) float64 { return 0.3 + 0.02*math.Sin(float64(step)) }
	if got := run(flat); len(got) != 1 {
		t.Errorf("a stalled run warned %d times, want once", len(got))
	}
}

// The no-signal rule reads the advantages, so partial credit counts: a
// step none of whose groups is partly *solved* (batch/solve_partial 0)
// still trains when rewards differ within a group, as arith's partial
// credit does. The metrics are the pipeline's own (solveStats, GRPO,
// advantageMetrics) over the rewards given.
func TestNoSignalRuleOnPartialCredit(t *testing.T) {
	grpo := AdvantagePlan{Estimators: ppo.RoleEstimators{Default: "grpo"}, Config: ppo.DefaultConfig()}
	tests := []struct {
		name    string
		rewards [][]float64 // per group, one per episode; correct only at 1
		warn    bool
	}{
		{"partial credit, none correct", [][]float64{{0.5, 0.25, 0, 0.5}, {0.1, 0.1, 0.3, 0.1}}, false},
		{"partial credit, one group uniform", [][]float64{{0.5, 0.5, 0.5, 0.5}, {0, 0.75, 0, 0}}, false},
		{"same partial credit in every episode of each group", [][]float64{{0.5, 0.5, 0.5, 0.5}, {0.1, 0.1, 0.1, 0.1}}, true},
		{"solved by all or by none", [][]float64{{1, 1, 1, 1}, {0, 0, 0, 0}}, true},
		{"mixed correctness", [][]float64{{1, 0, 1, 0}, {0, 0, 0, 0}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDiagnosis()
			var got []Warning
			for step := 1; step <= 8; step++ {
				var groups []Group
				for gi, rs := range tt.rewards {
					task := fmt.Sprintf("g%d", gi)
					var ss []Sample
					for i, r := range rs {
						s := smp(fmt.Sprintf("%s:%d", task, i), "t", "", r)
						s.Correct = r == 1
						ss = append(ss, s)
					}
					groups = append(groups, group(task, nil, ss...))
				}
				m := map[string]float64{}
				stats, err := solveStats(groups, &ppo.Workspace{})
				if err != nil {
					t.Fatal(err)
				}
				m["batch/solve_none"], m["batch/solve_all"], m["batch/solve_partial"] = stats.Fractions()
				if err := computeAdvantages(groups, &grpo, &ppo.Workspace{}); err != nil {
					t.Fatal(err)
				}
				merge(m, advantageMetrics(groups))
				got = append(got, d.observe(step, m)...)
			}
			if warned := len(got) > 0; warned != tt.warn {
				t.Fatalf("warnings %+v, want a no_signal warning: %v", got, tt.warn)
			}
			if tt.warn && (len(got) != 1 || got[0].Kind != WarnNoSignal || got[0].Step != 5) {
				t.Fatalf("warnings %+v, want one no_signal at step 5", got)
			}
		})
	}
}
