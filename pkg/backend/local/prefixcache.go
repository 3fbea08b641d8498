package local

// Prompt prefix cache of a Snapshot, in the spirit of vLLM's automatic
// prefix caching but simpler. GRPO sends rollout.n requests with the same
// prompt to one snapshot at once, each for one sample; for short replies
// the prompt's prefill is most of the work of a request. The cache keeps,
// per snapshot, the prefilled KV rows and next-token logits of whole
// prompts (exact match on the token ids). Concurrent requests for a prompt
// that is not cached yet share one prefill (singleflight); every request
// then copies the rows into its own decoder, so an entry is read-only from
// the moment it is published. Partial prefixes are not matched: GRPO's
// repeats are whole prompts, and prefilling a suffix on top of a cached
// prefix would be a second code path whose logits would have to be shown
// bit-identical to a one-piece prefill.
//
// The cache belongs to the snapshot, whose weights never change, so an
// entry can never be served against other weights, and it is freed with
// the snapshot (one training step).

import (
	"container/list"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/singleflight"
)

// defaultPrefixCacheBytes is the floor of a snapshot's cache bound. For
// the default model (2 layers, d_model 64) a 23-token prompt takes
// 2·23·192·4 B of q|k|v rows plus 261·4 B of logits ≈ 36 KB, so 64 MiB
// holds ~1,800 such prompts (the prompts of several steps' batches) or
// ~330 prompts filling the whole 128-token context.
const defaultPrefixCacheBytes = 64 << 20

// prefixCacheMinEntries is how many whole-context prompts the bound holds
// at least: for larger models 64 MiB could hold none, and the bound grows
// with the model instead (8 × the largest entry).
const prefixCacheMinEntries = 8

// prefixEntryOverhead approximates the bookkeeping of one entry (struct,
// list element, map slot) beyond its float data and key.
const prefixEntryOverhead = 256

// defaultPrefixCacheLimit is the byte bound of a snapshot's cache for c.
func defaultPrefixCacheLimit(c Config) int64 {
	return max(defaultPrefixCacheBytes, prefixCacheMinEntries*prefixEntryBytes(c, c.Context-1, 2*(c.Context-1)))
}

// prefixEntryBytes is the accounted size of an entry of a prompt of n
// tokens whose key is keyLen bytes.
func prefixEntryBytes(c Config, n, keyLen int) int64 {
	floats := c.Layers*n*3*c.DModel + TokenizerVocab
	return int64(4*floats + keyLen + prefixEntryOverhead)
}

// prefixEntry is a prefilled prompt. Nothing writes to it after
// newPrefixEntry returns.
type prefixEntry struct {
	key    string
	pos    int         // prompt length
	rows   [][]float32 // per layer: [pos, 3d] q|k|v rows of the prompt
	logits []float32   // next-token logits after the prompt
	bytes  int64
}

// newPrefixEntry prefills prompt exactly as Sample always has (one step
// over the whole prompt), so sampling from the entry gives the same tokens
// and logprobs bit for bit. The decoder's cache is sized to the prompt
// rather than the context, and becomes the entry's rows as they are.
func newPrefixEntry(w *weights, key string, prompt []int) *prefixEntry {
	c := w.cfg
	dec := newDecoderCap(c, len(prompt), len(prompt))
	logits := slices.Clone(dec.step(w, prompt))
	return &prefixEntry{key: key, pos: dec.pos, rows: dec.caches, logits: logits,
		bytes: prefixEntryBytes(c, dec.pos, len(key))}
}

// load makes dec's cache a copy of the prompt in e.
func (dec *decoder) load(e *prefixEntry) {
	for l, r := range e.rows {
		copy(dec.caches[l][:len(r)], r)
	}
	dec.pos = e.pos
}

// promptKey encodes token ids as uvarints: unambiguous, and 1–2 bytes a
// token for this vocabulary.
func promptKey(prompt []int) string {
	b := make([]byte, 0, 2*len(prompt))
	for _, t := range prompt {
		b = binary.AppendUvarint(b, uint64(t))
	}
	return string(b)
}

// prefixCache is an LRU of prefilled prompts bounded in bytes.
type prefixCache struct {
	w     *weights
	limit int64 // ≤ 0: no caching, every request prefills its own prompt
	sf    singleflight.Group

	mu      sync.Mutex
	entries map[string]*list.Element // of *prefixEntry
	lru     list.List                // front: most recently used
	bytes   int64

	prefills atomic.Int64 // prompts prefilled, for tests
}

func newPrefixCache(w *weights, limit int64) *prefixCache {
	return &prefixCache{w: w, limit: limit, entries: map[string]*list.Element{}}
}

// get returns the prefilled prompt, from the cache, from a prefill already
// running for the same prompt, or from a new one. A caller whose ctx ends
// stops waiting; the prefill it may have started still completes and is
// cached for the requests that share it.
func (pc *prefixCache) get(ctx context.Context, prompt []int) (*prefixEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := promptKey(prompt)
	if pc.limit <= 0 {
		pc.prefills.Add(1)
		return newPrefixEntry(pc.w, key, prompt), nil
	}
	if e := pc.lookup(key); e != nil {
		return e, nil
	}
	// The prefill runs in singleflight's goroutine and may outlive this
	// call, so it must not read the caller's slice.
	prompt = slices.Clone(prompt)
	ch := pc.sf.DoChan(key, func() (_ any, err error) {
		// singleflight re-raises a panic of fn on a goroutine of its own,
		// where nothing can recover it; make it the requests' error instead,
		// as a panic on the caller's goroutine could have been.
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("local: prefill of a %d-token prompt failed: %v", len(prompt), r)
			}
		}()
		// A flight that finished between our lookup and DoChan has
		// already cached the prompt.
		if e := pc.lookup(key); e != nil {
			return e, nil
		}
		pc.prefills.Add(1)
		e := newPrefixEntry(pc.w, key, prompt)
		pc.add(e)
		return e, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*prefixEntry), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (pc *prefixCache) lookup(key string) *prefixEntry {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	el, ok := pc.entries[key]
	if !ok {
		return nil
	}
	pc.lru.MoveToFront(el)
	return el.Value.(*prefixEntry)
}

// add caches e, evicting the least recently used entries beyond the
// bound. An entry larger than the whole bound is not cached (concurrent
// requests still shared its prefill).
func (pc *prefixCache) add(e *prefixEntry) {
	if e.bytes > pc.limit {
		return
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if _, ok := pc.entries[e.key]; ok {
		return
	}
	pc.entries[e.key] = pc.lru.PushFront(e)
	pc.bytes += e.bytes
	for pc.bytes > pc.limit {
		old := pc.lru.Back()
		oe := old.Value.(*prefixEntry)
		pc.lru.Remove(old)
		delete(pc.entries, oe.key)
		pc.bytes -= oe.bytes
	}
}

// stats are the cache's entry count and accounted bytes.
func (pc *prefixCache) stats() (entries int, bytes int64) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return len(pc.entries), pc.bytes
}

// sampleScratch is what one sampling goroutine needs besides the prompt:
// a one-row decoder (context-sized KV cache per layer, ~200 KB for the
// default model) and the sampling distribution. They are pooled per model
// shape, across requests and snapshots, since a request used to allocate
// them afresh for every sequence's worker. Reuse is safe because a decode
// step writes every scratch value before reading it and reads cache rows
// only below its position, all of which load or the step itself wrote.
type sampleScratch struct {
	dec   *decoder
	probs []float64
}

var scratchPools sync.Map // Config (Seed zeroed) → *sync.Pool of *sampleScratch

func scratchPool(c Config) *sync.Pool {
	c.Seed = 0
	if p, ok := scratchPools.Load(c); ok {
		return p.(*sync.Pool)
	}
	p, _ := scratchPools.LoadOrStore(c, &sync.Pool{New: func() any {
		return &sampleScratch{dec: newDecoder(c, 1), probs: make([]float64, TokenizerVocab)}
	}})
	return p.(*sync.Pool)
}
