package local

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// BenchmarkSampleGRPOGroups is a GRPO rollout step against the embedded
// policy: 32 prompts × rollout.n 8, each request a separate one-sample
// Sample call and all 256 in flight at once, arith prompts of 23 tokens,
// max_tokens 3, default model. Each iteration samples from a new snapshot
// of the same weights, as each training step does, so nothing is cached
// from one iteration to the next.
func BenchmarkSampleGRPOGroups(b *testing.B) {
	benchGRPOGroups(b, func(base *Snapshot) *Snapshot {
		return &Snapshot{name: base.name, version: base.version, w: base.w, workers: base.workers}
	})
}

// benchGRPOGroups runs the GRPO step on a snapshot newSnap makes of the
// published one for every iteration.
func benchGRPOGroups(b *testing.B, newSnap func(base *Snapshot) *Snapshot) {
	ctx := context.Background()
	base := benchSnapshot(b, DefaultConfig())
	const prompts, group = 32, 8
	reqs := make([]backend.SampleRequest, 0, prompts*group)
	for p := range prompts {
		prompt := chatPrompt(fmt.Sprintf("%d+%d=", p%10, p/10))
		if len(prompt) != 23 {
			b.Fatalf("prompt of %d tokens, want 23", len(prompt))
		}
		for g := range group {
			reqs = append(reqs, backend.SampleRequest{Prompt: prompt, NumSamples: 1,
				Params: backend.SamplingParams{Temperature: 1, MaxTokens: 3, Seed: seed(int64(p*group + g))}})
		}
	}
	cpu0 := cpuSeconds()
	for b.Loop() {
		snap := newSnap(base)
		var wg sync.WaitGroup
		for _, r := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := snap.Sample(ctx, r); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	b.ReportMetric(float64(len(reqs))*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
	// CPU time is less sensitive than wall time to other work on the machine.
	if cpu := cpuSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(cpu*1e3/float64(b.N), "cpu-ms/op")
	}
}
