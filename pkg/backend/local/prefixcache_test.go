package local

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// referenceSample is Snapshot.Sample as it was before the prefix cache and
// the scratch pool: a fresh prefill per request and a fresh one-row
// decoder per worker, copied from the prefill's cache.
func referenceSample(t *testing.T, s *Snapshot, req backend.SampleRequest) backend.SampleResult {
	t.Helper()
	cfg := s.w.cfg
	if err := validateSampleRequest(&req, cfg.Context); err != nil {
		t.Fatal(err)
	}
	n := max(req.NumSamples, 1)
	prefill := newDecoder(cfg, len(req.Prompt))
	first := slices.Clone(prefill.step(s.w, req.Prompt))
	seed := uint64(*req.Params.Seed)
	out := make([]backend.SampledSequence, n)
	for i := range n {
		dec := newDecoder(cfg, 1)
		rows := prefill.pos * 3 * cfg.DModel
		for l := range dec.caches {
			copy(dec.caches[l][:rows], prefill.caches[l][:rows])
		}
		dec.pos = prefill.pos
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		seq, err := s.decode(context.Background(), dec, first, len(req.Prompt), req.Params, rng, make([]float64, TokenizerVocab))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = seq
	}
	return backend.SampleResult{Sequences: out}
}

// withPrefixLimit is a new snapshot of s's weights whose cache holds limit
// bytes (≤ 0: no cache).
func withPrefixLimit(s *Snapshot, limit int64) *Snapshot { return withPrefixReuse(s, limit, true) }

// withPrefixReuse is withPrefixLimit with partial reuse on or off (off:
// whole prompts only, the cache as it was before partial reuse).
func withPrefixReuse(s *Snapshot, limit int64, partial bool) *Snapshot {
	c := &Snapshot{name: s.name, version: s.version, w: s.w, workers: s.workers}
	c.prefixOnce.Do(func() {
		c.prefixes = newPrefixCache(c.w, limit)
		c.prefixes.partial = partial
	})
	return c
}

func arithPrompt(i int) []int { return chatPrompt(fmt.Sprintf("%d+%d=", i%10, i/10%10)) }

func TestPrefixCacheMatchesUncached(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []Config{smallConfig(), DefaultConfig()} {
		b := newTestBackend(t, cfg)
		s := publish(t, b)
		cached := withPrefixLimit(s, defaultPrefixCacheLimit(s.w.cfg))
		off := withPrefixLimit(s, 0)
		params := []backend.SamplingParams{
			{Temperature: 1, MaxTokens: 3},
			{Temperature: 1, MaxTokens: 12},
			{Temperature: 0.7, TopK: 5, MaxTokens: 8},
			{Temperature: 1.3, TopP: 0.9, MaxTokens: 8, Stop: []string{"1"}},
			{Temperature: 0, MaxTokens: 6},
			{Temperature: 1, StopTokenIDs: []int{'3', '4'}},
		}
		for pi, p := range params {
			for _, n := range []int{1, 5} {
				for sd := range int64(3) {
					p.Seed = seed(sd*7 + int64(pi))
					req := backend.SampleRequest{Prompt: arithPrompt(pi + int(sd)), NumSamples: n, Params: p}
					want := referenceSample(t, s, req)
					for _, snap := range []*Snapshot{off, cached, cached, s} { // miss, then hit
						got, err := snap.Sample(ctx, req)
						if err != nil {
							t.Fatal(err)
						}
						if !reflect.DeepEqual(got, want) {
							t.Fatalf("config %+v params %+v n=%d: cached sampling differs from the uncached reference:\n got %+v\nwant %+v", cfg, p, n, got, want)
						}
					}
				}
			}
		}
		if prompts, _, _ := cached.prefixCache().stats(); prompts == 0 {
			t.Fatal("nothing was cached")
		}
		checkTrie(t, cached.prefixCache())
	}
}

// TestPrefixCacheConcurrent is GRPO's pattern: groups of identical
// prompts, each request one sample, all at once. Run it with -race.
func TestPrefixCacheConcurrent(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	s := publish(t, b)
	const prompts, group = 4, 8
	reqs := make([]backend.SampleRequest, prompts*group)
	for i := range reqs {
		reqs[i] = backend.SampleRequest{Prompt: arithPrompt(i / group), NumSamples: 1 + i%2,
			Params: backend.SamplingParams{Temperature: 1, MaxTokens: 5, Seed: seed(int64(i))}}
	}
	want := make([]backend.SampleResult, len(reqs))
	for i, r := range reqs {
		want[i] = referenceSample(t, s, r)
	}
	for round := range 3 {
		snap := withPrefixLimit(s, defaultPrefixCacheLimit(s.w.cfg))
		got := make([]backend.SampleResult, len(reqs))
		var wg sync.WaitGroup
		for i, r := range reqs {
			wg.Go(func() {
				res, err := snap.Sample(ctx, r)
				if err != nil {
					t.Error(err)
				}
				got[i] = res
			})
		}
		wg.Wait()
		for i := range reqs {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("round %d request %d: concurrent result differs from the sequential one:\n got %+v\nwant %+v", round, i, got[i], want[i])
			}
		}
		// Each distinct prompt is prefilled once, whatever the interleaving.
		if n := snap.prefixCache().prefills.Load(); n != prompts {
			t.Fatalf("round %d: %d prefills for %d distinct prompts", round, n, prompts)
		}
	}
}

func TestPrefixCacheBounded(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	s := publish(t, b)
	// An arith prompt is one block and a tail of 7 tokens; no two share
	// the block.
	p0 := arithPrompt(0)
	blocks := len(p0) / prefixBlock
	one := int64(blocks)*prefixNodeBytes(s.w.cfg, prefixBlock, len(promptKey(p0[:prefixBlock])), false) +
		prefixNodeBytes(s.w.cfg, len(p0)-blocks*prefixBlock, len(promptKey(p0[blocks*prefixBlock:])), true)
	limit := 3*one + one/2
	// Whole prompts only: a partial hit would keep another prompt's block
	// recent without its tail, and this test counts whole prompts.
	snap := withPrefixReuse(s, limit, false)
	pc := snap.prefixCache()
	req := func(i int) backend.SampleRequest {
		return backend.SampleRequest{Prompt: arithPrompt(i), Params: backend.SamplingParams{Temperature: 1, MaxTokens: 2, Seed: seed(1)}}
	}
	for i := range 10 {
		if _, err := snap.Sample(ctx, req(i)); err != nil {
			t.Fatal(err)
		}
		prompts, _, bytes := pc.stats()
		if bytes > limit || prompts != min(i+1, 3) {
			t.Fatalf("after %d prompts: %d prompts, %d bytes cached; bound %d bytes (3 prompts)", i+1, prompts, bytes, limit)
		}
		checkTrie(t, pc)
	}
	// The most recent prompt is served from the cache, the oldest was
	// evicted and is prefilled again.
	n := pc.prefills.Load()
	snap.Sample(ctx, req(9))
	if pc.prefills.Load() != n {
		t.Fatal("the most recent prompt was prefilled again")
	}
	snap.Sample(ctx, req(0))
	if pc.prefills.Load() != n+1 {
		t.Fatal("the oldest prompt was not evicted")
	}

	// A prompt larger than the whole bound is not kept whole (its first
	// blocks may be).
	tiny := withPrefixLimit(s, one-1)
	if _, err := tiny.Sample(ctx, req(0)); err != nil {
		t.Fatal(err)
	}
	if prompts, _, bytes := tiny.prefixCache().stats(); prompts != 0 || bytes > one-1 {
		t.Fatalf("an oversized prompt was cached: %d prompts, %d bytes", prompts, bytes)
	}
	checkTrie(t, tiny.prefixCache())
}

func TestPrefixCacheDefaultLimit(t *testing.T) {
	contexts := func(c Config, n int64) int64 { return n * int64(c.Context) * 4 * int64(c.Layers*3*c.DModel) }
	for _, tc := range []struct {
		name string
		c    Config
		want func(Config) int64
	}{
		{"default model", DefaultConfig(), func(Config) int64 { return 64 << 20 }},
		{"frozenlake's context", Config{Layers: 2, DModel: 64, Heads: 4, Context: 1536}, func(c Config) int64 { return contexts(c, 64) }},
		{"a wider model", Config{Layers: 4, DModel: 128, Heads: 4, Context: 1024}, func(Config) int64 { return 256 << 20 }},
		{"a large model", Config{Layers: 12, DModel: 768, Heads: 12, Context: 1024}, func(c Config) int64 { return contexts(c, 8) }},
	} {
		c := tc.c.withDefaults()
		if got, want := defaultPrefixCacheLimit(c), tc.want(c); got != want {
			t.Errorf("%s: limit %d, want %d", tc.name, got, want)
		}
	}
}

// TestPrefixCacheNotSharedAcrossSnapshots: a prompt cached by one snapshot
// is prefilled again, with the new weights, by the next.
func TestPrefixCacheNotSharedAcrossSnapshots(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	s1 := publish(t, b)
	prompt := chatPrompt("5+5=")
	req := backend.SampleRequest{Prompt: prompt, NumSamples: 2, Params: backend.SamplingParams{Temperature: 1, MaxTokens: 6, Seed: seed(3)}}
	r1, err := s1.Sample(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	d := datumFor(prompt, r1.Sequences[0], 1)
	b.ForwardBackward(ctx, []backend.Datum{d}, backend.Loss{Name: backend.LossImportanceSampling})
	if _, err := b.OptimStep(ctx, backend.DefaultAdamParams(0.05)).Result(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := publish(t, b)
	r2, err := s2.Sample(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r2, referenceSample(t, s2, req)) {
		t.Fatal("the second snapshot did not sample from its own weights")
	}
	if slices.Equal(r1.Sequences[0].Logprobs, r2.Sequences[0].Logprobs) {
		t.Fatal("the second snapshot reused the first one's prefill")
	}
	if n := s2.prefixCache().prefills.Load(); n != 1 {
		t.Fatalf("the second snapshot prefilled %d times, want 1", n)
	}
	if again, _ := s1.Sample(ctx, req); !reflect.DeepEqual(again, r1) {
		t.Fatal("the first snapshot's cached prompt changed")
	}
}

// TestPrefixCacheEntryUnchanged: sampling many sequences from a cached
// prompt leaves every cached row exactly as a fresh prefill makes it.
func TestPrefixCacheEntryUnchanged(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	s := publish(t, b)
	prompt := arithPrompt(7)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, err := s.Sample(ctx, backend.SampleRequest{Prompt: prompt, NumSamples: 3, Params: backend.SamplingParams{Temperature: 1, Seed: seed(int64(i))}})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if s.prefixCache().match(prompt, false) == nil {
		t.Fatal("the prompt is not cached")
	}
	checkTrie(t, s.prefixCache())
	checkRows(t, s)
}

func TestPrefixCacheCancelled(t *testing.T) {
	b := newTestBackend(t, smallConfig())
	s := publish(t, b)
	req := backend.SampleRequest{Prompt: arithPrompt(3), Params: backend.SamplingParams{Temperature: 1, MaxTokens: 4, Seed: seed(2)}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Sample(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: err %v", err)
	}
	got, err := s.Sample(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, referenceSample(t, s, req)) {
		t.Fatal("a request after a cancelled one differs from the reference")
	}
}

func TestPromptKeyUnambiguous(t *testing.T) {
	seen := map[string][]int{}
	for _, p := range [][]int{{1, 2}, {12}, {1, 2, 0}, {128}, {0, 128}, {128, 0}, {260}, {2, 4}, {516}} {
		k := promptKey(p)
		if q, ok := seen[k]; ok {
			t.Fatalf("prompts %v and %v share a key", p, q)
		}
		seen[k] = p
	}
}

// BenchmarkSampleGRPOGroupsNoCache is BenchmarkSampleGRPOGroups with the
// prefix cache off (pooled decoders only): it separates the two gains.
func BenchmarkSampleGRPOGroupsNoCache(b *testing.B) {
	benchGRPOGroups(b, func(base *Snapshot) *Snapshot { return withPrefixLimit(base, 0) })
}

// TestPrefixCachePrefillPanic: a prefill that panics (here on weights
// without a token embedding) fails its requests instead of the process.
func TestPrefixCachePrefillPanic(t *testing.T) {
	b := newTestBackend(t, smallConfig())
	s := publish(t, b)
	bw := *s.w
	bw.tokEmb = nil
	broken := &Snapshot{w: &bw, workers: 1}
	req := backend.SampleRequest{Prompt: arithPrompt(1), Params: backend.SamplingParams{Temperature: 1, MaxTokens: 2, Seed: seed(1)}}
	if _, err := broken.Sample(context.Background(), req); err == nil {
		t.Fatal("a panicking prefill gave no error")
	}
	if _, nodes, _ := broken.prefixCache().stats(); nodes != 0 {
		t.Fatal("a failed prefill was cached")
	}
}

// stats are the number of whole prompts cached (tails), of nodes, and
// the accounted bytes.
func (pc *prefixCache) stats() (prompts, nodes int, bytes int64) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.tails, pc.lru.Len(), pc.bytes
}
