package view

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/internal/jsonline"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/episodestore"
	"github.com/rllm-org/rllm-go/pkg/runs"
)

// fixtureRun writes a run directory as the trainer writes one: config,
// metrics (with a NaN and an Inf), checkpoint pointer and each step's
// episodes; episode i of a step has reward (i%4)/3, episodes 3 mod 8
// are truncated, and every response token after the second of an odd
// episode is masked.
func fixtureRun(t testing.TB, dir string, steps, perStep int, lr float64) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	cfg, err := config.FromOverrides([]string{fmt.Sprintf("actor.optim.lr=%g", lr), "workflow.args.api_key=sk-secret", "trainer.default_local_dir=" + filepath.ToSlash(dir)})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(runs.RunConfig{TotalSteps: steps, Config: cfg})
	os.WriteFile(filepath.Join(dir, runs.ConfigFile), b, 0o644)
	var m strings.Builder
	for s := 1; s <= steps; s++ {
		x := float64(s)
		score := 0.15 + (0.55+100*lr)*(1-math.Exp(-x/15)) + 0.06*math.Sin(x*1.7)*math.Cos(x*0.3)
		row := map[string]any{"step": s, "critic/score/mean": score, "actor/pg_loss": -0.02 + 0.03*math.Sin(x*0.9)*math.Exp(-x/30),
			"actor/entropy": 1.2*math.Exp(-x/40) + 0.05*math.Cos(x*1.3), "response_length/mean": 40 + 20*math.Exp(-x/20) + 3*math.Sin(x),
			"actor/grad_norm": 0.8 + 0.3*math.Cos(x*0.7), "timing_s/step": 0.5 + 0.05*math.Sin(x*2.1), "training/global_step": s}
		if s == 2 {
			row["actor/grad_norm"] = nil // NaN as the trainer writes it
		}
		if s%2 == 0 {
			row["val/pass@1"] = score - 0.1
		}
		line, _ := jsonline.Marshal(row)
		m.Write(line)
	}
	m.WriteString(`{"step": 99, "critic/score/mean": 0.`) // a line a kill cut
	os.WriteFile(filepath.Join(dir, runs.MetricsFile), []byte(m.String()), 0o644)
	os.WriteFile(filepath.Join(dir, runs.LatestFile), []byte(fmt.Sprint(steps)), 0o644)
	os.MkdirAll(filepath.Join(dir, runs.StepDir(steps)), 0o755)
	for s := 1; s <= steps; s++ {
		writeFixtureStep(t, episodestore.PhaseDir(dir, episodestore.PhaseTrain), s, perStep)
	}
}

func fixtureRecord(step, i int) *episodestore.Record {
	reward := float64(i%4) / 3
	resp := []int{100 + i%7, 101, 102, 103, 104}
	mask := []int8{1, 1, 1, 1, 1}
	if i%2 == 1 {
		mask = []int8{1, 1, 0, 0, 1}
	}
	term := episode.TerminationEnvDone
	if i%8 == 3 {
		term = episode.TerminationMaxResponseLength
	}
	task := fmt.Sprintf("arith-%d", i/4)
	ep := episode.Episode{ID: episode.EpisodeID(task, i%4), Task: episode.Task{"question": "2+2=", "data_source": []string{"arith", "gsm8k"}[i%2]},
		TerminationReason: term, IsCorrect: reward == 1, Metrics: map[string]float64{"timing_s/episode": 0.25},
		Trajectories: []episode.Trajectory{{Name: "solver", Reward: reward, Steps: []episode.Step{{
			ChatCompletions: []episode.Message{{Role: "user", Content: "2+2="}, {Role: "assistant", Content: fmt.Sprintf("answer %d at step %d", i, step)}},
			ModelResponse:   fmt.Sprintf("answer %d at step %d", i, step), WeightVersion: fmt.Sprintf("v%d", step-1), Reward: reward, Done: true,
		}}}}}
	rec := &episodestore.Record{Step: step, Phase: episodestore.PhaseTrain, Group: i / 4, Episode: ep}
	rec.Samples = []episodestore.Sample{{Trajectory: 0, Step: -1, PromptIDs: []int{1, 2, 3}, ResponseIDs: resp,
		Logprobs: []float64{-0.01, -0.5, 0, 0, math.Inf(-1)}, LossMask: mask, Advantage: reward - 0.5, Reward: reward, Termination: term}}
	rec.Pieces = map[int]string{}
	for _, id := range append([]int{1, 2, 3}, resp...) {
		rec.Pieces[id] = fmt.Sprintf("t%d ", id)
	}
	return rec
}

func writeFixtureStep(t testing.TB, dir string, step, n int) {
	f, err := episodestore.Create(dir, step)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := f.Write(fixtureRecord(step, i)); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
}

// fixtureEval writes an rllm eval --episodes file: 3 tasks x 4 attempts.
func fixtureEval(t testing.TB, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := episodestore.NewWriter(f, nil, strings.HasSuffix(path, ".gz"), 0)
	for task := range 3 {
		for a := range 4 {
			correct := a < task // task 0 never, task 1 once, task 2 twice
			r := 0.0
			if correct {
				r = 1
			}
			rec := &episodestore.Record{Phase: episodestore.PhaseEval, Episode: episode.Episode{ID: episode.EpisodeID(fmt.Sprintf("t%d", task), a),
				Task: episode.Task{"data_source": "math"}, TerminationReason: episode.TerminationEnvDone, IsCorrect: correct,
				Trajectories: []episode.Trajectory{{Reward: r, Steps: []episode.Step{{PromptIDs: []int{1}, ResponseIDs: []int{2, 3}, Logprobs: []float64{-1, -2}, Reward: r}}}}}}
			w.Write(rec)
		}
	}
}
