package rollout

import (
	"context"
	"runtime"
	"testing"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// bigEpisodeWorkflow returns an episode carrying ~4 KB of tokens, like a
// short real one, at once.
type bigEpisodeWorkflow struct{}

func (bigEpisodeWorkflow) Run(_ context.Context, task episode.Task, id string) (*episode.Episode, error) {
	ids := make([]int, 512)
	return &episode.Episode{ID: id, Task: task, TerminationReason: episode.TerminationEnvDone,
		Trajectories: []episode.Trajectory{{Steps: []episode.Step{{ResponseIDs: ids}}}}}, nil
}

// BenchmarkEvalMemory: 100,000 episodes of ~4 KB through Run (every
// episode kept, as eval did) and through Stream into an EvalAggregator
// (as eval does now). peak-heap-MB samples the live heap every 1,000
// episodes.
func BenchmarkEvalMemory(b *testing.B) {
	const n = 100000
	tasks := makeTasks(n)
	for _, mode := range []string{"run", "stream"} {
		b.Run(mode, func(b *testing.B) {
			e, err := NewEngine(func() (Workflow, error) { return bigEpisodeWorkflow{}, nil }, EngineOptions{NParallel: 64})
			if err != nil {
				b.Fatal(err)
			}
			var peak uint64
			sample := func() {
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapAlloc)
			}
			e.opts.OnEvent = func(ev Event) {
				if ev.Kind == EventFinished && ev.TaskIndex%1000 == 0 {
					sample()
				}
			}
			runtime.GC()
			b.ReportAllocs()
			for b.Loop() {
				if mode == "run" {
					eps, err := e.Run(context.Background(), tasks)
					if err != nil {
						b.Fatal(err)
					}
					sample()
					_ = Summarize(eps, 1)
				} else {
					agg := NewEvalAggregator(1)
					if err := e.Stream(context.Background(), tasks, func(ep *episode.Episode) error { agg.Add(ep); return nil }); err != nil {
						b.Fatal(err)
					}
					sample()
					_ = agg.Summary()
				}
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
		})
	}
}

// BenchmarkHugeBody: a 64 MB answer, plain or as a gzip bomb, against
// the default 32 MiB cap; bytes/op is what the client allocated to refuse
// it (the fake server's writes are counted too).
func BenchmarkHugeBody(b *testing.B) {
	for _, f := range []fakevllm.Fault{fakevllm.FaultHugeBody, fakevllm.FaultGzipBomb} {
		b.Run(f.String(), func(b *testing.B) {
			s := fakevllm.New(fakevllm.Config{HugeBody: 64 << 20, FaultFor: func(string, int64) fakevllm.Fault { return f }})
			defer s.Close()
			c, err := NewClient(Options{Endpoints: []string{s.URL}, Model: "fake-model", Retry: RetryPolicy{MaxAttempts: 1}})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Sample(context.Background(), chatReq("hi")); err == nil {
					b.Fatal("no error")
				}
			}
		})
	}
}
