package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// buildBothWays parses tokenizer.json with the hand-written scanner (which
// must accept it) and with encoding/json alone.
func buildBothWays(t testing.TB, data []byte) (fast, slow *Tokenizer) {
	t.Helper()
	f, tables, ok := scanTokenizerJSON(data)
	if !ok {
		t.Fatal("the scanner gave up on the file")
	}
	fast, err := build(f, tables, &configJSON{})
	if err != nil {
		t.Fatal(err)
	}
	f, tables, err = decodeTokenizerJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	slow, err = build(f, tables, &configJSON{})
	if err != nil {
		t.Fatal(err)
	}
	return fast, slow
}

// sameTokenizer compares everything a loaded tokenizer holds.
func sameTokenizer(t testing.TB, a, b *Tokenizer) {
	t.Helper()
	if a.VocabSize() != b.VocabSize() || !slices.Equal(a.known, b.known) {
		t.Fatalf("vocab sizes %d and %d", a.VocabSize(), b.VocabSize())
	}
	for id := range a.VocabSize() {
		ta, oka := a.IDToToken(id)
		tb, okb := b.IDToToken(id)
		if ta != tb || oka != okb {
			t.Fatalf("token %d: %q and %q", id, ta, tb)
		}
		da, _ := a.Decode([]int{id})
		db, _ := b.Decode([]int{id})
		if da != db {
			t.Fatalf("bytes of token %d: %q and %q", id, da, db)
		}
		if !oka {
			continue
		}
		ia, _ := a.TokenToID(ta)
		ib, _ := b.TokenToID(ta)
		if ia != ib {
			t.Fatalf("id of %q: %d and %d", ta, ia, ib)
		}
	}
	if a.byteIDs != b.byteIDs || a.ignoreMerges != b.ignoreMerges || a.nfc != b.nfc || a.prefixSpace != b.prefixSpace {
		t.Fatal("byte tokens or options differ")
	}
	for _, s := range a.merges.slots {
		if s.rank == 0 {
			continue
		}
		if m, ok := b.merges.get(s.key); !ok || m != (merge{rank: s.rank - 1, id: s.id}) {
			t.Fatalf("merge %x: %v and %v", s.key, s, m)
		}
	}
	if len(a.splits) != len(b.splits) || len(a.added) != len(b.added) {
		t.Fatal("pre-tokenizers or added tokens differ")
	}
	for i := range a.splits {
		sa, sb := a.splits[i], b.splits[i]
		if sa.literal != sb.literal || sa.behavior != sb.behavior || sa.invert != sb.invert || (sa.pattern == nil) != (sb.pattern == nil) || sa.pattern != nil && sa.pattern.src != sb.pattern.src {
			t.Fatalf("split %d differs", i)
		}
	}
	if !slices.Equal(a.added, b.added) || !slices.Equal(a.prefix, b.prefix) || !slices.Equal(a.suffix, b.suffix) {
		t.Fatal("added tokens or post-processor differ")
	}
}

// TestScanMatchesDecode: the hand-written scanner and encoding/json give
// the same tokenizer for the tiny file and both real ones (whose vocab
// has \u escapes and whose merges use the two spellings: Qwen3 pairs,
// Llama 3 "a b" strings).
func TestScanMatchesDecode(t *testing.T) {
	t.Run("tiny", func(t *testing.T) {
		fast, slow := buildBothWays(t, tinyTokenizerJSON(t))
		sameTokenizer(t, fast, slow)
	})
	for _, name := range []string{"qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			realTokenizer(t, name) // skips or fails when absent
			data, err := os.ReadFile(filepath.Join(repoRoot(t), ".cache", "tokenizers", name, TokenizerFile))
			if err != nil {
				t.Fatal(err)
			}
			fast, slow := buildBothWays(t, data)
			sameTokenizer(t, fast, slow)
			if len(fast.merges.slots) == 0 {
				t.Fatal("no merges")
			}
		})
	}
}

// TestScanGivesUp: shapes the scanner leaves to encoding/json, which then
// decides; Parse's result must not depend on who read the file.
func TestScanGivesUp(t *testing.T) {
	for _, data := range []string{
		`{"model": {"vocab": {"a": 1.0}}}`,
		`{"model": {"vocab": {"a": 01}}}`,
		`{"model": {"vocab": {"\ud800": 1}}}`,
		"{\"model\": {\"vocab\": {\"\xff\": 1}}}",
		`{"model": {"vocab": {}, "vocab": {}}}`,
		`{"model": {"vocab": {}}, "Model": {}}`,
		`{"model": {"merges": [["a", "b", "c"]]}}`,
		`{"model": {"merges": ["ab"]}}`,
		`{"model": {"merges": ["a b", ["a", "b"]]}}`,
		`{"model": null}`,
		`{"model": {}} x`,
		`{"version": 1 2}`,
		`{"model": {"vocab": {"a": 1}`,
	} {
		if _, _, ok := scanTokenizerJSON([]byte(data)); ok {
			t.Errorf("scanner accepted %q", data)
		}
	}
}
