package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/progress"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	_ "github.com/rllm-org/rllm-go/pkg/tasks"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// smallConfig is a configuration that trains in seconds: a tiny model,
// small batches, no validation unless asked.
func smallConfig(t testing.TB, overrides ...string) *config.Config {
	t.Helper()
	base := []string{
		"trainer.default_local_dir=" + filepath.ToSlash(t.TempDir()),
		"data.train_batch_size=4", "rollout.n=4", "data.generated_train_size=64", "data.generated_val_size=8",
		"backend.local.d_model=32", "backend.local.heads=2", "backend.local.context=48", "backend.local.warmup_steps=2",
		"trainer.total_training_steps=2", "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.save_freq=-1",
		"trainer.logger=[jsonl]", "rollout.max_tokens=4", "workflow.n_parallel_tasks=8",
		// The KL tests turn it on; the rest test the loss without it.
		"actor.use_kl_loss=false",
	}
	c, err := config.FromOverrides(append(base, overrides...))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readMetrics(t testing.TB, dir string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("metrics.jsonl line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// mustTrain runs c to its end with default options.
func mustTrain(t testing.TB, c *config.Config) *Result {
	t.Helper()
	tr, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	res, err := tr.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestTrainWritesMetricsAndCheckpoint(t *testing.T) {
	c := smallConfig(t)
	res := mustTrain(t, c)
	if res.Steps != 2 {
		t.Errorf("steps = %d, want 2", res.Steps)
	}
	dir := c.Trainer.DefaultLocalDir
	if res.Checkpoint != filepath.Join(dir, "global_step_2") {
		t.Errorf("checkpoint = %q", res.Checkpoint)
	}
	latest, err := os.ReadFile(filepath.Join(dir, latestFile))
	if err != nil || strings.TrimSpace(string(latest)) != "2" {
		t.Errorf("%s = %q, %v", latestFile, latest, err)
	}
	for _, f := range []string{stateFile, "model/manifest.json", "model/model.safetensors", "model/optimizer.safetensors"} {
		if _, err := os.Stat(filepath.Join(res.Checkpoint, f)); err != nil {
			t.Error(err)
		}
	}
	ms := readMetrics(t, dir)
	if len(ms) != 2 {
		t.Fatalf("metrics.jsonl has %d lines, want 2", len(ms))
	}
	for i, m := range ms {
		if m["step"] != float64(i+1) {
			t.Errorf("line %d: step %v", i, m["step"])
		}
		for _, k := range []string{"critic/score/mean", "batch/solve_none", "response_length/mean", "actor/lr", "timing_s/step"} {
			if _, ok := m[k]; !ok {
				t.Errorf("line %d lacks %s", i, k)
			}
		}
	}
}

// A run stopped after 2 steps and resumed continues at step 3 with the
// dataloader where it was: the same batches as an uninterrupted run.
func TestResumeContinuesWhereItStopped(t *testing.T) {
	c := smallConfig(t)
	first, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantLoader := first.loader.State()
	first.Close()

	four := 4
	c.Trainer.TotalTrainingSteps = &four
	second, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	resumed, err := second.resume(context.Background())
	if err != nil || !resumed {
		t.Fatalf("resume = %v, %v", resumed, err)
	}
	if second.step != 2 || second.loader.State() != wantLoader {
		t.Fatalf("resumed at step %d loader %+v, want 2 and %+v", second.step, second.loader.State(), wantLoader)
	}
	second.step = 0 // Train resumes again itself
	if _, err := second.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, c.Trainer.DefaultLocalDir)
	var steps []float64
	for _, m := range ms {
		steps = append(steps, m["step"].(float64))
	}
	if len(steps) != 4 || steps[2] != 3 || steps[3] != 4 {
		t.Errorf("metrics steps = %v, want [1 2 3 4]", steps)
	}
}

// Cancelling the context checkpoints the last finished step and returns
// the context's error.
func TestInterruptCheckpoints(t *testing.T) {
	c := smallConfig(t, "trainer.total_training_steps=50")
	tr, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	tr.opts.Log = &cancelAfter{lines: 2, cancel: cancel} // the second step line cancels
	tr.plan.Cadence.Loggers = append(tr.plan.Cadence.Loggers, "console")
	res, err := tr.Train(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if res.Checkpoint == "" || res.Steps < 1 {
		t.Fatalf("no checkpoint after the interruption: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(res.Checkpoint, stateFile)); err != nil {
		t.Error(err)
	}
}

// cancelAfter cancels once it has seen a number of step lines.
type cancelAfter struct {
	lines, seen int
	cancel      context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	if strings.HasPrefix(string(p), "step ") {
		c.seen++
		if c.seen >= c.lines {
			c.cancel()
		}
	}
	return len(p), nil
}

// One mini-batch update moves the policy the way the advantages say: the
// advantage-weighted logprob of the batch rises. Deterministic: the
// sequences are written by hand, not sampled.
func TestUpdateFollowsAdvantages(t *testing.T) {
	ctx := context.Background()
	c := smallConfig(t, "actor.optim.lr=0.01")
	tr, err := New(ctx, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tok := local.Tokenizer{}
	prompt := tok.ChatTemplate([]episode.Message{{Role: "user", Content: "1+1="}}, true)
	var mb []*Sample
	for i, reply := range []string{"2", "3", "2", "5"} {
		ids := append(tok.Encode(reply, false), local.TokenImEnd)
		s := &Sample{Sequence: rollout.Sequence{
			EpisodeID: fmt.Sprintf("t:%d", i), PromptIDs: prompt, ResponseIDs: ids,
			LossMask: []int8{1, 1},
		}}
		s.Advantage = -1
		if reply == "2" {
			s.Advantage = 1
		}
		mb = append(mb, s)
	}
	score := func() float64 {
		datums := make([]backend.Datum, len(mb))
		for i := range mb {
			datums[i] = datumOf(&mb[i].Sequence)
		}
		out, err := tr.be.Forward(ctx, datums, backend.Loss{Name: backend.LossCrossEntropy}).Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total := 0.0
		for i, s := range mb {
			lp := out.LossFnOutputs[i].Logprobs
			for j := range s.ResponseIDs {
				total += s.Advantage * lp[len(s.PromptIDs)-1+j]
			}
		}
		return total
	}
	// On-policy: the sampling logprobs are the current ones.
	datums := make([]backend.Datum, len(mb))
	for i := range mb {
		datums[i] = datumOf(&mb[i].Sequence)
	}
	out, err := tr.be.Forward(ctx, datums, backend.Loss{Name: backend.LossCrossEntropy}).Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range mb {
		lp := out.LossFnOutputs[i].Logprobs
		mb[i].Logprobs = []float64{lp[len(prompt)-1], lp[len(prompt)]}
	}
	before := score()
	up := tr.plan.Update
	up.Epochs = 1
	st, err := update(ctx, tr.be, &up, [][]*Sample{mb}, tr.plan.Adam(0, 10))
	if err != nil {
		t.Fatal(err)
	}
	after := score()
	// On-policy PPO: ratio 1, no clipping, loss −mean(A) over 8 tokens = 0.
	if math.Abs(st.PGLoss) > 1e-6 || st.ClipFrac != 0 || st.Updates != 1 || st.TrainedTokens != 8 {
		t.Errorf("on-policy update %+v, want loss 0, clipfrac 0, 1 update of 8 tokens", st)
	}
	if after <= before {
		t.Errorf("Σ A·logprob went from %.4f to %.4f; the update did not follow the advantages", before, after)
	}
}

func TestLearningRateSchedule(t *testing.T) {
	tests := []struct {
		name string
		sets []string
		want map[int]float64 // step -> lr
	}{
		{"constant", []string{"actor.optim.lr=0.1"}, map[int]float64{0: 0.1, 9: 0.1}},
		{"linear warm-up from zero, as Hugging Face's schedule", []string{"actor.optim.lr=0.1", "actor.optim.warmup_steps=4"},
			map[int]float64{0: 0, 1: 0.025, 3: 0.075, 4: 0.1, 9: 0.1}},
		{"warm-up from the ratio", []string{"actor.optim.lr=0.1", "actor.optim.warmup_steps_ratio=0.2"},
			map[int]float64{0: 0, 1: 0.05, 2: 0.1}},
		// cosine after 2 warm-up steps over 10: progress (s-2)/8, lr =
		// 0.1·(0.1 + 0.9·½(1+cos(π·progress))).
		{"cosine to min_lr_ratio", []string{"actor.optim.lr=0.1", "actor.optim.warmup_steps=2", "actor.optim.lr_scheduler=cosine", "actor.optim.min_lr_ratio=0.1"},
			map[int]float64{2: 0.1, 6: 0.1 * (0.1 + 0.9*0.5), 10: 0.01}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.FromOverrides(tt.sets)
			if err != nil {
				t.Fatal(err)
			}
			p, err := NewPlan(c)
			if err != nil {
				t.Fatal(err)
			}
			for s, want := range tt.want {
				if got := p.Update.LR.At(s, 10); math.Abs(got-want) > 1e-12 {
					t.Errorf("lr(%d) = %g, want %g", s, got, want)
				}
			}
		})
	}
}

func TestMiniBatchesKeepGroupsTogether(t *testing.T) {
	var groups []Group
	for _, n := range []int{2, 2, 2, 1} {
		var g Group
		for range n {
			g.Samples = append(g.Samples, Sample{Sequence: rollout.Sequence{ResponseIDs: []int{1}, LossMask: []int8{1}}})
		}
		groups = append(groups, g)
	}
	groups[2].Samples = append(groups[2].Samples, Sample{Masked: true, Sequence: rollout.Sequence{ResponseIDs: []int{1}, LossMask: []int8{1}}})
	got := miniBatches(groups, 2)
	var shape []int
	for _, mb := range got {
		shape = append(shape, len(mb))
	}
	if len(shape) != 2 || shape[0] != 4 || shape[1] != 3 {
		t.Errorf("mini-batch sizes = %v, want [4 3]", shape)
	}
}

func TestUnsupportedSettingsAreConfigErrors(t *testing.T) {
	for _, sets := range [][]string{
		{"backend.name=tinker"},
		{"actor.ref_path=somewhere"},
		{"rollout.accumulate_reasoning=true"},
		{"filters.rejection_sample.multiplier=2"},
		{"rollout.engine=openai", "rollout.endpoints=[http://127.0.0.1:1]", "rollout.model=m"},
	} {
		set := strings.Join(sets, " ")
		c := smallConfig(t, sets...)
		_, err := New(context.Background(), c, Options{})
		var ec interface{ ExitCode() int }
		if !errors.As(err, &ec) || ec.ExitCode() != 2 {
			t.Errorf("%s: err = %v, want a config error", set, err)
		}
	}
}

func TestResumeFromDamagedCheckpoint(t *testing.T) {
	c := smallConfig(t)
	dir := c.Trainer.DefaultLocalDir
	if err := os.WriteFile(filepath.Join(dir, latestFile), []byte("seven\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, err = tr.Train(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not a step number") {
		t.Fatalf("err = %v", err)
	}
}

// Training files without validation files train without validation
// rather than refusing to start.
func TestNoValidationSetIsAllowed(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "train.jsonl")
	var b strings.Builder
	for i := 0; i < 8; i++ {
		b.WriteString(`{"question": "1+1?", "ground_truth": "2"}` + "\n")
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	c := smallConfig(t, "env.name=math", "agent.name=math", "data.train_files=["+filepath.ToSlash(file)+"]",
		"trainer.total_training_steps=1", "trainer.val_before_train=true", "backend.local.context=128", "backend.local.warmup_steps=0")
	tr, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if len(tr.val) != 0 {
		t.Fatalf("%d validation tasks, want none", len(tr.val))
	}
	res, err := tr.Train(context.Background())
	if err != nil || res.Steps != 1 || res.Val != nil {
		t.Fatalf("res %+v err %v", res, err)
	}
}

// The KL terms and the entropy bonus act: each run logs its metric, the
// reference policy is saved once in the run directory, and the entropy
// bonus pushes entropy up against a run without it.
func TestKLAndEntropyTermsAct(t *testing.T) {
	run := func(sets ...string) []map[string]any {
		c := smallConfig(t, append([]string{"trainer.total_training_steps=3", "trainer.seed=5"}, sets...)...)
		mustTrain(t, c)
		return readMetrics(t, c.Trainer.DefaultLocalDir)
	}
	kl := run("actor.use_kl_loss=true", "actor.kl_loss_coef=0.5", "algorithm.use_kl_in_reward=true", "algorithm.kl_coef=0.1")
	for _, key := range []string{"actor/kl_loss", "actor/reward_kl_penalty", "actor/entropy"} {
		if _, ok := kl[len(kl)-1][key]; !ok {
			t.Errorf("metrics lack %s: %v", key, kl[len(kl)-1])
		}
	}
	// The first update starts from the reference itself: KL 0.
	if v := kl[0]["actor/kl_loss"].(float64); math.Abs(v) > 1e-9 {
		t.Errorf("first step's KL to the starting policy = %g, want 0", v)
	}
}

// The entropy bonus gradient points up the entropy: one update with a
// large entropy coefficient and zero advantages raises the mean entropy
// of the trained positions.
func TestEntropyBonusRaisesEntropy(t *testing.T) {
	ctx := context.Background()
	c := smallConfig(t, "actor.optim.lr=0.001", "actor.entropy_coeff=1")
	tr, err := New(ctx, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tok := local.Tokenizer{}
	prompt := tok.ChatTemplate([]episode.Message{{Role: "user", Content: "2+2="}}, true)
	var mb []*Sample
	for _, reply := range []string{"4", "5"} {
		ids := append(tok.Encode(reply, false), local.TokenImEnd)
		mb = append(mb, &Sample{Sequence: rollout.Sequence{PromptIDs: prompt, ResponseIDs: ids, LossMask: []int8{1, 1}, Logprobs: []float64{-1, -1}}})
	}
	entropy := func() float64 {
		datums := []backend.Datum{datumOf(&mb[0].Sequence), datumOf(&mb[1].Sequence)}
		out, err := tr.be.Forward(ctx, datums, backend.Loss{Name: backend.LossCrossEntropy}).Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for i := range datums {
			for j := range 2 {
				sum += out.LossFnOutputs[i].Entropies[len(prompt)-1+j]
			}
		}
		return sum / 4
	}
	// Sharpen the fresh (near-uniform) model first, so entropy has room
	// to rise.
	sft := []backend.Datum{datumOf(&mb[0].Sequence)}
	sft[0].LossFnInputs.Weights = make([]float64, len(sft[0].LossFnInputs.TargetTokens))
	for j := range 2 {
		sft[0].LossFnInputs.Weights[len(prompt)-1+j] = 1
	}
	if _, err := SFT(ctx, tr.be, sft, SFTOptions{Epochs: 30, BatchSize: 1, Adam: backend.DefaultAdamParams(0.01)}); err != nil {
		t.Fatal(err)
	}
	before := entropy()
	up := tr.plan.Update
	up.Epochs = 1
	st, err := update(ctx, tr.be, &up, [][]*Sample{mb}, tr.plan.Adam(0, 10))
	if err != nil {
		t.Fatal(err)
	}
	after := entropy()
	if !st.HasEntropy || math.Abs(st.Entropy-before) > 1e-6 {
		t.Errorf("logged entropy %g (has %t), want the pre-update %g", st.Entropy, st.HasEntropy, before)
	}
	if after <= before {
		t.Errorf("entropy went from %.4f to %.4f under a bonus of 1", before, after)
	}
}

// A fixed trainer.seed reproduces a run on the local backend: the same
// metrics, step by step, whatever the goroutines did.
func TestSameSeedSameRun(t *testing.T) {
	run := func(parallel string) []map[string]any {
		c := smallConfig(t, "trainer.total_training_steps=3", "trainer.seed=11", "workflow.n_parallel_tasks="+parallel)
		mustTrain(t, c)
		ms := readMetrics(t, c.Trainer.DefaultLocalDir)
		for _, m := range ms {
			for k := range m {
				if strings.HasPrefix(k, "timing_s/") {
					delete(m, k)
				}
			}
		}
		return ms
	}
	a, b := run("8"), run("3")
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("two runs with trainer.seed=11 differ:\n%v\n%v", a, b)
	}
	// rollout.seed keeps the samples of a group different.
	if acc := a[len(a)-1]["batch/solve_partial"].(float64) + a[len(a)-1]["batch/solve_none"].(float64) + a[len(a)-1]["batch/solve_all"].(float64); acc == 0 {
		t.Fatal("no solve statistics")
	}
}

type seedRecorder struct {
	mu    sync.Mutex
	seeds map[int64]int
}

func (r *seedRecorder) Sample(_ context.Context, req sampler.Request) (sampler.Response, error) {
	r.mu.Lock()
	r.seeds[*req.Params.Seed]++
	r.mu.Unlock()
	return sampler.Response{Text: "1", FinishReason: "stop"}, nil
}

// rollout.seed=1 seeds every request, and the n samples of a task each
// get their own seed (a shared seed would make them identical and every
// GRPO advantage zero).
func TestRolloutSeedKeepsGroupsDiverse(t *testing.T) {
	c := smallConfig(t, "rollout.seed=1", "rollout.n=4")
	p, err := NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	rec := &seedRecorder{seeds: map[int64]int{}}
	eng, err := rollout.NewRunner(p.Workflow, rec, p.Train.Params, 4, p.Runner, nil)
	if err != nil {
		t.Fatal(err)
	}
	task := episode.Task{"question": "1+1=", "ground_truth": "2", "task_id": "t"}
	if _, err := eng.Run(context.Background(), []episode.Task{task, task}); err != nil {
		t.Fatal(err)
	}
	if len(rec.seeds) != 8 {
		t.Errorf("8 episodes sampled with %d distinct seeds: %v", len(rec.seeds), rec.seeds)
	}
}

// Resuming refuses a different run and says what changed in the batch
// shape.
func TestResumeChecksTheRun(t *testing.T) {
	c := smallConfig(t, "trainer.total_training_steps=1")
	dir := c.Trainer.DefaultLocalDir
	train := func(sets ...string) (string, error) {
		c := smallConfig(t, append([]string{"trainer.default_local_dir=" + filepath.ToSlash(dir)}, sets...)...)
		var log strings.Builder
		tr, err := New(context.Background(), c, Options{Log: &log})
		if err != nil {
			return "", err
		}
		defer tr.Close()
		_, err = tr.Train(context.Background())
		return log.String(), err
	}
	if _, err := train("trainer.total_training_steps=1"); err != nil {
		t.Fatal(err)
	}
	_, err := train("trainer.total_training_steps=2", "backend.local.d_model=16")
	if err == nil || !strings.Contains(err.Error(), "backend.local.d_model 16 (was 32)") || !strings.Contains(err.Error(), "trainer.experiment_name") {
		t.Errorf("resuming with another model: %v", err)
	}
	log, err := train("trainer.total_training_steps=2", "rollout.n=2")
	if err != nil || !strings.Contains(log, "resuming with rollout.n 2 (was 4)") {
		t.Errorf("resuming with rollout.n=2: %v\n%s", err, log)
	}
}

// A crash after the last checkpoint leaves records of steps the resumed
// run redoes, and maybe half a line: resuming keeps each step once.
func TestResumeTruncatesMetrics(t *testing.T) {
	c := smallConfig(t, "trainer.total_training_steps=2", "trainer.save_freq=1")
	dir := c.Trainer.DefaultLocalDir
	tr, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	// As if the run had gone on to step 3 and been killed mid-line of 4.
	f, _ := os.OpenFile(filepath.Join(dir, MetricsFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"step":3,"critic/score/mean":0.5}` + "\n" + `{"step":4,"crit`)
	f.Close()
	c = smallConfig(t, "trainer.total_training_steps=3", "trainer.default_local_dir="+filepath.ToSlash(dir))
	tr, err = New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, m := range readMetrics(t, dir) {
		steps = append(steps, int(m["step"].(float64)))
	}
	if fmt.Sprint(steps) != "[1 2 3]" {
		t.Errorf("steps in metrics.jsonl: %v, want [1 2 3]", steps)
	}
}

type recProgress struct {
	mu     sync.Mutex
	phases map[string][2]int64 // name -> total, done
	lines  []string
}

func (r *recProgress) Start(name, unit string, total int64) progress.Counter {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.phases[name]
	p[0] += total
	r.phases[name] = p
	return &recCounter{r: r, name: name}
}
func (r *recProgress) Println(msg string) { r.mu.Lock(); r.lines = append(r.lines, msg); r.mu.Unlock() }

type recCounter struct {
	r    *recProgress
	name string
}

func (c *recCounter) Add(n int64) {
	c.r.mu.Lock()
	p := c.r.phases[c.name]
	p[1] += n
	c.r.phases[c.name] = p
	c.r.mu.Unlock()
}
func (c *recCounter) Describe(string) {}
func (c *recCounter) Done()           {}

// The run reports its steps and every rollout and validation phase's
// episodes to the progress display, prints its step lines through it
// (under 100 characters), and serves Prometheus metrics when asked.
func TestProgressAndPrometheus(t *testing.T) {
	c := smallConfig(t, "trainer.total_training_steps=2", "trainer.test_freq=2", "trainer.logger=[console,jsonl]", "trainer.metrics_addr=127.0.0.1:0")
	rec := &recProgress{phases: map[string][2]int64{}}
	tr, err := New(context.Background(), c, Options{Progress: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	// 2 steps of 4 tasks × 4 episodes, one validation of 8 tasks × 1,
	// after the warm-up's 2 steps of rollouts and its fit (8 replies in
	// batches of 4).
	want := map[string][2]int64{"train": {2, 2}, "rollout": {32, 32}, "validation": {8, 8}, "warm-up": {2, 2}, "warm-up fit": {2, 2}}
	for name, w := range want {
		if got := rec.phases[name]; got != w {
			t.Errorf("phase %s: total/done %v, want %v", name, got, w)
		}
	}
	steps := 0
	for _, l := range rec.lines {
		if strings.HasPrefix(l, "step ") {
			steps++
			if len(l) >= 100 {
				t.Errorf("step line of %d characters: %q", len(l), l)
			}
		}
	}
	if steps != 2 {
		t.Errorf("%d step lines: %q", steps, rec.lines)
	}
	w := httptest.NewRecorder()
	tr.prom.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(w.Body.String(), "rllm_step 2") || !strings.Contains(w.Body.String(), "rllm_episodes_total 32") {
		t.Errorf("Prometheus metrics lack the run's step and episodes:\n%.800s", w.Body.String())
	}
}

// Prompts that leave the model no room to reply are refused before
// anything trains, naming the key and the size needed.
func TestPromptsThatDoNotFitAreRefused(t *testing.T) {
	c := smallConfig(t, "env.name=countdown", "backend.local.context=128")
	tr, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, err = tr.Train(context.Background())
	if !usererr.Is(err) || !strings.Contains(err.Error(), "set backend.local.context to at least 512") {
		t.Fatalf("err = %v", err)
	}
	if _, serr := os.Stat(filepath.Join(c.Trainer.DefaultLocalDir, MetricsFile)); serr == nil {
		t.Error("a run that cannot fit its prompts started writing metrics")
	}
}

// Skipping the first mini-batch's forward pass (on-policy rollouts from
// the backend's own sampler) gives the update the forward pass would.
func TestOnPolicyFirstMatchesForward(t *testing.T) {
	after := func(skip bool) [][]float64 {
		tr := newTestTrainer(t, "actor.optim.lr=0.01")
		mb, datums, _ := handBatch("3+4=", []string{"7", "8"}, []float64{1, -1})
		for i, lp := range responseLogprobs(t, tr, mb, datums) {
			mb[i].Logprobs = lp
		}
		up := tr.plan.Update
		up.Epochs, up.OnPolicyFirst = 1, skip
		st, err := update(context.Background(), tr.be, &up, [][]*Sample{mb}, tr.plan.Adam(0, 10))
		if err != nil || !st.HasEntropy {
			t.Fatalf("update: %+v %v", st, err)
		}
		return responseLogprobs(t, tr, mb, datums)
	}
	a, b := after(true), after(false)
	for i := range a {
		for j := range a[i] {
			if math.Abs(a[i][j]-b[i][j]) > 1e-5 {
				t.Fatalf("logprob %d/%d after the update: %g skipping the forward, %g with it", i, j, a[i][j], b[i][j])
			}
		}
	}
}

// importance_sampling sent by name (the aggregation folded into the
// advantages) moves the weights exactly as the client-side loss does.
func TestBuiltinImportanceSamplingMatchesClientSide(t *testing.T) {
	after := func(builtin bool) [][]float64 {
		tr := newTestTrainer(t, "actor.optim.lr=0.01", "actor.policy_loss=importance_sampling", "actor.loss_agg_mode=seq-mean-token-mean")
		if tr.plan.Update.Builtin != backend.LossImportanceSampling {
			t.Fatalf("the plan runs importance_sampling as %q", tr.plan.Update.Builtin)
		}
		mb, datums, _ := handBatch("5+2=", []string{"7", "12"}, []float64{1, -1})
		for i, lps := range responseLogprobs(t, tr, mb, datums) {
			for _, lp := range lps {
				// Off-policy by a little, so the ratios are not 1.
				mb[i].Logprobs = append(mb[i].Logprobs, lp-0.05*float64(i+1))
			}
		}
		up := tr.plan.Update
		up.Epochs, up.OnPolicyFirst = 1, false
		if !builtin {
			up.Builtin = ""
		}
		if _, err := update(context.Background(), tr.be, &up, [][]*Sample{mb}, tr.plan.Adam(0, 10)); err != nil {
			t.Fatal(err)
		}
		return responseLogprobs(t, tr, mb, datums)
	}
	a, b := after(true), after(false)
	for i := range a {
		for j := range a[i] {
			if math.Abs(a[i][j]-b[i][j]) > 1e-5 {
				t.Fatalf("logprob %d/%d after the update: built-in %g, client side %g", i, j, a[i][j], b[i][j])
			}
		}
	}
}

// newTestTrainer builds a trainer on smallConfig with sets, closed at the
// end of the test.
func newTestTrainer(t *testing.T, sets ...string) *Trainer {
	t.Helper()
	tr, err := New(context.Background(), smallConfig(t, sets...), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// handBatch writes one mini-batch by hand: each reply (then <|im_end|>)
// to question, with the given advantage and every response token
// trained; datums are the samples' datums in order.
func handBatch(question string, replies []string, adv []float64) (mb []*Sample, datums []backend.Datum, prompt []int) {
	tok := local.Tokenizer{}
	prompt = tok.ChatTemplate([]episode.Message{{Role: "user", Content: question}}, true)
	for i, reply := range replies {
		ids := append(tok.Encode(reply, false), local.TokenImEnd)
		s := &Sample{Sequence: rollout.Sequence{PromptIDs: prompt, ResponseIDs: ids, LossMask: make([]int8, len(ids))}}
		for j := range s.LossMask {
			s.LossMask[j] = 1
		}
		s.Advantage = adv[i]
		mb, datums = append(mb, s), append(datums, datumOf(&s.Sequence))
	}
	return mb, datums, prompt
}

// responseLogprobs is the trainer's current logprob of every response
// token of mb, in order.
func responseLogprobs(t *testing.T, tr *Trainer, mb []*Sample, datums []backend.Datum) [][]float64 {
	t.Helper()
	out, err := tr.be.Forward(context.Background(), datums, backend.Loss{Name: backend.LossCrossEntropy}).Result(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lps := make([][]float64, len(mb))
	for i, s := range mb {
		p := len(s.PromptIDs) - 1
		lps[i] = out.LossFnOutputs[i].Logprobs[p : p+len(s.ResponseIDs)]
	}
	return lps
}
