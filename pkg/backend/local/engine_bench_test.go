package local

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// ServeBenchTokens is the reply length of the serving benchmarks: every
// request generates exactly this many tokens (ignore_eos).
const serveBenchTokens = 64

// BenchmarkEngine is the batched engine's own rate, with no HTTP: C
// clients each submit a chat request of 64 tokens and wait for it, twice
// per iteration (closed loop). It is the ideal the HTTP server is measured
// against (pkg/backend/local/openai BenchmarkServe).
func BenchmarkEngine(b *testing.B) {
	for _, c := range []int{1, 8, 64, 256} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			be, err := New(Options{Config: DefaultConfig()})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			ts, _ := be.PublishSampler(context.Background(), "").Result(context.Background())
			eng := NewEngine(ts.(*Snapshot), "bench", EngineOptions{MaxNumSeqs: 256})
			defer eng.Close()
			prompt := chatPrompt("12+34=")
			const rounds = 2
			generated := 0
			var mu sync.Mutex
			cpu0 := cpuSeconds()
			for b.Loop() {
				var wg sync.WaitGroup
				for range c {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range rounds {
							st, err := eng.Submit(context.Background(), GenRequest{Prompt: prompt, Params: backend.SamplingParams{Temperature: 1, MaxTokens: serveBenchTokens}, IgnoreEOS: true, PromptLogprobs: -1})
							if err != nil {
								b.Error(err)
								return
							}
							n := 0
							for {
								evs, err := st[0].Next(context.Background())
								if err != nil {
									break
								}
								for _, ev := range evs {
									if ev.HasToken {
										n++
									}
								}
							}
							mu.Lock()
							generated += n
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
			}
			b.ReportMetric(float64(generated)/b.Elapsed().Seconds(), "tokens/s")
			if cpu := cpuSeconds() - cpu0; cpu > 0 {
				b.ReportMetric(float64(generated)/cpu, "tokens/cpu-s")
			}
			st := eng.Stats()
			b.ReportMetric(float64(st.GenTokens)/float64(max(st.Forwards, 1)), "seqs/forward")
		})
	}
}
