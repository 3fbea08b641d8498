package local

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// frozenlakeConfig is the default model with frozenlake's context.
func frozenlakeConfig() Config {
	c := DefaultConfig()
	c.Context = 1536
	return c
}

// frozenlakeLoad is a frozenlake-like step: a ~450-token system prompt
// shared by every episode, a ~100-token observation a turn, replies of up
// to maxReply tokens, 5 turns (prompts of ~570 to ~1,050 tokens with
// replies of 10, to ~1,430 with 100).
func frozenlakeLoad(groups, groupSize, maxReply int) multiTurnLoad {
	return multiTurnLoad{groups: groups, groupSize: groupSize, turns: 5, systemLen: 450, obsLen: 100,
		params: backend.SamplingParams{Temperature: 1, MaxTokens: maxReply}}
}

// BenchmarkSampleMultiTurn is a frozenlake-like rollout step on the
// embedded policy: 8 episodes of different tasks at once, each 5 turns of
// one one-sample request, on a new snapshot per iteration (a training
// step's). "reuse" is the prefix cache as it is; "whole" matches whole
// prompts only, as before partial reuse.
func BenchmarkSampleMultiTurn(b *testing.B) {
	for _, mode := range []string{"reuse", "whole"} {
		b.Run(mode, func(b *testing.B) {
			benchMultiTurn(b, frozenlakeLoad(8, 1, 10), defaultPrefixCacheLimit(frozenlakeConfig()), mode == "reuse")
		})
	}
}

// BenchmarkSampleMultiTurnBound is a frozenlake training step's rollouts,
// 8 tasks × rollout.n 8 = 64 episodes of 5 turns with replies of up to 100
// tokens, all at once, under bounds of 8 to 64 whole contexts (27 ≈ 64
// MiB, the bound before partial reuse; 64: the default): how much reuse
// each keeps, with an env step that takes no time (frozenlake's) and one
// that takes 3 s; "whole" is the step with whole prompts only. An
// iteration takes 10–60 s; run it with -benchtime 1x.
func BenchmarkSampleMultiTurnBound(b *testing.B) {
	cfg := frozenlakeConfig().withDefaults()
	b.Run("whole", func(b *testing.B) {
		benchMultiTurn(b, frozenlakeLoad(8, 8, 100), defaultPrefixCacheLimit(cfg), false)
	})
	for _, env := range []time.Duration{0, 3 * time.Second} {
		for _, contexts := range []int64{8, 16, 27, 32, prefixCacheContexts} {
			b.Run(fmt.Sprintf("env=%v/contexts=%d", env, contexts), func(b *testing.B) {
				wl := frozenlakeLoad(8, 8, 100)
				wl.envTime = env
				benchMultiTurn(b, wl, contexts*int64(cfg.Context)*prefixRowBytes(cfg), true)
			})
		}
	}
}

// benchMultiTurn runs wl on a new snapshot per iteration whose cache has
// the bound limit, with partial reuse on or off, and reports the share of
// prompt tokens reused and the tokens prefilled.
func benchMultiTurn(b *testing.B, wl multiTurnLoad, limit int64, partial bool) {
	ctx := context.Background()
	base := benchSnapshot(b, frozenlakeConfig())
	var asked, prefilled, requests, replies, peak int64
	cpu0 := cpuSeconds()
	for b.Loop() {
		snap := withPrefixReuse(base, limit, partial)
		st, err := wl.run(ctx, snap)
		if err != nil {
			b.Fatal(err)
		}
		pc := snap.prefixCache()
		asked += pc.promptTokens.Load()
		prefilled += pc.prefillTokens.Load()
		requests += st.requests
		replies += st.replyTokens
		_, _, bytes := pc.stats()
		peak = max(peak, bytes)
	}
	n := float64(b.N)
	b.ReportMetric(100*(1-float64(prefilled)/float64(asked)), "reuse-%")
	b.ReportMetric(float64(prefilled)/n, "prefilled-tokens/op")
	b.ReportMetric(float64(asked)/n, "prompt-tokens/op")
	b.ReportMetric(float64(requests)/n, "requests/op")
	b.ReportMetric(float64(replies)/n, "reply-tokens/op")
	b.ReportMetric(float64(peak)/(1<<20), "cache-MiB")
	if cpu := cpuSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(cpu*1e3/n, "cpu-ms/op")
	}
}
