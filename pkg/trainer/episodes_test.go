package trainer

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/episodestore"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// datumRecorder is a backend that keeps every datum ForwardBackward
// trains on.
type datumRecorder struct {
	backend.TrainingBackend
	mu    sync.Mutex
	calls [][]backend.Datum
}

func (r *datumRecorder) ForwardBackward(ctx context.Context, data []backend.Datum, loss backend.Loss) *backend.Future[backend.ForwardBackwardOutput] {
	r.mu.Lock()
	r.calls = append(r.calls, data)
	r.mu.Unlock()
	return r.TrainingBackend.ForwardBackward(ctx, data, loss)
}

func (r *datumRecorder) take() [][]backend.Datum {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.calls
	r.calls = nil
	return d
}

// The episode files hold, step for step, exactly what the update trained
// on: every trained datum's tokens and advantages are a kept sample's.
func TestEpisodesMatchTrainedDatums(t *testing.T) {
	ctx := context.Background()
	c := smallConfig(t, "trainer.total_training_steps=3", "trainer.episodes.max_groups=null", "actor.ppo_epochs=1",
		"trainer.test_freq=2", "trainer.val_before_train=true", "backend.local.warmup_steps=40")
	be, err := backend.Open(ctx, c, backend.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &datumRecorder{TrainingBackend: be}
	tr, err := New(ctx, c, Options{Backend: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	perStep := map[int][][]backend.Datum{}
	tr.validator = func(ctx context.Context) (map[string]float64, error) {
		perStep[tr.step] = rec.take() // step 0: the warm-up's
		return tr.validate(ctx)
	}
	tr.plan.Cadence.TestFreq = 1
	if _, err := tr.Train(ctx); err != nil {
		t.Fatal(err)
	}
	dir := episodestore.PhaseDir(c.Trainer.DefaultLocalDir, episodestore.PhaseTrain)
	steps, _, err := episodestore.Steps(dir)
	if err != nil || !slices.Equal(steps, []int{1, 2, 3}) {
		t.Fatalf("training episode files for steps %v, %v; want 1, 2, 3", steps, err)
	}
	for _, step := range steps {
		recs, err := episodestore.ReadAll(episodestore.DataPath(dir, step))
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 4*4 {
			t.Errorf("step %d kept %d episodes, want 16", step, len(recs))
		}
		kept := map[string]episodestore.Sample{}
		for _, r := range recs {
			if r.Step != step || r.Phase != episodestore.PhaseTrain {
				t.Errorf("record %s: step %d phase %s", r.ID, r.Step, r.Phase)
			}
			for _, s := range r.Samples {
				full := append(slices.Clone(s.PromptIDs), s.ResponseIDs...)
				kept[fmt.Sprint(full)] = s
				for _, id := range full {
					if _, ok := r.Pieces[id]; !ok {
						t.Fatalf("record %s has no text piece of token %d", r.ID, id)
					}
				}
			}
		}
		advChecked := 0
		calls := perStep[step]
		if len(calls) == 0 {
			t.Fatalf("step %d trained on no datum", step)
		}
		for _, call := range calls {
			// On-policy, one epoch: the loss's gradient weight of a token is
			// its advantage times the aggregation's constant (token-mean:
			// one over the mini-batch's tokens), the same for every token.
			ratio := 0.0
			for _, d := range call {
				full := append(slices.Clone(d.Input), d.LossFnInputs.TargetTokens[len(d.LossFnInputs.TargetTokens)-1])
				s, ok := kept[fmt.Sprint(full)]
				if !ok {
					t.Fatalf("step %d trained on tokens %v that no kept episode holds", step, full)
				}
				p := len(s.PromptIDs) - 1
				w := d.LossFnInputs.Weights
				if w == nil {
					t.Fatalf("step %d: a datum without gradient weights", step)
				}
				for j := range s.ResponseIDs {
					a := s.AdvantageAt(j)
					if s.LossMask[j] == 0 || s.Masked || a == 0 {
						if w[p+j] != 0 {
							t.Fatalf("step %d token %d: weight %v where the kept advantage is %v (mask %d)", step, j, w[p+j], a, s.LossMask[j])
						}
						continue
					}
					r := w[p+j] / a
					if ratio == 0 {
						ratio = r
					}
					if r <= 0 || math.Abs(r-ratio) > 1e-9*ratio {
						t.Fatalf("step %d token %d: weight %v for kept advantage %v: ratio %v, others %v", step, j, w[p+j], a, r, ratio)
					}
					advChecked++
				}
			}
		}
		if advChecked == 0 {
			t.Errorf("step %d: no datum carried advantages to compare", step)
		}
	}
	vals, _, _ := episodestore.Steps(episodestore.PhaseDir(c.Trainer.DefaultLocalDir, episodestore.PhaseVal))
	if !slices.Equal(vals, []int{0, 1, 2, 3}) {
		t.Errorf("validation episode files for steps %v, want 0..3", vals)
	}
}

// A resumed run removes the episodes of the steps it redoes; the bounds
// keys keep fewer.
func TestEpisodesResumeAndBounds(t *testing.T) {
	c := smallConfig(t, "trainer.total_training_steps=4", "trainer.save_freq=2", "trainer.episodes.save_freq=2", "trainer.episodes.max_groups=1")
	mustTrain(t, c)
	dir := episodestore.PhaseDir(c.Trainer.DefaultLocalDir, episodestore.PhaseTrain)
	steps, _, _ := episodestore.Steps(dir)
	if !slices.Equal(steps, []int{2, 4}) {
		t.Fatalf("steps kept %v, want 2 and 4 (every 2nd)", steps)
	}
	recs, _ := episodestore.ReadAll(episodestore.DataPath(dir, 2))
	if len(recs) != 4 {
		t.Errorf("step 2 kept %d episodes, want one group of 4", len(recs))
	}
	// As after a crash in step 4 with the checkpoint of step 2 the newest:
	// a stray file of step 4 (and one cut short) must go on resume.
	os.WriteFile(filepath.Join(c.Trainer.DefaultLocalDir, latestFile), []byte("2"), 0o644)
	os.RemoveAll(stepDir(c.Trainer.DefaultLocalDir, 4))
	data, _ := os.ReadFile(episodestore.DataPath(dir, 4))
	os.WriteFile(episodestore.DataPath(dir, 4), data[:len(data)/2], 0o644)
	os.WriteFile(episodestore.DataPath(dir, 3), data[:len(data)/2], 0o644)
	c.Trainer.Episodes.SaveFreq = 1
	tr, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.plan.Episodes.SaveFreq = 1
	if _, err := tr.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	steps, _, _ = episodestore.Steps(dir)
	if !slices.Equal(steps, []int{2, 3, 4}) {
		t.Fatalf("steps kept after the resume %v, want 2, 3, 4", steps)
	}
	for _, s := range []int{3, 4} {
		recs, err := episodestore.ReadAll(episodestore.DataPath(dir, s))
		if err != nil || len(recs) != 4 {
			t.Errorf("step %d after the resume: %d records, %v; want the redone step's 4 only", s, len(recs), err)
		}
	}
}

func TestEpisodesBudget(t *testing.T) {
	var lines []string
	c := smallConfig(t, "trainer.total_training_steps=3", "trainer.episodes.max_mb=1")
	tr, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.plan.Episodes.MaxBytes = 1 // spent by the first record
	tr.opts.Log = writerFunc(func(p []byte) { lines = append(lines, string(p)) })
	if _, err := tr.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, _ := episodestore.ReadAll(episodestore.DataPath(tr.plan.Episodes.TrainDir, 1))
	steps, _, _ := episodestore.Steps(tr.plan.Episodes.TrainDir)
	if len(recs) != 1 || len(steps) != 1 {
		t.Errorf("a spent budget kept %d records in %d steps, want 1 in 1", len(recs), len(steps))
	}
	found := false
	for _, l := range lines {
		if strings.Contains(l, "trainer.episodes.max_mb") {
			found = true
		}
	}
	if !found {
		t.Errorf("no note names trainer.episodes.max_mb: %q", lines)
	}
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// BenchmarkKeepEpisodes is the trainer's cost of keeping one step's
// episodes with the defaults (4 of the default run's 32 groups of 8
// arith episodes: 32 episodes): records built, text pieces decoded,
// JSON, gzip and the write. It reports the bytes per episode kept.
func BenchmarkKeepEpisodes(b *testing.B) {
	c := smallConfig(b)
	be, err := backend.Open(context.Background(), c, backend.OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	codec := be.Codec()
	prompt := codec.Encode("<|im_start|>user\nWhat is 37 + 45? Answer with the number only.<|im_end|>\n<|im_start|>assistant\n", false)
	var groups []Group
	for g := range 32 {
		var gr Group
		gr.TaskID = fmt.Sprintf("arith-%d", g)
		for i := range 8 {
			resp := codec.Encode(fmt.Sprint(70+i+g), false)
			ep := &episode.Episode{ID: episode.EpisodeID(gr.TaskID, i), Task: episode.Task{"question": "What is 37 + 45?", "ground_truth": "82", "data_source": "arith"},
				TerminationReason: episode.TerminationEnvDone, IsCorrect: i == 0, Metrics: map[string]float64{"timing_s/episode": 0.01},
				Trajectories: []episode.Trajectory{{ID: fmt.Sprint(i), Name: "solver", Reward: float64(i % 2), Steps: []episode.Step{{
					PromptIDs: prompt, ResponseIDs: resp, Logprobs: make([]float64, len(resp)), LossMask: make([]int8, len(resp)),
					ChatCompletions: []episode.Message{{Role: "user", Content: "What is 37 + 45? Answer with the number only."}, {Role: "assistant", Content: fmt.Sprint(70 + i + g)}},
					ModelResponse:   fmt.Sprint(70 + i + g), FinishReason: "stop", Reward: float64(i % 2), Done: true}}}}}
			gr.Episodes = append(gr.Episodes, ep)
			gr.Samples = append(gr.Samples, Sample{Sequence: rollout.Sequence{EpisodeID: ep.ID, TrajectoryID: fmt.Sprint(i), Step: -1,
				PromptIDs: prompt, ResponseIDs: resp, LossMask: []int8{1, 1, 1}[:len(resp)], Logprobs: []float64{-0.3, -0.01, -1.2}[:len(resp)], Reward: float64(i % 2)},
				Advantage: float64(i%2) - 0.5})
		}
		groups = append(groups, gr)
	}
	dir := b.TempDir()
	k := &episodeKeeper{plan: EpisodesPlan{TrainDir: dir, SaveFreq: 1, MaxGroups: 4}, decode: cachedDecoder(codec.Decode), step: -1}
	step := 0
	cpu0 := cpuTime()
	for b.Loop() {
		step++
		k.keepTrain(step, groups)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(step), "cpu_us/op")
	_, n, _ := episodestore.Steps(dir)
	b.ReportMetric(float64(n)/float64(step*32), "bytes/episode")
}
