package local

import (
	"context"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// multiTurnConfig has room for a few turns and is narrow enough for
// -race.
func multiTurnConfig() Config {
	return Config{Layers: 2, DModel: 16, Heads: 2, Context: 640, Seed: 5}
}

// testLoad is a short frozenlake-like conversation for multiTurnConfig.
func testLoad(params backend.SamplingParams) multiTurnLoad {
	return multiTurnLoad{groups: 1, groupSize: 1, turns: 5, systemLen: 70, obsLen: 40, params: params}
}

// checkTrie verifies the cache's invariants: every cached node is linked
// under its parent and in the LRU behind all its ancestors, blocks have
// prefixBlock tokens, tails fewer and no children, rows have the nodes'
// shape, and the counts and bytes add up within the bound.
func checkTrie(t *testing.T, pc *prefixCache) {
	t.Helper()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	rank := map[*prefixNode]int{}
	for el := pc.lru.Front(); el != nil; el = el.Next() {
		rank[el.Value.(*prefixNode)] = len(rank)
	}
	c := pc.w.cfg
	var bytes int64
	nodes, tails := 0, 0
	var visit func(n *prefixNode)
	visit = func(n *prefixNode) {
		for key, ch := range n.children {
			nodes++
			r, ok := rank[ch]
			switch {
			case !ok:
				t.Fatal("a node in the trie is not in the LRU")
			case ch.parent != n || ch.key != key || promptKey(ch.tokens) != key:
				t.Fatal("a node is linked under the wrong parent or key")
			case n != &pc.root && rank[n] > r:
				t.Fatal("a node is behind one of its descendants in the LRU")
			case ch.isTail() && (len(ch.tokens) >= prefixBlock || len(ch.children) > 0):
				t.Fatalf("a tail of %d tokens with %d children", len(ch.tokens), len(ch.children))
			case !ch.isTail() && len(ch.tokens) != prefixBlock:
				t.Fatalf("a block of %d tokens", len(ch.tokens))
			case len(ch.rows) != c.Layers || len(ch.rows[0]) != len(ch.tokens)*3*c.DModel:
				t.Fatal("a node's rows do not match its tokens")
			}
			if ch.isTail() {
				tails++
			}
			bytes += ch.bytes
			visit(ch)
		}
	}
	visit(&pc.root)
	if nodes != pc.lru.Len() || tails != pc.tails || bytes != pc.bytes || (pc.limit > 0 && bytes > pc.limit) {
		t.Fatalf("trie: %d nodes, %d tails, %d bytes; LRU %d nodes, counted %d tails, %d bytes, bound %d",
			nodes, tails, bytes, pc.lru.Len(), pc.tails, pc.bytes, pc.limit)
	}
}

// checkRows verifies every cached node against a fresh one-piece prefill
// of the tokens that lead to it: the rows bit for bit, and a tail's
// logits. One prefill per leaf covers the leaf's ancestors.
func checkRows(t *testing.T, s *Snapshot) {
	t.Helper()
	pc := s.prefixCache()
	pc.mu.Lock()
	var leaves []*prefixNode
	var visit func(n *prefixNode)
	visit = func(n *prefixNode) {
		for _, ch := range n.children {
			if len(ch.children) == 0 {
				leaves = append(leaves, ch)
			}
			visit(ch)
		}
	}
	visit(&pc.root)
	pc.mu.Unlock()
	d3 := 3 * s.w.cfg.DModel
	for _, leaf := range leaves {
		var path []*prefixNode
		var toks []int
		for a := leaf; a != &pc.root; a = a.parent {
			path = append([]*prefixNode{a}, path...)
			toks = append(slices.Clone(a.tokens), toks...)
		}
		if len(toks) == 0 {
			continue // the tail of no tokens of a prompt of none: not a prompt Sample takes
		}
		dec := newDecoderCap(s.w.cfg, len(toks), len(toks))
		logits := dec.step(s.w, toks)
		at := 0
		for _, n := range path {
			for l := range n.rows {
				if !slices.Equal(n.rows[l], dec.caches[l][at*d3:(at+len(n.tokens))*d3]) {
					t.Fatalf("the rows of a node at %d..%d, layer %d, differ from a fresh prefill", at, at+len(n.tokens), l)
				}
			}
			at += len(n.tokens)
		}
		if leaf.isTail() && !slices.Equal(leaf.logits, logits) {
			t.Fatalf("the logits of a %d-token prompt differ from a fresh prefill", len(toks))
		}
	}
}

// TestPrefixChunkedPrefillBitIdentical is what makes reuse exact: a
// prompt prefilled in pieces on top of earlier rows gives the same rows
// and logits, bit for bit, as one step over the whole prompt.
func TestPrefixChunkedPrefillBitIdentical(t *testing.T) {
	// Context 128 and up take gonum's parallel product for the prefill.
	for _, cfg := range []Config{smallConfig(), DefaultConfig(), {Layers: 2, DModel: 64, Heads: 4, Context: 600, Seed: 2}} {
		cfg = cfg.withDefaults()
		w := bindWeights(cfg, initParams(cfg))
		rng := rand.New(rand.NewPCG(uint64(cfg.Context), 1))
		n := cfg.Context - 1
		toks := make([]int, n)
		for i := range toks {
			toks[i] = rng.IntN(TokenizerVocab)
		}
		one := newDecoderCap(cfg, n, n)
		want := slices.Clone(one.step(w, toks))
		for _, cuts := range [][]int{{1}, {prefixBlock}, {n / 2}, {n - 1}, {7, 13, 100}, {prefixBlock, 2 * prefixBlock, 3*prefixBlock + 5}} {
			dec := newDecoderCap(cfg, n, n)
			var got []float32
			prev := 0
			for _, c := range append(cuts, n) {
				if c <= prev || c > n {
					continue
				}
				got = dec.step(w, toks[prev:c])
				prev = c
			}
			for l := range dec.caches {
				if !slices.Equal(dec.caches[l], one.caches[l]) {
					t.Fatalf("context %d, pieces ending at %v: layer %d rows differ from a one-piece prefill", cfg.Context, cuts, l)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("context %d, pieces ending at %v: logits differ from a one-piece prefill", cfg.Context, cuts)
			}
		}
	}
}

// TestPrefixCacheMultiTurn: turn k's prompt is turn k-1's prompt, its
// reply and a new observation. Every turn samples exactly what an
// uncached run does, and prefills only what follows the longest cached
// prefix: for one sample a turn, the previous prompt or the whole blocks
// of the previous prompt + reply, whichever is longer.
func TestPrefixCacheMultiTurn(t *testing.T) {
	ctx := context.Background()
	cfg := multiTurnConfig()
	b := newTestBackend(t, cfg)
	s := publish(t, b)
	cases := []struct {
		name   string
		params backend.SamplingParams
		n      int
	}{
		{"temperature 1", backend.SamplingParams{Temperature: 1, MaxTokens: 12}, 1},
		{"greedy", backend.SamplingParams{Temperature: 0, MaxTokens: 20}, 1},
		{"replies over blocks", backend.SamplingParams{Temperature: 1, MaxTokens: 40}, 1},
		{"top-k, 3 samples", backend.SamplingParams{Temperature: 0.8, TopK: 8, MaxTokens: 9}, 3},
		{"top-p, stop string", backend.SamplingParams{Temperature: 1.2, TopP: 0.9, MaxTokens: 25, Stop: []string{"e"}}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			limit := defaultPrefixCacheLimit(cfg)
			cached, whole := withPrefixLimit(s, limit), withPrefixReuse(s, limit, false)
			pc := cached.prefixCache()
			wl := testLoad(tc.params)
			group := 0
			prompt := wl.firstPrompt(group)
			var prevLen, prevFed int
			var asked int64
			for k := range wl.turns {
				p := tc.params
				p.Seed = episodeSeed(0, k)
				req := backend.SampleRequest{Prompt: prompt, NumSamples: tc.n, Params: p}
				want := referenceSample(t, s, req)
				before := pc.prefillTokens.Load()
				got, err := cached.Sample(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("turn %d: sampling with reuse differs from the uncached reference:\n got %+v\nwant %+v", k, got, want)
				}
				if got, _ := whole.Sample(ctx, req); !reflect.DeepEqual(got, want) {
					t.Fatalf("turn %d: sampling with whole prompts only differs from the uncached reference", k)
				}
				asked += int64(len(prompt))
				reused := len(prompt) - int(pc.prefillTokens.Load()-before)
				switch {
				case k == 0 && reused != 0:
					t.Fatalf("turn 0 reused %d tokens of an empty cache", reused)
				case k > 0 && reused < prevLen:
					t.Fatalf("turn %d reused %d tokens, less than the previous prompt's %d", k, reused, prevLen)
				case k > 0 && tc.n == 1 && reused != max(prevFed/prefixBlock*prefixBlock, prevLen):
					t.Fatalf("turn %d reused %d tokens; the previous prompt has %d and its reply fed %d", k, reused, prevLen, prevFed)
				}
				checkTrie(t, pc)
				reply := got.Sequences[0].Tokens
				prevLen, prevFed = len(prompt), len(prompt)+len(reply)-1
				prompt = nextTurn(prompt, reply, observation(group, k+1, wl.obsLen))
				if len(prompt)+p.MaxTokens >= cfg.Context {
					t.Fatalf("turn %d: the conversation outgrew the context; shorten the test's turns", k)
				}
			}
			if got := whole.prefixCache().prefillTokens.Load(); got != asked {
				t.Fatalf("with whole prompts only %d of %d prompt tokens were prefilled", got, asked)
			}
			if r := reuseRatio(pc); r < 0.5 {
				t.Fatalf("reuse %.2f of the prompt tokens", r)
			}
			checkRows(t, cached)
		})
	}
}

// TestPrefixCacheDivergence: a prompt reuses exactly the rows of the
// tokens it shares with a cached one, wherever they diverge (inside a
// block, at a block's edge, in the tail), and never a row past that.
func TestPrefixCacheDivergence(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, multiTurnConfig())
	s := publish(t, b)
	base := append(testLoad(backend.SamplingParams{}).firstPrompt(0), []int{'o', 'k'}...)
	n := len(base)
	if n%prefixBlock == 0 || n < 4*prefixBlock {
		t.Fatalf("base prompt of %d tokens; the cases want a tail", n)
	}
	changed := func(at int) []int {
		p := slices.Clone(base)
		p[at] = (p[at] + 1) % 256
		return p
	}
	cases := []struct {
		name   string
		prompt []int
		reused int
	}{
		{"first token", changed(0), 0},
		{"second token", changed(1), 1},
		{"inside the first block", changed(9), 9},
		{"last token of a block", changed(2*prefixBlock - 1), 2*prefixBlock - 1},
		{"first token of a block", changed(2 * prefixBlock), 2 * prefixBlock},
		{"inside a later block", changed(3*prefixBlock + 5), 3*prefixBlock + 5},
		{"inside the tail", changed(n - 2), n - 2},
		{"last token", changed(n - 1), n - 1},
		{"a longer prompt", append(slices.Clone(base), 'x', 'y'), n},
		{"the same prompt", slices.Clone(base), n},
		{"a prefix ending a block", base[:4*prefixBlock], 4*prefixBlock - 1},
		{"a prefix ending inside a block", base[:4*prefixBlock+3], 4*prefixBlock + 2},
		{"a prefix ending inside the first block", base[:5], 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := withPrefixLimit(s, defaultPrefixCacheLimit(s.w.cfg))
			pc := snap.prefixCache()
			params := backend.SamplingParams{Temperature: 1, MaxTokens: 4, Seed: seed(3)}
			if _, err := snap.Sample(ctx, backend.SampleRequest{Prompt: base, Params: params}); err != nil {
				t.Fatal(err)
			}
			before := pc.prefillTokens.Load()
			req := backend.SampleRequest{Prompt: tc.prompt, NumSamples: 2, Params: params}
			got, err := snap.Sample(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if reused := len(tc.prompt) - int(pc.prefillTokens.Load()-before); reused != tc.reused {
				t.Fatalf("reused %d tokens, want %d", reused, tc.reused)
			}
			if !reflect.DeepEqual(got, referenceSample(t, s, req)) {
				t.Fatal("sampling differs from the uncached reference")
			}
			checkTrie(t, pc)
		})
	}
}

// TestPrefixCacheMultiTurnBounded: conversations under a bound of a few
// contexts evict as they go, stay within the bound and a valid trie, and
// still sample exactly what an uncached run does.
func TestPrefixCacheMultiTurnBounded(t *testing.T) {
	ctx := context.Background()
	cfg := multiTurnConfig()
	b := newTestBackend(t, cfg)
	s := publish(t, b)
	wl := multiTurnLoad{groups: 3, groupSize: 2, turns: 4, systemLen: 70, obsLen: 40,
		params: backend.SamplingParams{Temperature: 1, MaxTokens: 15}}
	for _, contexts := range []int64{0, 1, 2} {
		limit := contexts * int64(cfg.Context) * prefixRowBytes(cfg.withDefaults())
		snap := withPrefixLimit(s, limit)
		pc := snap.prefixCache()
		for ep := range wl.groups * wl.groupSize {
			_, _, err := wl.runEpisode(ep, func(r backend.SampleRequest) (backend.SampleResult, error) {
				got, err := snap.Sample(ctx, r)
				if err == nil && !reflect.DeepEqual(got, referenceSample(t, s, r)) {
					t.Fatalf("bound of %d contexts: sampling differs from the uncached reference", contexts)
				}
				checkTrie(t, pc)
				return got, err
			}, cfg.Context)
			if err != nil {
				t.Fatal(err)
			}
		}
		pc.mu.Lock()
		evicted := pc.evicted
		pc.mu.Unlock()
		if contexts > 0 && evicted == 0 {
			t.Fatalf("a bound of %d contexts never filled; the test no longer tests eviction", contexts)
		}
		if contexts == 0 {
			if _, nodes, _ := pc.stats(); nodes != 0 {
				t.Fatalf("with caching off %d nodes were cached", nodes)
			}
		}
		checkRows(t, snap)
	}
}

// TestPrefixCacheMultiTurnConcurrent runs GRPO groups of multi-turn
// episodes at once, with duplicate requests cancelled at random moments,
// under a generous and a tight bound. Run it with -race.
func TestPrefixCacheMultiTurnConcurrent(t *testing.T) {
	cfg := multiTurnConfig()
	b := newTestBackend(t, cfg)
	s := publish(t, b)
	wl := multiTurnLoad{groups: 2, groupSize: 3, turns: 4, systemLen: 70, obsLen: 40,
		params: backend.SamplingParams{Temperature: 1, MaxTokens: 10}}
	episodes := wl.groups * wl.groupSize
	// Each episode's requests and results, sampled without a cache.
	wantReqs := make([][]backend.SampleRequest, episodes)
	wantRes := make([][]backend.SampleResult, episodes)
	for ep := range episodes {
		var err error
		wantReqs[ep], wantRes[ep], err = wl.runEpisode(ep, func(r backend.SampleRequest) (backend.SampleResult, error) {
			return referenceSample(t, s, r), nil
		}, cfg.Context)
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, contexts := range []int64{prefixCacheContexts, 1} {
		snap := withPrefixLimit(s, contexts*int64(cfg.Context)*prefixRowBytes(cfg.withDefaults()))
		var wg sync.WaitGroup
		for ep := range episodes {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(ep), uint64(contexts)))
				turn := 0
				_, _, err := wl.runEpisode(ep, func(r backend.SampleRequest) (backend.SampleResult, error) {
					// A duplicate whose caller gives up at some point.
					cctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
					dup := make(chan struct{})
					go func() {
						defer close(dup)
						if got, err := snap.Sample(cctx, r); err == nil && !reflect.DeepEqual(got, wantRes[ep][turn]) {
							t.Errorf("episode %d turn %d: a duplicate request differs from the uncached result", ep, turn)
						}
					}()
					got, err := snap.Sample(context.Background(), r)
					<-dup
					cancel()
					if err == nil && (!reflect.DeepEqual(r, wantReqs[ep][turn]) || !reflect.DeepEqual(got, wantRes[ep][turn])) {
						t.Errorf("episode %d turn %d: concurrent result differs from the uncached one", ep, turn)
					}
					turn++
					return got, err
				}, cfg.Context)
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		checkTrie(t, snap.prefixCache())
		checkRows(t, snap)
	}
}
