// Package tokenizer turns text into the token ids of a Hugging Face
// byte-level BPE tokenizer (Qwen2/Qwen3, Llama 3, DeepSeek, gpt-oss) and
// back, from the model's own tokenizer.json and tokenizer_config.json,
// without Python and without the network.
//
// Ids match the Hugging Face tokenizers library: added and special tokens
// are split out first, the rest is normalized, split by the pre-tokenizer
// pattern, mapped to bytes and merged by rank.
package tokenizer

import (
	"fmt"
	"strings"
)

// Tokenizer is immutable after loading and safe for concurrent use.
type Tokenizer struct {
	dir string

	model        modelTables    // the vocab as written in tokenizer.json (byte-level chars)
	index        tokenIndex     // vocab text -> entry of model
	addedIDs     map[string]int // added token content -> id; wins over the vocab
	tokText      string         // arena of the tokens as written
	tokens       []span         // id -> token as written, in tokText
	rawText      string         // arena of the tokens' raw bytes
	raw          []span         // id -> the raw bytes it stands for, in rawText
	known        []bool         // id is defined
	byteIDs      [256]int32     // the single-byte tokens
	merges       mergeTable
	ignoreMerges bool
	cache        wordCache

	added      []addedToken
	addedStart [256]bool        // some added token starts with this byte
	addedNext  map[uint32]int32 // trie of the added tokens: node<<8 | byte -> child; the root is 0
	addedEnd   []int32          // trie node -> index into added of the token ending there, or -1

	nfc         bool
	splits      []split // applied in order to every piece
	prefixSpace bool    // ByteLevel add_prefix_space

	prefix, suffix []int // ids added by Encode(text, true)

	special       SpecialTokens
	specialText   map[string]string
	chatTemplates map[string]string
}

// SpecialTokens are the ids of the tokens tokenizer_config.json names;
// -1 when it names none.
type SpecialTokens struct {
	BOS, EOS, PAD, UNK int
}

type addedToken struct {
	id             int
	content        string
	lstrip, rstrip bool
	special        bool
}

// split is one Split pre-tokenizer step.
type split struct {
	pattern  *pattern
	literal  string // a String pattern
	behavior string
	invert   bool
}

// addedIndex builds the trie that finds the longest added token at a
// position in one walk, however many tokens share a prefix (Llama 3 has
// 256 that start with "<|").
func (t *Tokenizer) addedIndex() {
	t.addedNext = make(map[uint32]int32)
	t.addedEnd = []int32{-1}
	for i, a := range t.added {
		t.addedStart[a.content[0]] = true
		node := int32(0)
		for j := 0; j < len(a.content); j++ {
			key := uint32(node)<<8 | uint32(a.content[j])
			child, ok := t.addedNext[key]
			if !ok {
				child = int32(len(t.addedEnd))
				t.addedEnd = append(t.addedEnd, -1)
				t.addedNext[key] = child
			}
			node = child
		}
		if t.addedEnd[node] < 0 { // the first of equal contents wins
			t.addedEnd[node] = int32(i)
		}
	}
}

// longestAdded returns the index into added of the longest added token s
// starts with, or -1.
func (t *Tokenizer) longestAdded(s string) int {
	best, node := -1, int32(0)
	for j := 0; j < len(s); j++ {
		child, ok := t.addedNext[uint32(node)<<8|uint32(s[j])]
		if !ok {
			break
		}
		node = child
		if e := t.addedEnd[node]; e >= 0 {
			best = int(e)
		}
	}
	return best
}

func (t *Tokenizer) setNormalizer(c *componentJSON) error {
	if c == nil {
		return nil
	}
	switch c.Type {
	case "NFC":
		t.nfc = true
		return nil
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := t.setNormalizer(n); err != nil {
				return err
			}
		}
		return nil
	}
	return fileErrorf(TokenizerFile, ": normalizer %q is not supported (supported: NFC)", c.Type)
}

// gpt2Pattern is what a ByteLevel pre-tokenizer with use_regex splits on.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

func (t *Tokenizer) setPreTokenizer(c *componentJSON) error {
	if c == nil {
		return nil
	}
	switch c.Type {
	case "Sequence":
		for _, p := range c.PreTokenizers {
			if err := t.setPreTokenizer(p); err != nil {
				return err
			}
		}
		return nil
	case "ByteLevel":
		t.prefixSpace = c.AddPrefixSpace
		if c.UseRegex {
			return t.isolate(gpt2Pattern)
		}
		return nil
	case "Digits":
		if c.Individual {
			return t.isolate(`\p{N}`)
		}
		return t.isolate(`\p{N}+`)
	case "Split":
		s := split{behavior: c.Behavior, invert: c.Invert}
		switch s.behavior {
		case "Isolated", "Removed", "MergedWithPrevious", "MergedWithNext":
		default:
			return fileErrorf(TokenizerFile, ": Split behavior %q is not supported", c.Behavior)
		}
		switch {
		case c.Pattern != nil && c.Pattern.Regex != nil:
			pt, err := compilePattern(*c.Pattern.Regex)
			if err != nil {
				return fileErrorf(TokenizerFile, ": %v", err)
			}
			s.pattern = pt
		case c.Pattern != nil && c.Pattern.String != nil && *c.Pattern.String != "":
			s.literal = *c.Pattern.String
		default:
			return fileErrorf(TokenizerFile, ": Split pre-tokenizer without a pattern")
		}
		t.splits = append(t.splits, s)
		return nil
	}
	return fileErrorf(TokenizerFile, ": pre-tokenizer %q is not supported (supported: Sequence, Split, ByteLevel, Digits)", c.Type)
}

// isolate adds a split that makes every match of the pattern src a piece
// of its own (behavior Isolated).
func (t *Tokenizer) isolate(src string) error {
	pt, err := compilePattern(src)
	if err != nil {
		return err
	}
	t.splits = append(t.splits, split{pattern: pt, behavior: "Isolated"})
	return nil
}

// setPostProcessor decides what Encode(text, true) adds: a
// TemplateProcessing's single-sequence template if the file has one, else
// the bos/eos that tokenizer_config.json's add_bos_token/add_eos_token ask
// for (as transformers' slow tokenizers do).
func (t *Tokenizer) setPostProcessor(c *componentJSON, cfg *configJSON) error {
	if tp := findTemplate(c); tp != nil {
		seen := false
		for _, piece := range tp.Single {
			switch {
			case piece.Sequence != nil:
				seen = true
			case piece.SpecialToken != nil:
				st, ok := tp.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return fileErrorf(TokenizerFile, ": post_processor names special token %q it does not define", piece.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					if id < 0 || id >= len(t.known) || !t.known[id] {
						return fileErrorf(TokenizerFile, ": post_processor uses unknown token id %d", id)
					}
				}
				if seen {
					t.suffix = append(t.suffix, st.IDs...)
				} else {
					t.prefix = append(t.prefix, st.IDs...)
				}
			}
		}
		return nil
	}
	if cfg.AddBOSToken != nil && *cfg.AddBOSToken && cfg.BOSToken != "" {
		if id, ok := t.TokenToID(string(cfg.BOSToken)); ok {
			t.prefix = []int{id}
		}
	}
	if cfg.AddEOSToken != nil && *cfg.AddEOSToken && cfg.EOSToken != "" {
		if id, ok := t.TokenToID(string(cfg.EOSToken)); ok {
			t.suffix = []int{id}
		}
	}
	return nil
}

func findTemplate(c *componentJSON) *componentJSON {
	if c == nil {
		return nil
	}
	if c.Type == "TemplateProcessing" {
		return c
	}
	for _, p := range c.Processors {
		if tp := findTemplate(p); tp != nil {
			return tp
		}
	}
	return nil
}

// Encode returns the token ids of text. Added and special tokens written
// in text (such as "<|im_end|>") become their ids, as in Hugging Face's
// default. With addSpecial, the ids the tokenizer's post-processor adds
// (a bos token for some models, nothing for Qwen and this Llama 3 file)
// are added too.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	out := make([]int, 0, len(text)/3+4)
	if addSpecial {
		out = append(out, t.prefix...)
	}
	out = t.encodeText(text, out)
	if addSpecial {
		out = append(out, t.suffix...)
	}
	return out
}

// Count returns len(Encode(text, addSpecial)).
func (t *Tokenizer) Count(text string, addSpecial bool) int {
	return len(t.Encode(text, addSpecial))
}

func (t *Tokenizer) encodeText(text string, out []int) []int {
	start := 0 // start of the pending ordinary text
	for i := 0; i < len(text); i++ {
		if !t.addedStart[text[i]] {
			continue
		}
		ai := t.longestAdded(text[i:])
		if ai < 0 {
			continue
		}
		a := &t.added[ai]
		end := i + len(a.content)
		before := i
		if a.lstrip {
			before = len(strings.TrimRight(text[start:i], " \t\n\r\v\f")) + start
		}
		if a.rstrip {
			end = len(text) - len(strings.TrimLeft(text[end:], " \t\n\r\v\f"))
		}
		out = t.encodeOrdinary(text[start:before], out)
		out = append(out, a.id)
		start = end
		i = end - 1
	}
	return t.encodeOrdinary(text[start:], out)
}

// encodeOrdinary encodes text that holds no added token.
func (t *Tokenizer) encodeOrdinary(text string, out []int) []int {
	if text == "" {
		return out
	}
	if t.nfc {
		text = normalizeNFC(text)
	}
	if t.prefixSpace && text[0] != ' ' {
		text = " " + text
	}
	if len(t.splits) == 1 && t.splits[0].pattern != nil && t.splits[0].pattern.words != nil {
		// the common case (Qwen, Llama 3), without a callback per piece;
		// the splitter leaves no gaps, so Isolated needs no bookkeeping
		words, table := t.splits[0].pattern.words, runeClasses()
		for pos := 0; pos < len(text); {
			end := words.matchAt(table, text, pos)
			out = t.bpeCached(text[pos:end], out)
			pos = end
		}
		return out
	}
	return t.splitFrom(0, text, out)
}

// splitFrom applies split step k and the following ones to piece, then BPE.
func (t *Tokenizer) splitFrom(k int, piece string, out []int) []int {
	if k == len(t.splits) {
		return t.bpeCached(piece, out)
	}
	s := &t.splits[k]
	if s.behavior == "Isolated" && s.pattern != nil {
		// every gap and every match is its own piece, whatever invert says
		prev := 0
		s.pattern.findAll(piece, func(a, b int) {
			if a > prev {
				out = t.splitFrom(k+1, piece[prev:a], out)
			}
			out = t.splitFrom(k+1, piece[a:b], out)
			prev = b
		})
		if prev < len(piece) {
			out = t.splitFrom(k+1, piece[prev:], out)
		}
		return out
	}
	emit := func(p string) {
		if p != "" {
			out = t.splitFrom(k+1, p, out)
		}
	}
	var matches [][2]int
	if s.pattern != nil {
		s.pattern.findAll(piece, func(a, b int) { matches = append(matches, [2]int{a, b}) })
	} else {
		for off := 0; ; {
			j := strings.Index(piece[off:], s.literal)
			if j < 0 {
				break
			}
			matches = append(matches, [2]int{off + j, off + j + len(s.literal)})
			off += j + len(s.literal)
		}
	}
	// pieces alternate gap, match, gap, ...; invert swaps their roles
	type part struct {
		text    string
		isMatch bool
	}
	parts := make([]part, 0, 2*len(matches)+1)
	prev := 0
	for _, m := range matches {
		if m[0] > prev {
			parts = append(parts, part{piece[prev:m[0]], s.invert})
		}
		parts = append(parts, part{piece[m[0]:m[1]], !s.invert})
		prev = m[1]
	}
	if prev < len(piece) {
		parts = append(parts, part{piece[prev:], s.invert})
	}
	switch s.behavior {
	case "Isolated":
		for _, p := range parts {
			emit(p.text)
		}
	case "Removed":
		for _, p := range parts {
			if !p.isMatch {
				emit(p.text)
			}
		}
	case "MergedWithPrevious":
		var cur strings.Builder
		for _, p := range parts {
			if p.isMatch {
				cur.WriteString(p.text)
				emit(cur.String())
				cur.Reset()
			} else {
				emit(cur.String())
				cur.Reset()
				cur.WriteString(p.text)
			}
		}
		emit(cur.String())
	case "MergedWithNext":
		var cur strings.Builder
		for _, p := range parts {
			if p.isMatch {
				emit(cur.String())
				cur.Reset()
				cur.WriteString(p.text)
			} else {
				cur.WriteString(p.text)
				emit(cur.String())
				cur.Reset()
			}
		}
		emit(cur.String())
	}
	return out
}

// Decode returns the text of ids: the bytes every token stands for,
// concatenated. A token may hold part of a multi-byte character (emoji are
// often split over tokens); the bytes join up once the rest follows, and a
// sequence cut mid-character yields those raw bytes, not U+FFFD, so callers
// can decode token by token and concatenate.
func (t *Tokenizer) Decode(ids []int) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		if id < 0 || id >= len(t.known) || !t.known[id] {
			return "", errorf("token id %d is not in the vocabulary (ids run from 0 to %d)", id, len(t.known)-1)
		}
		b.WriteString(t.raw[id].of(t.rawText))
	}
	return b.String(), nil
}

// TokenToID returns the id of a token as tokenizer.json writes it (byte-
// level characters, e.g. "Ġthe" for " the") or of an added token.
func (t *Tokenizer) TokenToID(token string) (int, bool) {
	if id, ok := t.addedIDs[token]; ok {
		return id, true
	}
	if e, ok := t.index.find(&t.model, token); ok {
		return int(t.model.vocabIDs[e]), true
	}
	return 0, false
}

// IDToToken returns a token as tokenizer.json writes it.
func (t *Tokenizer) IDToToken(id int) (string, bool) {
	if id < 0 || id >= len(t.known) || !t.known[id] {
		return "", false
	}
	return t.tokens[id].of(t.tokText), true
}

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int) bool {
	for _, a := range t.added {
		if a.id == id {
			return a.special
		}
	}
	return false
}

// VocabSize is one more than the largest token id: the base vocabulary
// plus the added tokens. (The model's embedding matrix may be larger.)
func (t *Tokenizer) VocabSize() int { return len(t.known) }

// Special returns the bos/eos/pad/unk ids named in tokenizer_config.json.
func (t *Tokenizer) Special() SpecialTokens { return t.special }

// SpecialTokenText returns the special tokens' text by the names chat
// templates use ("bos_token", "eos_token", "pad_token", "unk_token").
func (t *Tokenizer) SpecialTokenText() map[string]string {
	out := make(map[string]string, len(t.specialText))
	for k, v := range t.specialText {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// ChatTemplate returns the Jinja chat template of tokenizer_config.json by
// name ("default" for the main one, "tool_use" and others when the file
// has a list).
func (t *Tokenizer) ChatTemplate(name string) (string, bool) {
	s, ok := t.chatTemplates[name]
	return s, ok
}

// Dir is the directory the tokenizer was loaded from ("" if parsed).
func (t *Tokenizer) Dir() string { return t.dir }

func (t *Tokenizer) String() string {
	return fmt.Sprintf("tokenizer(%s, %d tokens)", t.dir, t.VocabSize())
}
