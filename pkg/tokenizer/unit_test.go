package tokenizer

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// tinyTokenizerJSON is a minimal byte-level BPE file: the 256 byte
// tokens, merges "h e" -> "he", "he l" -> "hel", "Ġ Ġ" -> "ĠĠ", the
// Qwen-style split pattern and one special token.
func tinyTokenizerJSON(t testing.TB) []byte {
	t.Helper()
	alphabet := byteLevelAlphabet()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(alphabet[b])] = b
	}
	vocab["he"], vocab["hel"], vocab["ĠĠ"] = 256, 257, 258
	f := map[string]any{
		"added_tokens": []any{map[string]any{"id": 259, "content": "<|end|>", "special": true}},
		"normalizer":   nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}, "behavior": "Isolated"},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{"h e", "he l", "Ġ Ġ"}},
	}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func tinyTokenizer(t testing.TB) *Tokenizer {
	tok, err := Parse(tinyTokenizerJSON(t), []byte(`{"eos_token": "<|end|>", "chat_template": "{{ messages }}"}`))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTinyTokenizer(t *testing.T) {
	tok := tinyTokenizer(t)
	if got := tok.Encode("hello", false); !slices.Equal(got, []int{257, 'l', 'o'}) {
		t.Errorf("hello: %v", got)
	}
	// "a   b": the split gives "a", "  " (whitespace not followed by
	// non-space keeps one space for the next word), " b"; "  " -> ĠĠ.
	space := int(tok.byteIDs[' '])
	if got, want := tok.Encode("a   b", false), []int{'a', 258, space, 'b'}; !slices.Equal(got, want) {
		t.Errorf("a   b: got %v want %v", got, want)
	}
	if got := tok.Encode("x<|end|>", false); !slices.Equal(got, []int{'x', 259}) {
		t.Errorf("special: %v", got)
	}
	if tok.Special().EOS != 259 || tok.Special().BOS != -1 {
		t.Errorf("special ids: %+v", tok.Special())
	}
	if tok.VocabSize() != 260 {
		t.Errorf("vocab size %d", tok.VocabSize())
	}
	if id, ok := tok.TokenToID("hel"); !ok || id != 257 {
		t.Errorf("TokenToID(hel) = %d %v", id, ok)
	}
	if s, ok := tok.IDToToken(258); !ok || s != "ĠĠ" {
		t.Errorf("IDToToken(258) = %q", s)
	}
	if _, err := tok.Decode([]int{1, 9999}); err == nil {
		t.Error("Decode of an unknown id: no error")
	}
	if s, ok := tok.ChatTemplate("default"); !ok || s != "{{ messages }}" {
		t.Errorf("chat template %q", s)
	}
}

// TestDecodePartialUTF8: an emoji split over byte tokens decodes to its
// bytes token by token and to the emoji when concatenated.
func TestDecodePartialUTF8(t *testing.T) {
	tok := tinyTokenizer(t)
	ids := tok.Encode("😀", false)
	if len(ids) != 4 {
		t.Fatalf("want 4 byte tokens, got %v", ids)
	}
	var joined string
	for _, id := range ids {
		part, err := tok.Decode([]int{id})
		if err != nil {
			t.Fatal(err)
		}
		if utf8.ValidString(part) {
			t.Errorf("byte token %d decoded to valid UTF-8 %q", id, part)
		}
		joined += part
	}
	if joined != "😀" {
		t.Errorf("joined %q", joined)
	}
}

// TestBPEHeapMatchesScan: the two merge loops agree on random words.
func TestBPEHeapMatchesScan(t *testing.T) {
	tok := tinyTokenizer(t)
	r := rand.New(rand.NewPCG(1, 2))
	letters := "hel  "
	for i := 0; i < 500; i++ {
		n := 1 + r.IntN(60)
		var b strings.Builder
		for j := 0; j < n; j++ {
			b.WriteByte(letters[r.IntN(len(letters))])
		}
		w := b.String()
		// bpe switches to the heap only from longWord bytes; call both
		scan := tok.bpe(w, nil)
		heap := tok.bpeHeap(w, nil)
		if !slices.Equal(scan, heap) {
			t.Fatalf("%q: scan %v heap %v", w, scan, heap)
		}
	}
}

func TestPattern(t *testing.T) {
	pt, err := compilePattern(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"a   b", []string{"a", "  ", " b"}},
		{"x  ", []string{"x", "  "}},
		{"1234567", []string{"123", "456", "7"}},
		{"I'LL go", []string{"I", "'LL", " go"}},
		{"a\n\n  b", []string{"a", "\n\n", " ", " b"}},
		{"ok!!\n", []string{"ok", "!!\n"}},
		{"你好", []string{"你好"}},
	}
	for _, c := range cases {
		var got []string
		pt.findAll(c.in, func(a, b int) { got = append(got, c.in[a:b]) })
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: got %q want %q", c.in, got, c.want)
		}
	}
	for _, bad := range []string{`(abc`, `[a-`, `\p{Nope}`, `a{2,1}`, `*a`, `(?<name>x)`, `a+?`} {
		if _, err := compilePattern(bad); err == nil {
			t.Errorf("compilePattern(%q): no error", bad)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ data, want string }{
		{"{\n\"model\": {\n\"vocab\": [1,\n}", ":4: invalid JSON"},
		{`{"model": {"type": "Unigram", "vocab": {}}}`, `model type "Unigram" is not supported`},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "decoder": {"type": "ByteLevel"}}`, "lacks the byte-level token"},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "byte_fallback": true}}`, "byte_fallback"},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}}, "decoder": {"type": "Metaspace"}}`, `decoder "Metaspace"`},
		{`{"model": "x"}`, "should be"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.data), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q): got %v, want error containing %q", c.data, err, c.want)
		}
	}
}

func TestLoadAndResolve(t *testing.T) {
	hub := t.TempDir()
	snap := filepath.Join(hub, "models--Org--Model", "snapshots", "abc123")
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(snap, TokenizerFile), tinyTokenizerJSON(t), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(hub, "models--Org--Model", "refs"), 0o755)
	os.WriteFile(filepath.Join(hub, "models--Org--Model", "refs", "main"), []byte("abc123\n"), 0o644)

	dir, err := Resolve("Org/Model", hub)
	if err != nil || dir != snap {
		t.Fatalf("Resolve model id: %q %v", dir, err)
	}
	if dir, err := Resolve(snap, ""); err != nil || dir != snap {
		t.Fatalf("Resolve dir: %q %v", dir, err)
	}
	if _, err := Load(dir); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"Org/Missing", "not-a-model", "", t.TempDir()} {
		_, err := Resolve(ref, hub)
		var ue *Error
		if !errors.As(err, &ue) || ue.ExitCode() != 2 {
			t.Errorf("Resolve(%q): got %v, want a user error", ref, err)
		}
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no tokenizer.json") {
		t.Errorf("Load of an empty dir: %v", err)
	}
}

func TestHubCacheDir(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HF_HUB_CACHE": "/c", "HF_HOME": "/h"}, "/c"},
		{map[string]string{"HF_HOME": "/h", "HOME": "/home/u"}, filepath.Join("/h", "hub")},
		{map[string]string{"XDG_CACHE_HOME": "/x", "HOME": "/home/u"}, filepath.Join("/x", "huggingface", "hub")},
		{map[string]string{"HOME": "/home/u"}, filepath.Join("/home/u", ".cache", "huggingface", "hub")},
		{map[string]string{}, ""},
	}
	for _, c := range cases {
		if got := HubCacheDir(env(c.env)); got != c.want {
			t.Errorf("%v: got %q want %q", c.env, got, c.want)
		}
	}
}

// FuzzEncodeDecode: any string round-trips through the tiny tokenizer,
// and through Qwen3 (NFC-normalized) when its files are present.
func FuzzEncodeDecode(f *testing.F) {
	tok := tinyTokenizer(f)
	var qwen *Tokenizer
	if dir := filepath.Join(repoRoot(f), ".cache", "tokenizers", "qwen3"); fileExists(filepath.Join(dir, TokenizerFile)) {
		qwen = realTokenizer(f, "qwen3")
	}
	for _, s := range []string{"hello", "a   b\n\n", "<|end|>x", "\xff\xfe", "😀 日本", "'S'll"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := tok.Decode(tok.Encode(s, false))
		if err != nil {
			t.Fatal(err)
		}
		if got != s {
			t.Fatalf("round trip %q -> %q", s, got)
		}
		if qwen == nil || !utf8.ValidString(s) {
			return // NFC is defined on valid UTF-8 only
		}
		got, err = qwen.Decode(qwen.Encode(s, false))
		if err != nil {
			t.Fatal(err)
		}
		if want := norm.NFC.String(s); got != want {
			t.Fatalf("qwen3 round trip %q -> %q, want %q", s, got, want)
		}
	})
}

// FuzzParse: garbage tokenizer.json and config never panic.
func FuzzParse(f *testing.F) {
	f.Add(tinyTokenizerJSON(f), []byte(`{"bos_token": {"content": "<s>"}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": -1}}}`), []byte(`null`))
	f.Add([]byte(`{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?!"}}}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, data, config []byte) {
		tok, err := Parse(data, config)
		if err == nil {
			tok.Encode("hello world 123 <|end|>", true)
		}
		// what the hand-written scanner accepts, encoding/json reads the same
		f1, tables1, ok := scanTokenizerJSON(data)
		if !ok {
			return
		}
		f2, tables2, err := decodeTokenizerJSON(data)
		if err != nil {
			t.Fatalf("scanner accepted what encoding/json rejects: %v", err)
		}
		tok1, err1 := build(f1, tables1, &configJSON{})
		tok2, err2 := build(f2, tables2, &configJSON{})
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("build after the scanner: %v; after encoding/json: %v", err1, err2)
		}
		if err1 == nil {
			const text = "hello world 123 <|end|>"
			if a, b := tok1.Encode(text, false), tok2.Encode(text, false); !slices.Equal(a, b) {
				t.Fatalf("Encode after the scanner %v, after encoding/json %v", a, b)
			}
		}
	})
}

// FuzzPattern: any pattern either fails to compile or matches safely.
func FuzzPattern(f *testing.F) {
	f.Add(`\s+(?!\S)|\s+`, "a  b  ")
	f.Add(`[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}`, "x1234 yz")
	f.Fuzz(func(t *testing.T, src, text string) {
		if len(src) > 200 || len(text) > 2000 {
			return
		}
		pt, err := compilePattern(src)
		if err != nil {
			return
		}
		prev := 0
		pt.findAll(text, func(a, b int) {
			if a < prev || b <= a || b > len(text) {
				t.Fatalf("bad match [%d,%d) after %d", a, b, prev)
			}
			prev = b
		})
	})
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
