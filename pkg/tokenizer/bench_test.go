package tokenizer

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mixedText builds about 1 MB of mixed-language text deterministically:
// the natural strings of the fixture corpus (English, code, CJK, Cyrillic,
// Arabic, emoji, digits, whitespace runs) shuffled and repeated. The
// corpus' synthetic words of hundreds of letters are left out here (they
// would be a third of the bytes) and measured by BenchmarkEncodeLongWords.
func mixedText(b *testing.B) string {
	return corpusText(b, func(s string) bool { return len(s) < 200 })
}

func corpusText(b *testing.B, keep func(string) bool) string {
	data, err := os.ReadFile(filepath.Join("testdata", "corpus.json"))
	if err != nil {
		b.Fatal(err)
	}
	var all, corpus []string
	if err := json.Unmarshal(data, &all); err != nil {
		b.Fatal(err)
	}
	for _, s := range all {
		if keep(s) {
			corpus = append(corpus, s)
		}
	}
	r := rand.New(rand.NewPCG(7, 7))
	var sb strings.Builder
	for sb.Len() < 1<<20 {
		sb.WriteString(corpus[r.IntN(len(corpus))])
		sb.WriteByte(' ')
	}
	return sb.String()
}

func BenchmarkEncode(b *testing.B) {
	text := mixedText(b)
	for _, name := range []string{"qwen3", "llama3"} {
		b.Run(name, func(b *testing.B) {
			tok := realTokenizer(b, name)
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			for b.Loop() {
				tok.Encode(text, false)
			}
		})
	}
}

// BenchmarkEncodeLongWords: 1 MB of the corpus' words of hundreds of
// letters with no space ("a"*1000, ...), the worst case for BPE merging.
func BenchmarkEncodeLongWords(b *testing.B) {
	text := corpusText(b, func(s string) bool { return len(s) >= 200 && !strings.Contains(s, " ") })
	tok := realTokenizer(b, "qwen3")
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		tok.Encode(text, false)
	}
}

func BenchmarkLoadQwen3(b *testing.B) {
	realTokenizer(b, "qwen3") // skips when absent
	dir := filepath.Join(repoRoot(b), ".cache", "tokenizers", "qwen3")
	for b.Loop() {
		if _, err := Load(dir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScanSynthetic runs the hand-written tokenizer.json scanner over
// a synthetic file of Qwen3's size in entries (150 k vocab entries with
// escapes, 150 k merges), without the network or the cache that
// BenchmarkLoadQwen3 needs.
func BenchmarkScanSynthetic(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"version":"1.0","model":{"type":"BPE","vocab":{`)
	for i := range 150000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"tok\u0120%d":%d`, i, i)
	}
	sb.WriteString(`},"merges":[`)
	for i := range 150000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"a%d b%d"`, i, i)
	}
	sb.WriteString(`]}}`)
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, ok := scanTokenizerJSON(data); !ok {
			b.Fatal("the scanner refused the synthetic file")
		}
	}
}
