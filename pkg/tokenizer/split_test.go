package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// The split patterns of Llama 3 (digits in threes) and Qwen2/Qwen3 (single
// digits), as their tokenizer.json files write them.
var wordPatterns = map[string]string{
	"llama3": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	"qwen":   `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
}

func compileWordPatterns(t testing.TB) map[string]*pattern {
	t.Helper()
	out := map[string]*pattern{}
	for name, src := range wordPatterns {
		pt, err := compilePattern(src)
		if err != nil {
			t.Fatal(err)
		}
		if pt.words == nil {
			t.Fatalf("%s: the hand-written splitter does not recognise the pattern", name)
		}
		out[name] = pt
	}
	return out
}

// splitBoth returns the pieces of s by the hand-written splitter and by
// the general engine.
func splitBoth(pt *pattern, s string) (fast, general []string) {
	pt.findAll(s, func(a, b int) { fast = append(fast, s[a:b]) })
	pt.findAllGeneral(s, func(a, b int) { general = append(general, s[a:b]) })
	return fast, general
}

// tricky are runes at the edges of the pattern's classes: contraction
// letters in both cases and ſ (which case-folds to s), ASCII and other
// digits (Nd, No, beyond the BMP), letters beyond the BMP, combining marks
// (neither letter nor number), every kind of whitespace including NEL,
// NBSP and the line separator, symbols and emoji, invalid UTF-8, and for
// NFC Hangul jamo, singletons and characters excluded from composition.
var tricky = []string{
	"'", "s", "S", "ſ", "t", "T", "r", "R", "e", "E", "v", "m", "l", "L", "d", "D", "k", "K", "x",
	"0", "7", "٣", "²", "Ⅻ", "𝟙", "𝐀", "日", "本", "é", "\u0301", "\u0651", "ก", "\u0e31",
	" ", "  ", "\t", "\r", "\n", "\r\n", "\v", "\f", "\u0085", "\u00a0", "\u2028", "\u3000",
	".", "!", "?", ",", "-", "_", "(", "😀", "€", "\u200d",
	"\xff", "\xc5", "\xe6\x97", "\x80",
	"\u1100", "\u1161", "\u11a8", "가", "\u212b", "\u0340", "\U0001d15e", "\U000110ab", "\U000110ba",
}

func randomTricky(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(tricky[r.IntN(len(tricky))])
	}
	return b.String()
}

// TestWordSplitterMatchesEngine: the hand-written splitter and the general
// engine cut the fixture corpus and a million random tricky strings
// identically, for both pattern variants.
func TestWordSplitterMatchesEngine(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "corpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var corpus []string
	if err := json.Unmarshal(data, &corpus); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		corpus = append(corpus, randomTricky(r, 1+r.IntN(12)))
	}
	for name, pt := range compileWordPatterns(t) {
		for _, s := range corpus {
			if fast, general := splitBoth(pt, s); !slices.Equal(fast, general) {
				t.Fatalf("%s: %q\nsplitter %q\n  engine %q", name, s, fast, general)
			}
		}
	}
}

// FuzzWordSplitter: the splitter equals the general engine, and
// normalizeNFC the norm package, on any string.
func FuzzWordSplitter(f *testing.F) {
	pts := compileWordPatterns(f)
	for _, s := range []string{"Hello world's 1234", "a  \n\n b\t\tc  ", "'ſ'LL 'Re ٣٣٣٣", "\xff\xc5x 😀!!\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, pt := range pts {
			if fast, general := splitBoth(pt, s); !slices.Equal(fast, general) {
				t.Fatalf("%s: %q\nsplitter %q\n  engine %q", name, s, fast, general)
			}
		}
		if got, want := normalizeNFC(s), norm.NFC.String(s); got != want {
			t.Fatalf("normalizeNFC(%+q) = %+q, want %+q", s, got, want)
		}
	})
}

// TestRuneClasses: the table built range by range agrees with unicode.Is
// rune by rune; the runes it marks inert are NFC on their own and in any
// sequence; normalizeNFC agrees with the norm package on mixed text.
func TestRuneClasses(t *testing.T) {
	table := runeClasses()
	var inert []rune
	for r := rune(0); r < 0x10000; r++ {
		if got, want := table[r]&^classInert, categoryClass(r); got != want {
			t.Fatalf("%U: class %b, want %b", r, got, want)
		}
		if table[r]&classInert == 0 {
			continue
		}
		if !norm.NFC.IsNormalString(string(r)) {
			t.Fatalf("%U marked inert but not NFC", r)
		}
		inert = append(inert, r)
	}
	if len(inert) < 40000 {
		t.Fatalf("only %d inert runes: the table is wrong", len(inert))
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		var b strings.Builder
		for range 1 + r.IntN(8) {
			b.WriteRune(inert[r.IntN(len(inert))])
		}
		if s := b.String(); !norm.NFC.IsNormalString(s) {
			t.Fatalf("%+q: inert runes that are not NFC together", s)
		}
	}
	for range 100000 {
		s := randomTricky(r, 1+r.IntN(12))
		if got, want := normalizeNFC(s), norm.NFC.String(s); got != want {
			t.Fatalf("normalizeNFC(%+q) = %+q, want %+q", s, got, want)
		}
	}
}
