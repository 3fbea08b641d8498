package trainer

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/faketinker"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker"
)

const asyncTinkerKey = "tml-async-test-key"

func fakeTinker(tb testing.TB, d faketinker.Delays) *faketinker.Server {
	tb.Helper()
	// Long polls that answer as soon as a result is there (the real
	// service's behaviour), so the client's poll backoff adds nothing.
	srv, err := faketinker.New(faketinker.Options{APIKey: asyncTinkerKey, PollWait: 5 * time.Second, Delays: d})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Close)
	return srv
}

func tinkerSets(srv *faketinker.Server) []string {
	return []string{"backend.name=tinker", "backend.tinker.base_url=" + srv.URL, "backend.tinker.base_model=" + tinker.EmbeddedModel,
		"backend.tinker.lora_rank=2", "actor.optim.lr=0.001"}
}

func tinkerEnv(k string) string {
	if k == "TINKER_API_KEY" {
		return asyncTinkerKey
	}
	return ""
}

// Asynchronous training on the Tinker backend: rollouts sample from the
// Tinker sampler while the service trains, each step's weights are
// published as a new sampler path, and staleness stays within the bound.
func TestAsyncOnTinker(t *testing.T) {
	srv := fakeTinker(t, faketinker.Delays{})
	c := smallConfig(t, append(tinkerSets(srv), "trainer.total_training_steps=3", "async_training.enable=true",
		"async_training.staleness_threshold=1", "async_training.mini_batch_size=4", "trainer.save_freq=2")...)
	tr, err := New(context.Background(), c, Options{Getenv: tinkerEnv})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	res, err := tr.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 3 {
		t.Fatalf("steps %d", res.Steps)
	}
	optims := 0
	for _, e := range srv.Executions() {
		if e.Path == "optim_step" {
			optims++
		}
	}
	if optims != 3 {
		t.Errorf("%d optimizer steps on the service, want 3", optims)
	}
	for i, m := range readMetrics(t, c.Trainer.DefaultLocalDir) {
		if m["async/staleness_max"].(float64) > 1 {
			t.Errorf("step %d: staleness %v over the bound", i+1, m["async/staleness_max"])
		}
	}
	if _, err := os.Stat(filepath.Join(c.Trainer.DefaultLocalDir, "global_step_2")); err != nil {
		t.Error(err)
	}
}

// BenchmarkAsyncOverlap measures wall time per optimizer step against the
// fake Tinker service with injected latency (training T per
// forward_backward + optim_step, serially; sampling S per request,
// concurrently), synchronous against asynchronous with staleness 1, and
// reports the final validation pass@1 of each. s/step averages every
// step (the first one fills the pipeline), s/step_after_1st the steps
// after it. RLLM_BENCH_T and RLLM_BENCH_STEPS override T = S (default
// 200ms) and the steps (6); RLLM_BENCH_DEBUG=1 logs every step.
func BenchmarkAsyncOverlap(b *testing.B) {
	lat, steps := benchLatency(b)
	for _, mode := range []struct {
		name string
		sets []string
	}{
		{"sync", nil},
		{"async", []string{"async_training.enable=true", "async_training.staleness_threshold=1", "async_training.mini_batch_size=4"}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				srv := fakeTinker(b, faketinker.Delays{Train: lat, Sample: lat})
				sets := append(tinkerSets(srv), "trainer.total_training_steps="+strconv.Itoa(steps), "trainer.test_freq="+strconv.Itoa(steps),
					"trainer.default_local_dir="+filepath.ToSlash(b.TempDir()), "trainer.seed=1", "data.generated_val_size=16", "workflow.n_parallel_tasks=32")
				c := smallConfig(b, append(sets, mode.sets...)...)
				tr, err := New(context.Background(), c, Options{Getenv: tinkerEnv})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				res, err := tr.Train(context.Background())
				wall := time.Since(start)
				tr.Close()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(wall.Seconds(), "s/run")
				reportSteps(b, c.Trainer.DefaultLocalDir, res, mode.name == "async")
			}
		})
	}
}

// reportSteps reports the wall time per step (training and publishing;
// validation, which runs once at the end in both modes, left out), over
// all steps and after the first (which fills the pipeline), the idle
// ratios of async runs and the final validation pass@1.
func reportSteps(b *testing.B, dir string, res *Result, async bool) {
	var train, steady, idleT, idleR float64
	for _, m := range readMetrics(b, dir) {
		s, _ := m["timing_s/step"].(float64)
		p, _ := m["timing_s/publish"].(float64)
		if os.Getenv("RLLM_BENCH_DEBUG") != "" {
			b.Logf("step %v: gen %.3f update %.3f publish %.3f step %.3f idle t %v r %v", m["step"], m["timing_s/gen"], m["timing_s/update_actor"], p, s, m["async/trainer_idle_ratio"], m["async/rollout_idle_ratio"])
		}
		train += s + p
		if st, _ := m["step"].(float64); st > 1 {
			steady += (s + p) / float64(res.Steps-1)
		}
		it, _ := m["async/trainer_idle_ratio"].(float64)
		ir, _ := m["async/rollout_idle_ratio"].(float64)
		idleT, idleR = idleT+it/float64(res.Steps), idleR+ir/float64(res.Steps)
	}
	b.ReportMetric(train/float64(res.Steps), "s/step")
	b.ReportMetric(steady, "s/step_after_1st")
	if async {
		b.ReportMetric(idleT, "trainer_idle")
		b.ReportMetric(idleR, "rollout_idle")
	}
	b.ReportMetric(res.Val["val/pass@1"], "val_pass@1")
}

// benchLatency is T = S (RLLM_BENCH_T, default 200ms) and the steps
// (RLLM_BENCH_STEPS, default 6) of the overlap benchmarks.
func benchLatency(b *testing.B) (time.Duration, int) {
	lat, steps := 200*time.Millisecond, 6
	if v := os.Getenv("RLLM_BENCH_T"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		lat = d
	}
	if v := os.Getenv("RLLM_BENCH_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			b.Fatalf("RLLM_BENCH_STEPS=%q: want a number of steps ≥ 2", v)
		}
		steps = n
	}
	return lat, steps
}
