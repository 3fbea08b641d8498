package tokenizer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Error is a problem a user can fix: a missing, oversized or malformed
// tokenizer file, or a tokenizer kind this package does not support.
// Exit code 2.
type Error = usererr.Error

func errorf(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// Bounds of the files read from a tokenizer directory: the largest
// tokenizer.json files published are tens of megabytes.
const (
	MaxTokenizerBytes = 256 << 20
	MaxConfigBytes    = 64 << 20
)

// Files read from a tokenizer directory.
const (
	TokenizerFile = "tokenizer.json"
	ConfigFile    = "tokenizer_config.json"
)

// Load reads tokenizer.json and (if present) tokenizer_config.json from dir.
func Load(dir string) (*Tokenizer, error) {
	return LoadContext(context.Background(), dir)
}

// LoadContext is Load whose reads are bounded (MaxTokenizerBytes,
// MaxConfigBytes) and stop when ctx is cancelled.
func LoadContext(ctx context.Context, dir string) (*Tokenizer, error) {
	data, err := readJSONFile(ctx, filepath.Join(dir, TokenizerFile), MaxTokenizerBytes)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errorf("no %s in %s: point the tokenizer at a directory holding a Hugging Face %s", TokenizerFile, dir, TokenizerFile)
		}
		return nil, readError(ctx, err)
	}
	var config []byte
	config, err = readJSONFile(ctx, filepath.Join(dir, ConfigFile), MaxConfigBytes)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, readError(ctx, err)
	}
	t, err := Parse(data, config)
	if err != nil {
		var pe *parseError
		if errors.As(err, &pe) {
			return nil, errorf("%s%s", filepath.Join(dir, pe.file), pe.msg)
		}
		return nil, err
	}
	t.dir = dir
	return t, nil
}

// readJSONFile reads a JSON object file of at most limit bytes, giving
// up at once on one that does not start like an object (/dev/zero, a
// binary file) rather than reading it to the limit.
func readJSONFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	f, err := boundedio.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > limit {
		return nil, &boundedio.TooLargeError{Path: path, Limit: limit}
	}
	r := bufio.NewReaderSize(boundedio.NewLimitReader(f, path, limit), 64<<10)
	head, err := r.Peek(4096)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, err
	}
	if t := bytes.TrimLeft(head, " \t\r\n\ufeff"); len(t) > 0 && t[0] != '{' {
		return nil, errorf("%s is not a JSON object (it starts with %q); is it a tokenizer file?", path, t[:min(len(t), 8)])
	}
	return boundedio.ReadAll(r, limit)
}

// readError words a failed read: cancellation stays itself; a file over
// its bound or unreadable is the user's to fix.
func readError(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return err
	}
	var tl *boundedio.TooLargeError
	if errors.As(err, &tl) {
		return errorf("%s is larger than the limit of %s; is it a tokenizer file?", tl.Path, boundedio.Size(tl.Limit))
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return errorf("cannot read %s: %v", pe.Path, pe.Err)
	}
	return errorf("cannot read the tokenizer: %v", err)
}

// parseError carries which file a parse problem is in, so Load can name
// the path; Parse hands it out as the cause of an *Error.
type parseError struct{ file, msg string }

func (e *parseError) Error() string { return e.file + e.msg }
func fileErrorf(file, format string, args ...any) error {
	pe := &parseError{file: file, msg: fmt.Sprintf(format, args...)}
	return &Error{Msg: pe.Error(), Err: pe}
}

// jsonError turns a decoding error into ":line: message" using the byte
// offset encoding/json reports.
func jsonError(file string, data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fileErrorf(file, ":%d: invalid JSON: %v", lineOf(data, syn.Offset), syn)
	case errors.As(err, &typ):
		return fileErrorf(file, ":%d: %s should be %s, not JSON %s", lineOf(data, typ.Offset), typ.Field, typ.Type, typ.Value)
	}
	return fileErrorf(file, ": invalid JSON: %v", err)
}

// lineOf is the 1-based line holding byte offset off.
func lineOf(data []byte, off int64) int {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	if off < 0 {
		off = 0
	}
	return bytes.Count(data[:off], []byte{'\n'}) + 1
}

// The parts of tokenizer.json this package reads.
type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    *componentJSON   `json:"normalizer"`
	PreTokenizer  *componentJSON   `json:"pre_tokenizer"`
	PostProcessor *componentJSON   `json:"post_processor"`
	Decoder       *componentJSON   `json:"decoder"`
	Model         modelJSON        `json:"model"`
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// componentJSON is any normalizer, pre-tokenizer, post-processor or
// decoder; the fields used depend on Type.
type componentJSON struct {
	Type           string           `json:"type"`
	Normalizers    []*componentJSON `json:"normalizers"`
	PreTokenizers  []*componentJSON `json:"pretokenizers"`
	Processors     []*componentJSON `json:"processors"`
	Decoders       []*componentJSON `json:"decoders"`
	Pattern        *patternJSON     `json:"pattern"`
	Behavior       string           `json:"behavior"`
	Invert         bool             `json:"invert"`
	AddPrefixSpace bool             `json:"add_prefix_space"`
	UseRegex       bool             `json:"use_regex"`
	Individual     bool             `json:"individual_digits"`
	Single         []templatePiece  `json:"single"`
	SpecialTokens  map[string]struct {
		IDs []int `json:"ids"`
	} `json:"special_tokens"`
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

type templatePiece struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	ByteFallback            bool            `json:"byte_fallback"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	Dropout                 *float64        `json:"dropout"`
}

// configJSON is the part of tokenizer_config.json that matters here.
type configJSON struct {
	BOSToken     tokenName       `json:"bos_token"`
	EOSToken     tokenName       `json:"eos_token"`
	PADToken     tokenName       `json:"pad_token"`
	UNKToken     tokenName       `json:"unk_token"`
	AddBOSToken  *bool           `json:"add_bos_token"`
	AddEOSToken  *bool           `json:"add_eos_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
}

// tokenName is a special token written either as a string or as an
// AddedToken object {"content": ...}; null is empty.
type tokenName string

func (n *tokenName) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*n = tokenName(s)
		return nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		// lists or numbers: not a single token, ignore as HF does for
		// fields it does not understand here
		return nil
	}
	*n = tokenName(obj.Content)
	return nil
}

// Parse builds a tokenizer from the contents of tokenizer.json and
// tokenizer_config.json (config may be nil).
//
// tokenizer.json is read by a scanner specialised for the vocab and merges,
// which are nearly all of the file; anything it does not expect sends the
// whole file through encoding/json instead, which defines the result and
// the error messages.
func Parse(tokenizerJSON, configJSONData []byte) (*Tokenizer, error) {
	var cfg configJSON
	if len(configJSONData) > 0 {
		if err := json.Unmarshal(configJSONData, &cfg); err != nil {
			return nil, jsonError(ConfigFile, configJSONData, err)
		}
	}
	f, tables, ok := scanTokenizerJSON(tokenizerJSON)
	if !ok {
		var err error
		if f, tables, err = decodeTokenizerJSON(tokenizerJSON); err != nil {
			return nil, err
		}
	}
	return build(f, tables, &cfg)
}

// decodeTokenizerJSON reads tokenizer.json with encoding/json.
func decodeTokenizerJSON(data []byte) (*fileJSON, *modelTables, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, nil, jsonError(TokenizerFile, data, err)
	}
	tables := &modelTables{hasVocab: f.Model.Vocab != nil, hasMerges: f.Model.Merges != nil}
	keys := make([]string, 0, len(f.Model.Vocab))
	for k := range f.Model.Vocab {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var text []byte
	for _, k := range keys {
		text = append(text, k...)
		tables.vocabEnd = append(tables.vocabEnd, uint32(len(text)))
		id := f.Model.Vocab[k]
		if id != int(int32(id)) {
			return nil, nil, fileErrorf(TokenizerFile, ": token id %d is implausibly large", id)
		}
		tables.vocabIDs = append(tables.vocabIDs, int32(id))
	}
	tables.vocabText = string(text)
	merges, err := parseMerges(f.Model.Merges)
	if err != nil {
		return nil, nil, err
	}
	text = text[:0]
	for _, mg := range merges {
		text = append(text, mg[0]...)
		tables.mergeEnd = append(tables.mergeEnd, uint32(len(text)))
		text = append(text, mg[1]...)
		tables.mergeEnd = append(tables.mergeEnd, uint32(len(text)))
	}
	tables.mergeText = string(text)
	f.Model.Vocab, f.Model.Merges = nil, nil
	return &f, tables, nil
}

func build(f *fileJSON, tables *modelTables, cfg *configJSON) (*Tokenizer, error) {
	m := &f.Model
	switch {
	case m.Type != "BPE" && !(m.Type == "" && tables.hasVocab && tables.hasMerges):
		return nil, fileErrorf(TokenizerFile, ": model type %q is not supported: only byte-level BPE tokenizers (Qwen, Llama 3, DeepSeek, gpt-oss) are", m.Type)
	case m.ByteFallback:
		return nil, fileErrorf(TokenizerFile, ": BPE with byte_fallback (SentencePiece-style) is not supported: only byte-level BPE is")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "",
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, fileErrorf(TokenizerFile, ": BPE subword prefixes/suffixes are not supported: only byte-level BPE is")
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, fileErrorf(TokenizerFile, ": BPE dropout is not supported for exact tokenization")
	case tables.vocabLen() == 0:
		return nil, fileErrorf(TokenizerFile, ": model.vocab is empty")
	}
	if !isByteLevel(f.Decoder) {
		return nil, fileErrorf(TokenizerFile, ": decoder %s is not supported: only ByteLevel decoding is", describe(f.Decoder))
	}

	t := &Tokenizer{ignoreMerges: m.IgnoreMerges, model: *tables}
	tables = &t.model
	var fromChar [512]int16 // byte-level char -> byte, -1 if none
	for i := range fromChar {
		fromChar[i] = -1
	}
	for b, r := range byteLevel {
		fromChar[r] = int16(b)
	}

	// the vocab index; a repeated token text keeps its last id, as
	// decoding the JSON object into a map would
	n := tables.vocabLen()
	t.index = newTokenIndex(n)
	live := make([]bool, n)
	maxID := -1
	for i := 0; i < n; i++ {
		id := int(tables.vocabIDs[i])
		if id < 0 {
			return nil, fileErrorf(TokenizerFile, ": token %q has negative id %d", tables.vocabKey(i), id)
		}
		maxID = max(maxID, id)
		live[i] = true
		if old := t.index.insert(tables, i); old >= 0 {
			live[old] = false
		}
	}
	addedLen := 0
	for _, a := range f.AddedTokens {
		maxID = max(maxID, a.ID)
		addedLen += len(a.Content)
	}
	// Tables are sized by the largest id: a stray huge id would make a
	// small file allocate hundreds of megabytes. Real vocabularies are
	// dense (ids 0..n-1, added tokens just above).
	if count := n + len(f.AddedTokens); maxID >= 1<<24 || maxID >= 2*count+1024 {
		return nil, fileErrorf(TokenizerFile, ": token id %d is implausibly large for %d tokens (ids should run from 0 without large gaps)", maxID, count)
	}

	// one arena for the tokens as written (the vocab text, then the added
	// tokens) and one for their raw bytes
	tokText := make([]byte, 0, len(tables.vocabText)+addedLen)
	tokText = append(tokText, tables.vocabText...)
	rawText := make([]byte, 0, len(tables.vocabText)+addedLen)
	t.tokens = make([]span, maxID+1)
	t.raw = make([]span, maxID+1)
	t.known = make([]bool, maxID+1)
	start := uint32(0)
	for i := 0; i < n; i++ {
		end := tables.vocabEnd[i]
		tok := tables.vocabText[start:end]
		sp := span{start, end - start}
		start = end
		if !live[i] {
			continue
		}
		id := tables.vocabIDs[i]
		t.tokens[id] = sp
		t.known[id] = true
		rawStart := len(rawText)
		for _, r := range tok {
			if r < 0 || int(r) >= len(fromChar) || fromChar[r] < 0 {
				// not a byte-level token (should not happen); decode as written
				rawText = append(rawText[:rawStart], tok...)
				break
			}
			rawText = append(rawText, byte(fromChar[r]))
		}
		t.raw[id] = span{uint32(rawStart), uint32(len(rawText) - rawStart)}
	}
	for b := 0; b < 256; b++ {
		e, ok := t.index.find(tables, string(byteLevel[b]))
		if !ok {
			return nil, fileErrorf(TokenizerFile, ": vocab lacks the byte-level token for byte 0x%02x, so this is not a byte-level BPE vocabulary", b)
		}
		t.byteIDs[b] = tables.vocabIDs[e]
	}

	t.merges = newMergeTable(tables.mergeLen())
	for rank := 0; rank < tables.mergeLen(); rank++ {
		left, right, ms, me := tables.merge(rank)
		l, lok := t.index.find(tables, left)
		r, rok := t.index.find(tables, right)
		res, resok := t.index.find(tables, tables.mergeText[ms:me])
		if !lok || !rok || !resok {
			return nil, fileErrorf(TokenizerFile, ": merge %d (%q %q) uses a token missing from the vocab", rank, left, right)
		}
		t.merges.add(mergeKey(tables.vocabIDs[l], tables.vocabIDs[r]), merge{rank: int32(rank), id: tables.vocabIDs[res]})
	}
	// the merges' text is not needed once they are ids
	tables.mergeText, tables.mergeEnd = "", nil

	t.addedIDs = make(map[string]int, len(f.AddedTokens))
	for _, a := range f.AddedTokens {
		if a.ID < 0 || a.Content == "" {
			return nil, fileErrorf(TokenizerFile, ": added token %q has id %d", a.Content, a.ID)
		}
		t.addedIDs[a.Content] = a.ID
		t.tokens[a.ID] = span{uint32(len(tokText)), uint32(len(a.Content))}
		tokText = append(tokText, a.Content...)
		t.raw[a.ID] = span{uint32(len(rawText)), uint32(len(a.Content))}
		rawText = append(rawText, a.Content...)
		t.known[a.ID] = true
		t.added = append(t.added, addedToken{id: a.ID, content: a.Content, lstrip: a.LStrip, rstrip: a.RStrip, special: a.Special})
	}
	t.tokText, t.rawText = string(tokText), string(rawText)
	tables.vocabText = t.tokText[:len(tables.vocabText)] // share the arena
	t.addedIndex()

	if err := t.setNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.setPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := t.setPostProcessor(f.PostProcessor, cfg); err != nil {
		return nil, err
	}

	t.special = SpecialTokens{BOS: -1, EOS: -1, PAD: -1, UNK: -1}
	for _, s := range []struct {
		name tokenName
		dst  *int
	}{{cfg.BOSToken, &t.special.BOS}, {cfg.EOSToken, &t.special.EOS}, {cfg.PADToken, &t.special.PAD}, {cfg.UNKToken, &t.special.UNK}} {
		if s.name == "" {
			continue
		}
		id, ok := t.TokenToID(string(s.name))
		if !ok {
			return nil, fileErrorf(ConfigFile, ": special token %q is not in the vocabulary", s.name)
		}
		*s.dst = id
	}
	t.specialText = map[string]string{
		"bos_token": string(cfg.BOSToken), "eos_token": string(cfg.EOSToken),
		"pad_token": string(cfg.PADToken), "unk_token": string(cfg.UNKToken),
	}
	if len(cfg.ChatTemplate) > 0 {
		var err error
		t.chatTemplates, err = parseChatTemplates(cfg.ChatTemplate)
		if err != nil {
			return nil, err
		}
	}
	return t, nil
}

// parseMerges accepts both spellings: ["a b", ...] (older files) and
// [["a", "b"], ...] (newer ones, which allow spaces inside tokens).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" || string(trimmed) == "[]" {
		return nil, nil
	}
	inner := bytes.TrimLeft(trimmed[1:], " \t\r\n")
	if len(inner) > 0 && inner[0] == '[' {
		var pairs [][2]string
		if err := json.Unmarshal(trimmed, &pairs); err != nil {
			return nil, fileErrorf(TokenizerFile, ": model.merges: %v", err)
		}
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(trimmed, &lines); err != nil {
		return nil, fileErrorf(TokenizerFile, ": model.merges: %v", err)
	}
	pairs := make([][2]string, len(lines))
	for i, l := range lines {
		a, b, ok := strings.Cut(l, " ")
		if !ok {
			return nil, fileErrorf(TokenizerFile, ": model.merges[%d] %q is not two tokens separated by a space", i, l)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

func describe(c *componentJSON) string {
	if c == nil {
		return "null"
	}
	return fmt.Sprintf("%q", c.Type)
}

func isByteLevel(c *componentJSON) bool {
	if c == nil {
		return false
	}
	switch c.Type {
	case "ByteLevel":
		return true
	case "Sequence":
		found := false
		for _, d := range c.Decoders {
			if d == nil {
				return false
			}
			switch d.Type {
			case "ByteLevel":
				found = true
			case "Fuse": // harmless after ByteLevel
			default:
				return false
			}
		}
		return found
	}
	return false
}

// parseChatTemplates reads chat_template, either a string or a list of
// {"name", "template"} objects; the unnamed one is "default".
func parseChatTemplates(raw json.RawMessage) (map[string]string, error) {
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return map[string]string{"default": one}, nil
	}
	var many []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fileErrorf(ConfigFile, ": chat_template should be a string or a list of {name, template}")
	}
	out := make(map[string]string, len(many))
	for _, m := range many {
		out[m.Name] = m.Template
	}
	return out, nil
}
