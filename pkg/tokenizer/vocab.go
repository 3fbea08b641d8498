package tokenizer

import "hash/maphash"

// modelTables is the vocab and merges of tokenizer.json in a compact,
// pointer-free form: every token text lives in one string, so loading
// makes a handful of allocations instead of one per token, and the
// garbage collector has almost nothing to trace in a loaded tokenizer.
type modelTables struct {
	// vocab entries in file order: entry i is vocabText[vocabEnd[i-1]:vocabEnd[i]]
	// (from 0 for i = 0) with id vocabIDs[i]
	vocabText string
	vocabEnd  []uint32
	vocabIDs  []int32
	// merge k is the pair mergeText[mergeEnd[2k-1]:mergeEnd[2k]] and
	// mergeText[mergeEnd[2k]:mergeEnd[2k+1]]; written next to each other,
	// the pair is also the text of the token it makes.
	mergeText string
	mergeEnd  []uint32
	hasVocab  bool // the file has a vocab (empty or not)
	hasMerges bool
}

func (m *modelTables) vocabLen() int { return len(m.vocabIDs) }

func (m *modelTables) vocabKey(i int) string {
	start := uint32(0)
	if i > 0 {
		start = m.vocabEnd[i-1]
	}
	return m.vocabText[start:m.vocabEnd[i]]
}

func (m *modelTables) mergeLen() int { return len(m.mergeEnd) / 2 }

// merge returns the two halves of merge k and their start and end in mergeText.
func (m *modelTables) merge(k int) (left, right string, start, end uint32) {
	start = 0
	if k > 0 {
		start = m.mergeEnd[2*k-1]
	}
	mid, end := m.mergeEnd[2*k], m.mergeEnd[2*k+1]
	return m.mergeText[start:mid], m.mergeText[mid:end], start, end
}

// tokenIndex finds a vocab entry by its text: open addressing over entry
// numbers, with the texts kept in modelTables. Each slot also holds the
// top half of the text's hash, so a probe rarely has to look at a text
// that is not the one sought.
type tokenIndex struct {
	seed  maphash.Seed
	slots []uint64 // hash>>32<<32 | entry+1; 0 is empty
	mask  uint64
}

func newTokenIndex(n int) tokenIndex {
	size := 16
	for size < 2*n {
		size *= 2
	}
	return tokenIndex{seed: maphash.MakeSeed(), slots: make([]uint64, size), mask: uint64(size - 1)}
}

// insert adds entry i; an earlier entry with the same text is replaced
// (as when a JSON object repeats a key) and returned, else -1.
func (x *tokenIndex) insert(m *modelTables, i int) int {
	key := m.vocabKey(i)
	h := maphash.String(x.seed, key)
	tag := h &^ (1<<32 - 1)
	for s := h & x.mask; ; s = (s + 1) & x.mask {
		e := x.slots[s]
		if e == 0 {
			x.slots[s] = tag | uint64(i+1)
			return -1
		}
		if e&^(1<<32-1) == tag && m.vocabKey(int(uint32(e)-1)) == key {
			x.slots[s] = tag | uint64(i+1)
			return int(uint32(e) - 1)
		}
	}
}

// find returns the entry whose text is key.
func (x *tokenIndex) find(m *modelTables, key string) (int, bool) {
	if len(x.slots) == 0 {
		return 0, false
	}
	return probeIndex(x, m, key, maphash.String(x.seed, key))
}

// findBytes is find for a key held in a byte slice.
func (x *tokenIndex) findBytes(m *modelTables, key []byte) (int, bool) {
	if len(x.slots) == 0 {
		return 0, false
	}
	return probeIndex(x, m, key, maphash.Bytes(x.seed, key))
}

func probeIndex[K string | []byte](x *tokenIndex, m *modelTables, key K, h uint64) (int, bool) {
	tag := h &^ (1<<32 - 1)
	for s := h & x.mask; ; s = (s + 1) & x.mask {
		e := x.slots[s]
		if e == 0 {
			return 0, false
		}
		if e&^(1<<32-1) == tag && m.vocabKey(int(uint32(e)-1)) == string(key) {
			return int(uint32(e) - 1), true
		}
	}
}

// span is a piece of one of the tokenizer's text arenas.
type span struct{ off, len uint32 }

func (s span) of(text string) string { return text[s.off : s.off+s.len] }

// mergeTable maps a pair of token ids (mergeKey) to its merge: open
// addressing with Fibonacci hashing, pointer-free, faster than a Go map
// in the BPE loop.
type mergeTable struct {
	slots []mergeSlot
	shift uint
}

type mergeSlot struct {
	key  uint64
	rank int32 // rank+1; 0 is an empty slot
	id   int32
}

func newMergeTable(n int) mergeTable {
	size, shift := 16, uint(64-4)
	for size < 2*n {
		size *= 2
		shift--
	}
	return mergeTable{slots: make([]mergeSlot, size), shift: shift}
}

func (mt *mergeTable) home(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> mt.shift }

// add keeps the first merge of a pair, as the lowest rank wins.
func (mt *mergeTable) add(key uint64, m merge) {
	mask := uint64(len(mt.slots) - 1)
	for i := mt.home(key); ; i = (i + 1) & mask {
		s := &mt.slots[i]
		if s.rank == 0 {
			*s = mergeSlot{key: key, rank: m.rank + 1, id: m.id}
			return
		}
		if s.key == key {
			return
		}
	}
}

func (mt *mergeTable) get(key uint64) (merge, bool) {
	if len(mt.slots) == 0 {
		return merge{}, false
	}
	mask := uint64(len(mt.slots) - 1)
	for i := mt.home(key); ; i = (i + 1) & mask {
		s := &mt.slots[i]
		if s.rank == 0 {
			return merge{}, false
		}
		if s.key == key {
			return merge{rank: s.rank - 1, id: s.id}, true
		}
	}
}
