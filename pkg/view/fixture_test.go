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
	cfg := map[string]any{"actor": map[string]any{"optim": map[string]any{"lr": lr}}, "env": map[string]any{"name": "arith"},
		"workflow": map[string]any{"args": map[string]any{"api_key": "sk-secret"}}}
	b, _ := json.Marshal(runs.RunConfig{TotalSteps: steps, Config: cfg})
	os.WriteFile(filepath.Join(dir, runs.ConfigFile), b, 0o644)
	var m strings.Builder
	for s := 1; s <= steps; s++ {
		row := map[string]any{"step": s, "critic/score/mean": float64(s) / float64(steps), "actor/pg_loss": -0.1 * float64(s), "timing_s/step": 0.5, "training/global_step": s}
		if s == 2 {
			row["actor/grad_norm"] = nil // NaN as the trainer writes it
		}
		if s%2 == 0 {
			row["val/pass@1"] = 0.1 * float64(s)
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
