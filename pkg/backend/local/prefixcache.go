package local

// Prefix cache of a Snapshot, in the spirit of vLLM's automatic prefix
// caching. It keeps, per snapshot, the KV rows the decoder computed for
// token sequences, so that a request whose prompt starts with a sequence
// seen before prefills only the rest.
//
// Two workloads drive it. GRPO sends rollout.n requests with the same
// prompt to one snapshot at once; for short replies the prompt's prefill
// is most of a request's work. Multi-turn agents (frozenlake) send, each
// turn, the previous turn's prompt + the reply + a new observation, so
// without reuse every turn prefills the whole conversation again.
//
// What is cached. Rows live in a trie of blocks of prefixBlock (16)
// tokens: a node holds the q|k|v rows of its 16 tokens, and its path from
// the root spells the tokens before them, so a node's rows are only ever
// served after exactly those tokens. Keys are the token ids themselves
// (promptKey), never hashes, so no collision can serve wrong rows. Shared
// prefixes (a system prompt, a GRPO group's prompt, the turns of one
// conversation) are stored once. Two things are published:
//   - a prefilled prompt: its whole blocks, plus a tail node with its last
//     len%16 tokens (possibly none) and the next-token logits after the
//     prompt, which only a whole-prompt hit can use;
//   - a decoded sequence, when the sample finishes: the whole blocks of
//     prompt + reply[:len-1]. The reply's last token was sampled but never
//     fed to the decoder, so it has no row; the partial last block is not
//     kept (at most 15 rows, prefilled again next turn) so that decoded
//     sequences need no tails and single-turn replies that end in the
//     prompt's last block publish nothing.
//
// What is matched. A prompt whose every token, with its tail, is cached
// is a whole-prompt hit: no prefill, as before. Otherwise the lookup walks
// the prompt's whole blocks down the trie as far as they are cached, then
// takes the first rows of the deepest node's child (block or tail) that
// agrees longest with the next tokens, since a row depends only on the
// tokens up to it. At least the prompt's last token is always prefilled,
// because only that gives the next-token logits. The decoder loads the
// matched rows and runs the rest of the prompt as one step on top of them.
// With partial reuse off (prefixCache.partial), only whole prompts match
// and decoded sequences are not published, which is the cache as it was
// before: the benchmark's baseline.
//
// Numerics. A prefill in pieces gives bit-identical rows and logits to a
// one-piece prefill: every kernel of decoder.step treats rows
// independently (row-wise norms, gonum's product accumulating each output
// in k order whatever the row count, kernels.go; attention per row over
// the rows before it), so a row's result does not depend on which step
// computed it. TestPrefixChunkedPrefillBitIdentical checks this exactly;
// sampling through the cache is therefore bit-identical to sampling with
// no cache, for single- and multi-turn prompts alike.
//
// Memory. The trie is an LRU bounded in bytes (defaultPrefixCacheLimit):
// a lookup or publish touches the node it ends at and then every ancestor,
// so a node is always more recent than its descendants and eviction from
// the back removes leaves first: a cached node's prefix is always cached.
// The bound has to hold the conversations in flight, or each turn's blocks
// are evicted before the next turn asks for them (see the limit's
// comment). The cache belongs to the snapshot, whose weights never change,
// so rows can never be served against other weights, and it is freed with
// the snapshot (one training step).
//
// Concurrency. Concurrent requests for a prompt that is not cached share
// one prefill (singleflight), which runs on top of the longest cached
// prefix. Nodes are read-only once linked into the trie; readers copy
// their rows into their own decoders outside the lock, and a node evicted
// meanwhile stays valid for them (the garbage collector frees it later).

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

// prefixBlock is the trie's block size in tokens. Smaller blocks lose
// fewer rows at a decoded sequence's end and where prompts diverge; each
// node costs a map lookup per walk and ~400 bytes besides its rows (24 KB
// for 16 rows of the default model), so 16 keeps the overhead near 2 %.
const prefixBlock = 16

// defaultPrefixCacheBytes is the floor of a snapshot's cache bound: for the
// default model a token's rows take 2·192·4 = 1.5 KB, so 64 MiB holds
// ~43,000 tokens of distinct prefixes, e.g. ~1,800 arith prompts of 23
// tokens (the prompts of several steps' batches).
const defaultPrefixCacheBytes = 64 << 20

// prefixCacheContexts is how many whole contexts of rows the bound holds
// if that is at most prefixCacheContextsCap: one per episode in flight,
// as frozenlake trains 64 (8 tasks × rollout.n 8). An episode's rows are
// reused only if they survive from the end of its turn to the start of
// the next, while the other episodes' turns publish theirs. With
// frozenlake's in-process env that gap is short and 8 contexts keep
// nearly all the reuse; an env or tool that takes seconds leaves every
// episode waiting at once, and the bound must then hold all of them:
// BenchmarkSampleMultiTurnBound (64 episodes, envs of 3 s) reuses 82–83 %
// of the prompt tokens at 27 contexts (the former 64 MiB) and all 88 %
// reusable from 32. With context 1536 a context of the default model is
// 2.4 MB, so the bound is 151 MB; the cache holds only what was asked for
// (81 MiB in that benchmark) and is freed with the snapshot.
const prefixCacheContexts = 64

// prefixCacheContextsCap keeps prefixCacheContexts from taking gigabytes
// for large models (64 contexts of a 12-layer, d_model 768 model of
// context 1024 are 7 GB); they keep at least prefixCacheMinContexts.
const prefixCacheContextsCap = 256 << 20

// prefixCacheMinContexts is how many whole contexts the bound holds at
// least: for large models even the cap could hold few.
const prefixCacheMinContexts = 8

// prefixNodeOverhead approximates the bookkeeping of one node (struct,
// list element, map slot, token ids) beyond its float data and key.
const prefixNodeOverhead = 400

// defaultPrefixCacheLimit is the byte bound of a snapshot's cache for c:
// 64 contexts up to 256 MiB, at least 64 MiB and 8 contexts.
func defaultPrefixCacheLimit(c Config) int64 {
	context := int64(c.Context) * prefixRowBytes(c)
	return max(defaultPrefixCacheBytes, min(prefixCacheContexts*context, prefixCacheContextsCap), prefixCacheMinContexts*context)
}

// prefixRowBytes is the size of one token's q|k|v rows over all layers.
func prefixRowBytes(c Config) int64 { return int64(4 * c.Layers * 3 * c.DModel) }

// prefixNodeBytes is the accounted size of a node of n tokens whose key is
// keyLen bytes, with next-token logits when tail is set.
func prefixNodeBytes(c Config, n, keyLen int, tail bool) int64 {
	b := int64(n)*prefixRowBytes(c) + int64(keyLen) + prefixNodeOverhead
	if tail {
		b += 4 * TokenizerVocab
	}
	return b
}

// prefixNode is a block of the trie (prefixBlock tokens, children) or a
// prompt's tail (fewer tokens, next-token logits, no children). Only the
// cache's lock guards children and el; the rest never changes once the
// node is linked.
type prefixNode struct {
	parent   *prefixNode
	key      string      // promptKey(tokens): the node's key among its parent's children
	tokens   []int       // the node's own tokens, after its ancestors'
	rows     [][]float32 // per layer: [len(tokens), 3d] q|k|v rows of tokens
	logits   []float32   // tails: the next-token logits after the prompt; nil for blocks
	children map[string]*prefixNode
	el       *list.Element
	bytes    int64
}

func (n *prefixNode) isTail() bool { return n.logits != nil }

// newPrefixNode copies the rows of tokens, which sit at positions at.. of
// caches (a decoder's per-layer caches), into a node of their own: a
// decoder may be reused or hold far more rows than the node covers.
func newPrefixNode(c Config, parent *prefixNode, key string, tokens []int, at int, caches [][]float32, logits []float32) *prefixNode {
	d3 := 3 * c.DModel
	rows := make([][]float32, len(caches))
	for l, src := range caches {
		rows[l] = slices.Clone(src[at*d3 : (at+len(tokens))*d3])
	}
	return &prefixNode{parent: parent, key: key, tokens: slices.Clone(tokens), rows: rows,
		logits: slices.Clone(logits), bytes: prefixNodeBytes(c, len(tokens), len(key), logits != nil)}
}

// prefixState is the KV rows of a sequence's first pos tokens as
// consecutive spans (trie nodes or a prefill decoder's cache), and the
// next-token logits after them when they are a whole prompt.
type prefixState struct {
	spans  []rowSpan
	pos    int
	logits []float32 // nil for a proper prefix of the prompt
}

// rowSpan is the first n rows of per-layer row slices.
type rowSpan struct {
	rows [][]float32
	n    int
}

// load makes dec's cache a copy of the rows in st.
func (dec *decoder) load(st *prefixState) {
	d3 := 3 * dec.cfg.DModel
	at := 0
	for _, sp := range st.spans {
		for l, r := range sp.rows {
			copy(dec.caches[l][at*d3:(at+sp.n)*d3], r[:sp.n*d3])
		}
		at += sp.n
	}
	dec.pos = at
}

// promptKey encodes token ids as uvarints: unambiguous (two token
// sequences have the same key only if they are equal, whatever their
// lengths), and 1–2 bytes a token for this vocabulary.
func promptKey(tokens []int) string { return string(appendKey(nil, tokens)) }

func appendKey(b []byte, tokens []int) []byte {
	for _, t := range tokens {
		b = binary.AppendUvarint(b, uint64(t))
	}
	return b
}

// prefixCache is a snapshot's trie of cached rows, an LRU bounded in
// bytes.
type prefixCache struct {
	w       *weights
	limit   int64 // ≤ 0: no caching, every request prefills its own prompt
	partial bool  // reuse proper prefixes and decoded sequences, not only whole prompts
	sf      singleflight.Group

	mu      sync.Mutex
	root    prefixNode // no tokens, never evicted
	lru     list.List  // of *prefixNode; front: most recent, ahead of its descendants
	bytes   int64
	tails   int   // whole prompts cached
	evicted int64 // nodes evicted, for tests

	// Counters for tests and benchmarks.
	prefills      atomic.Int64 // prompts prefilled (wholly or on top of a prefix)
	promptTokens  atomic.Int64 // prompt tokens asked for
	prefillTokens atomic.Int64 // prompt tokens run through the model
}

func newPrefixCache(w *weights, limit int64) *prefixCache {
	return &prefixCache{w: w, limit: limit, partial: true}
}

// get returns the prompt's rows and next-token logits: from the cache,
// from a prefill already running for the same prompt, or from a new one
// on top of the longest cached prefix. A caller whose ctx ends stops
// waiting; the prefill it may have started still completes and is cached
// for the requests that share it.
func (pc *prefixCache) get(ctx context.Context, prompt []int) (*prefixState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pc.promptTokens.Add(int64(len(prompt)))
	if pc.limit <= 0 {
		st, _ := pc.prefill(prompt, nil)
		return st, nil
	}
	if st := pc.match(prompt, false); st != nil {
		return st, nil
	}
	// The prefill runs in singleflight's goroutine and may outlive this
	// call, so it must not read the caller's slice.
	prompt = slices.Clone(prompt)
	ch := pc.sf.DoChan(promptKey(prompt), func() (_ any, err error) {
		// singleflight re-raises a panic of fn on a goroutine of its own,
		// where nothing can recover it; make it the requests' error instead,
		// as a panic on the caller's goroutine could have been.
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("local: prefill of a %d-token prompt failed: %v", len(prompt), r)
			}
		}()
		// Match again: a flight that finished since may have cached the
		// prompt or a longer prefix of it.
		from := pc.match(prompt, pc.partial)
		if from != nil && from.logits != nil {
			return from, nil
		}
		st, dec := pc.prefill(prompt, from)
		pc.insert(prompt, dec.caches, len(prompt)/prefixBlock, st.logits)
		return st, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*prefixState), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// prefill runs prompt through a new decoder, on top of from's rows when
// from (a proper prefix of prompt) is set, and returns the prompt's state
// and the decoder, whose cache holds the rows of the whole prompt. The
// rest of the prompt is one step, so a prompt with nothing cached is
// prefilled exactly as Sample always has. The cache is sized to the prompt
// rather than the context, and the state serves it as it is.
func (pc *prefixCache) prefill(prompt []int, from *prefixState) (*prefixState, *decoder) {
	m := 0
	if from != nil {
		m = from.pos
	}
	dec := newDecoderCap(pc.w.cfg, len(prompt)-m, len(prompt))
	if from != nil {
		dec.load(from)
	}
	logits := slices.Clone(dec.step(pc.w, prompt[m:]))
	pc.prefills.Add(1)
	pc.prefillTokens.Add(int64(len(prompt) - m))
	return &prefixState{spans: []rowSpan{{dec.caches, dec.pos}}, pos: dec.pos, logits: logits}, dec
}

// match returns the cached state of the whole prompt (logits set), else
// with partial the longest cached proper prefix of it (logits nil), else
// nil.
func (pc *prefixCache) match(prompt []int, partial bool) *prefixState {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	path, buf := pc.walk(prompt)
	node := pc.deepest(path)
	done := len(path) * prefixBlock
	if len(path) == len(prompt)/prefixBlock {
		if tail := node.children[string(appendKey(buf[:0], prompt[done:]))]; tail != nil {
			pc.touch(tail)
			return newPrefixState(path, tail, len(tail.tokens), tail.logits)
		}
	}
	if !partial {
		return nil
	}
	// The last token is left for the prefill, which must produce the
	// logits after it: a prompt that ends a cached block keeps all but
	// that block's last row.
	if done == len(prompt) {
		last := path[len(path)-1]
		path = path[:len(path)-1]
		pc.touch(last)
		return newPrefixState(path, last, prefixBlock-1, nil)
	}
	part, n := longestChild(node, prompt[done:len(prompt)-1])
	if part == nil && len(path) == 0 {
		return nil
	}
	if part != nil {
		pc.touch(part)
	} else {
		pc.touch(node)
	}
	return newPrefixState(path, part, n, nil)
}

// walk follows the prompt's whole blocks down the trie and returns the
// cached ones, and a scratch buffer for keys. A key of prefixBlock tokens
// is never a tail's (tails are shorter and keys are unambiguous).
func (pc *prefixCache) walk(prompt []int) (path []*prefixNode, buf []byte) {
	node := &pc.root
	for b := 0; (b+1)*prefixBlock <= len(prompt); b++ {
		buf = appendKey(buf[:0], prompt[b*prefixBlock:(b+1)*prefixBlock])
		child := node.children[string(buf)]
		if child == nil {
			break
		}
		path = append(path, child)
		node = child
	}
	return path, buf
}

// deepest is the last node of path, or the root.
func (pc *prefixCache) deepest(path []*prefixNode) *prefixNode {
	if len(path) == 0 {
		return &pc.root
	}
	return path[len(path)-1]
}

// longestChild is the child of node whose tokens agree longest with
// rest, and how many agree (nil, 0 when none agrees on the first).
func longestChild(node *prefixNode, rest []int) (*prefixNode, int) {
	var best *prefixNode
	bestN := 0
	for _, c := range node.children {
		n := commonPrefix(c.tokens, rest)
		if n > bestN {
			best, bestN = c, n
		}
	}
	return best, bestN
}

func commonPrefix(a, b []int) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// newPrefixState is the rows of path's blocks followed by the first n rows
// of part (when set).
func newPrefixState(path []*prefixNode, part *prefixNode, n int, logits []float32) *prefixState {
	st := &prefixState{spans: make([]rowSpan, 0, len(path)+1), logits: logits}
	for _, b := range path {
		st.spans = append(st.spans, rowSpan{b.rows, prefixBlock})
	}
	st.pos = len(path) * prefixBlock
	if part != nil && n > 0 {
		st.spans = append(st.spans, rowSpan{part.rows, n})
		st.pos += n
	}
	return st
}

// keepDecoded publishes the whole blocks of a sampled sequence from dec,
// which decoded reply after prompt. The reply's last token was sampled
// from the logits of the one before and never fed, so dec holds rows for
// prompt + reply[:len(reply)-1] only.
func (pc *prefixCache) keepDecoded(prompt, reply []int, dec *decoder) {
	if pc.limit <= 0 || !pc.partial || len(reply) == 0 {
		return
	}
	fed := len(prompt) + len(reply) - 1
	if dec.pos != fed {
		return // not a finished decode of this reply: its rows are not these tokens'
	}
	blocks := fed / prefixBlock
	if blocks <= len(prompt)/prefixBlock {
		return // the prompt's blocks are cached already
	}
	seq := append(slices.Clone(prompt), reply[:len(reply)-1]...)
	pc.insert(seq, dec.caches, blocks, nil)
}

// insert links the first blocks whole blocks of tokens into the trie, and
// with logits the tail after them, copying rows that are not cached yet
// from caches (whose rows are those of tokens from position 0). Blocks
// that are cached are shared, not replaced: their rows are the same bits.
func (pc *prefixCache) insert(tokens []int, caches [][]float32, blocks int, logits []float32) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	c := pc.w.cfg
	node := &pc.root
	var buf []byte
	link := func(toks []int, at int, nodeLogits []float32) {
		buf = appendKey(buf[:0], toks)
		child := node.children[string(buf)]
		if child == nil {
			child = newPrefixNode(c, node, string(buf), toks, at, caches, nodeLogits)
			pc.link(child)
		}
		node = child
	}
	for b := range blocks {
		link(tokens[b*prefixBlock:(b+1)*prefixBlock], b*prefixBlock, nil)
	}
	if logits != nil {
		link(tokens[blocks*prefixBlock:], blocks*prefixBlock, logits)
	}
	pc.touch(node)
	pc.evict()
}

// link adds n under its parent, at the front of the LRU (the caller
// touches its ancestors after it).
func (pc *prefixCache) link(n *prefixNode) {
	p := n.parent
	if p.children == nil {
		p.children = map[string]*prefixNode{}
	}
	p.children[n.key] = n
	n.el = pc.lru.PushFront(n)
	pc.bytes += n.bytes
	if n.isTail() {
		pc.tails++
	}
}

// touch makes n and then each of its ancestors the most recently used, so
// that every node stays ahead of its descendants in the LRU.
func (pc *prefixCache) touch(n *prefixNode) {
	for ; n != &pc.root; n = n.parent {
		pc.lru.MoveToFront(n.el)
	}
}

// evict drops least recently used nodes until the bound holds. The back
// of the LRU is a leaf (touch keeps ancestors ahead), so the cached nodes
// stay a trie; unlink still drops any descendants, should it not be.
func (pc *prefixCache) evict() {
	for pc.bytes > pc.limit && pc.lru.Len() > 0 {
		pc.unlink(pc.lru.Back().Value.(*prefixNode))
	}
}

func (pc *prefixCache) unlink(n *prefixNode) {
	for _, c := range n.children {
		pc.unlink(c)
	}
	delete(n.parent.children, n.key)
	pc.lru.Remove(n.el)
	pc.bytes -= n.bytes
	pc.evicted++
	if n.isTail() {
		pc.tails--
	}
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
