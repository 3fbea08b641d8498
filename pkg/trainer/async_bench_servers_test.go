package trainer

import (
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
)

// slowBackend adds T per forward_backward + optim_step (half to each,
// serially), as a training service of that speed would.
type slowBackend struct {
	backend.TrainingBackend
	half time.Duration
}

func (s slowBackend) ForwardBackward(ctx context.Context, d []backend.Datum, l backend.Loss) *backend.Future[backend.ForwardBackwardOutput] {
	time.Sleep(s.half)
	return s.TrainingBackend.ForwardBackward(ctx, d, l)
}

func (s slowBackend) OptimStep(ctx context.Context, p backend.AdamParams) *backend.Future[backend.OptimStepOutput] {
	time.Sleep(s.half)
	return s.TrainingBackend.OptimStep(ctx, p)
}

// slowServer fronts an rllm serve endpoint, adding S to every sampling
// request (concurrently).
func slowServer(tb testing.TB, url string, s time.Duration) string {
	return proxyTo(tb, url, func(_ http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, "/completions") {
			time.Sleep(s)
		}
		return true
	})
}

// BenchmarkAsyncOverlapServers is BenchmarkAsyncOverlap with the
// embedded policy training (T added per optimizer step) and rollouts
// from two rllm serve endpoints (S added per request), T = S.
func BenchmarkAsyncOverlapServers(b *testing.B) {
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
				base := smallConfig(b)
				urls := []string{slowServer(b, serveLike(b, base), lat), slowServer(b, serveLike(b, base), lat)}
				sets := []string{"rollout.engine=sglang", "rollout.endpoints=[" + strings.Join(urls, ",") + "]", "rollout.model=policy",
					"backend.local.warmup_steps=0", "trainer.total_training_steps=" + strconv.Itoa(steps), "trainer.test_freq=" + strconv.Itoa(steps),
					"trainer.default_local_dir=" + filepath.ToSlash(b.TempDir()), "trainer.seed=1", "data.generated_val_size=16", "workflow.n_parallel_tasks=32"}
				c := smallConfig(b, append(sets, mode.sets...)...)
				be, err := local.OpenConfig(context.Background(), c, "")
				if err != nil {
					b.Fatal(err)
				}
				tr, err := New(context.Background(), c, Options{Backend: slowBackend{be, lat / 2}, Rollouts: mustClient(b, "policy", urls...)})
				if err != nil {
					b.Fatal(err)
				}
				res, err := tr.Train(context.Background())
				tr.Close()
				if err != nil {
					b.Fatal(err)
				}
				reportSteps(b, c.Trainer.DefaultLocalDir, res, mode.name == "async")
			}
		})
	}
}
