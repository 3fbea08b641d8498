package tokenizer

import (
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

var byteLevel = byteLevelAlphabet()

// byteLevelAlphabet maps each byte to the printable character GPT-2's
// byte-level BPE uses for it: printable Latin-1 bytes stand for themselves,
// the other 68 bytes are shifted to U+0100 and up in byte order.
func byteLevelAlphabet() [256]rune {
	var table [256]rune
	next := rune(256)
	for b := 0; b < 256; b++ {
		switch {
		case b >= '!' && b <= '~', b >= 0xA1 && b <= 0xAC, b >= 0xAE && b <= 0xFF:
			table[b] = rune(b)
		default:
			table[b] = next
			next++
		}
	}
	return table
}

// mergeKey packs an adjacent pair of token ids.
func mergeKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

type merge struct {
	rank int32
	id   int32 // the token the pair becomes
}

// longWord is the length (in bytes) from which BPE switches from the
// quadratic rescan, fastest for ordinary words, to a heap.
const longWord = 128

// bpe appends to out the token ids of one pre-tokenized piece (raw bytes),
// merging the lowest-ranked adjacent pair first, leftmost on ties.
func (t *Tokenizer) bpe(word string, out []int) []int {
	if len(word) == 1 {
		return append(out, int(t.byteIDs[word[0]]))
	}
	if t.ignoreMerges {
		if id, ok := t.wholeToken(word); ok {
			return append(out, int(id))
		}
	}
	if len(word) >= longWord {
		return t.bpeHeap(word, out)
	}
	var buf [longWord]int32
	var ranks [longWord]int32
	syms := buf[:len(word)]
	for i := 0; i < len(word); i++ {
		syms[i] = t.byteIDs[word[i]]
	}
	pr := ranks[:len(word)]
	const none = int32(1<<31 - 1)
	rankOf := func(i int) int32 {
		if m, ok := t.merges.get(mergeKey(syms[i], syms[i+1])); ok {
			return m.rank
		}
		return none
	}
	for i := 0; i+1 < len(syms); i++ {
		pr[i] = rankOf(i)
	}
	for len(syms) > 1 {
		best, at := none, -1
		for i := 0; i+1 < len(syms); i++ {
			if pr[i] < best {
				best, at = pr[i], i
			}
		}
		if at < 0 {
			break
		}
		m, _ := t.merges.get(mergeKey(syms[at], syms[at+1]))
		syms[at] = m.id
		copy(syms[at+1:], syms[at+2:])
		syms = syms[:len(syms)-1]
		copy(pr[at+1:], pr[at+2:])
		pr = pr[:len(syms)]
		if at+1 < len(syms) {
			pr[at] = rankOf(at)
		}
		if at > 0 {
			pr[at-1] = rankOf(at - 1)
		}
	}
	for _, s := range syms {
		out = append(out, int(s))
	}
	return out
}

// wholeToken returns the vocab token whose raw bytes are word, looked up
// by its byte-level spelling.
func (t *Tokenizer) wholeToken(word string) (int32, bool) {
	var stack [2 * cachedWord]byte
	spelled := stack[:0]
	if 2*len(word) > len(stack) {
		spelled = make([]byte, 0, 2*len(word))
	}
	for i := 0; i < len(word); i++ {
		spelled = utf8.AppendRune(spelled, byteLevel[word[i]])
	}
	if e, ok := t.index.findBytes(&t.model, spelled); ok {
		return t.model.vocabIDs[e], true
	}
	return 0, false
}

// bpeHeap is bpe for long pieces: a doubly linked list of symbols and a
// heap of candidate merges, O(n log n) instead of O(n²).
func (t *Tokenizer) bpeHeap(word string, out []int) []int {
	n := len(word)
	syms := make([]int32, n)
	prev := make([]int32, n)
	next := make([]int32, n)
	alive := make([]bool, n)
	for i := 0; i < n; i++ {
		syms[i] = t.byteIDs[word[i]]
		prev[i], next[i] = int32(i-1), int32(i+1)
		alive[i] = true
	}
	next[n-1] = -1
	h := make(mergeHeap, 0, n)
	push := func(i int32) {
		j := next[i]
		if j < 0 {
			return
		}
		if m, ok := t.merges.get(mergeKey(syms[i], syms[j])); ok {
			h.push(candidate{rank: m.rank, pos: i, left: syms[i], right: syms[j]})
		}
	}
	for i := int32(0); i < int32(n-1); i++ {
		push(i)
	}
	for len(h) > 0 {
		c := h.pop()
		i := c.pos
		j := next[i]
		// stale: one side has been merged away or changed since the push
		if !alive[i] || j < 0 || syms[i] != c.left || syms[j] != c.right {
			continue
		}
		m, _ := t.merges.get(mergeKey(c.left, c.right))
		syms[i] = m.id
		alive[j] = false
		next[i] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = i
		}
		if prev[i] >= 0 {
			push(prev[i])
		}
		push(i)
	}
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, int(syms[i]))
	}
	return out
}

type candidate struct {
	rank, pos   int32
	left, right int32
}

// mergeHeap is a binary min-heap by (rank, pos), written out to avoid
// container/heap's interface boxing in this hot loop.
type mergeHeap []candidate

func (h mergeHeap) less(a, b int) bool {
	if h[a].rank != h[b].rank {
		return h[a].rank < h[b].rank
	}
	return h[a].pos < h[b].pos
}

func (h *mergeHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *mergeHeap) pop() candidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s.less(l, m) {
			m = l
		}
		if r < len(s) && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// Pieces up to cachedWord bytes are cached (as Hugging Face's BPE does):
// natural text repeats its words, so most pieces skip merging entirely.
const (
	cachedWord   = 256
	cacheEntries = 1 << 16
)

// wordCache is read far more often than written. Reads go to a map that
// is never written once published (no lock, no atomic write); new pieces
// gather in a small locked map and are published in a fresh copy once
// they are a quarter of the published ones, so copying stays linear.
type wordCache struct {
	published atomic.Pointer[map[string][]int]
	mu        sync.Mutex
	recent    map[string][]int
}

func (c *wordCache) get(word string) ([]int, bool) {
	if m := c.published.Load(); m != nil {
		if ids, ok := (*m)[word]; ok {
			return ids, true
		}
	}
	c.mu.Lock()
	ids, ok := c.recent[word]
	c.mu.Unlock()
	return ids, ok
}

func (c *wordCache) put(word string, ids []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recent == nil {
		c.recent = make(map[string][]int)
	}
	// a copy of the piece, so the cache does not keep the caller's text alive
	c.recent[strings.Clone(word)] = ids
	var old map[string][]int
	if p := c.published.Load(); p != nil {
		old = *p
	}
	if len(c.recent) < max(64, len(old)/4) {
		return
	}
	if len(old)+len(c.recent) > cacheEntries {
		old = nil // start over rather than track recency
	}
	next := make(map[string][]int, len(old)+len(c.recent))
	for k, v := range old {
		next[k] = v
	}
	for k, v := range c.recent {
		next[k] = v
	}
	c.published.Store(&next)
	c.recent = nil
}

func (t *Tokenizer) bpeCached(word string, out []int) []int {
	if len(word) > cachedWord {
		return t.bpe(word, out)
	}
	if ids, ok := t.cache.get(word); ok {
		return append(out, ids...)
	}
	start := len(out)
	out = t.bpe(word, out)
	t.cache.put(word, append([]int(nil), out[start:]...))
	return out
}
