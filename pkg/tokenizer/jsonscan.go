package tokenizer

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// scanTokenizerJSON reads tokenizer.json in one pass: model.vocab and
// model.merges (nearly all of the file) by hand straight into
// modelTables, everything else (a few kilobytes) by encoding/json. It
// reports !ok for anything but valid JSON of the usual shape (a repeated
// key, a string with an invalid surrogate or invalid UTF-8, a number that
// is not a plain integer id, ...), and Parse then decodes the file with
// encoding/json alone, which decides both the result and the error.
func scanTokenizerJSON(data []byte) (*fileJSON, *modelTables, bool) {
	s := jsonScanner{data: data}
	tables := &modelTables{}
	rest := []byte{'{'}      // the top-level members but model
	modelRest := []byte{'{'} // the model's members but vocab and merges
	seenModel := false
	ok := s.object(func(rawKey []byte, key string) bool {
		switch {
		case key == "model" && !seenModel:
			seenModel = true
			return s.model(tables, &modelRest)
		case strings.EqualFold(key, "model"):
			return false
		}
		return s.copyMember(&rest, rawKey)
	})
	if !ok {
		return nil, nil, false
	}
	var f fileJSON
	if json.Unmarshal(closeObject(rest), &f) != nil || json.Unmarshal(closeObject(modelRest), &f.Model) != nil {
		return nil, nil, false
	}
	return &f, tables, true
}

func closeObject(b []byte) []byte {
	if b[len(b)-1] == ',' {
		b[len(b)-1] = '}'
		return b
	}
	return append(b, '}')
}

type jsonScanner struct {
	data []byte
	pos  int
}

func (s *jsonScanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// eat skips whitespace and then c, if c is there.
func (s *jsonScanner) eat(c byte) bool {
	s.ws()
	if s.pos < len(s.data) && s.data[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

// sequence reads open item, item, ... close: a JSON object or array.
// item reads one (from its first byte, whitespace skipped) and returns
// false to give up.
func (s *jsonScanner) sequence(open, close byte, item func() bool) bool {
	if !s.eat(open) {
		return false
	}
	if s.eat(close) {
		return true
	}
	for {
		s.ws()
		if !item() {
			return false
		}
		if !s.eat(',') {
			return s.eat(close)
		}
	}
}

// object reads {"key": value, ...}; member reads each value and returns
// false to give up. The object must end the input if it is the top level.
func (s *jsonScanner) object(member func(rawKey []byte, key string) bool) bool {
	top := s.pos == 0
	ok := s.sequence('{', '}', func() bool {
		start := s.pos
		if !s.skipString() {
			return false
		}
		rawKey := s.data[start:s.pos]
		if bytes.IndexByte(rawKey, '\\') >= 0 || !s.eat(':') {
			return false
		}
		s.ws()
		return member(rawKey, string(rawKey[1:len(rawKey)-1]))
	})
	if ok && top {
		s.ws()
		return s.pos == len(s.data)
	}
	return ok
}

// copyMember appends "key": value, to dst for encoding/json to read.
func (s *jsonScanner) copyMember(dst *[]byte, rawKey []byte) bool {
	start := s.pos
	if !s.skipValue() {
		return false
	}
	*dst = append(*dst, rawKey...)
	*dst = append(*dst, ':')
	*dst = append(*dst, s.data[start:s.pos]...)
	*dst = append(*dst, ',')
	return true
}

func (s *jsonScanner) model(tables *modelTables, rest *[]byte) bool {
	return s.object(func(rawKey []byte, key string) bool {
		switch {
		case key == "vocab" && !tables.hasVocab:
			tables.hasVocab = true
			return s.vocab(tables)
		case key == "merges" && !tables.hasMerges:
			tables.hasMerges = true
			return s.merges(tables)
		case strings.EqualFold(key, "vocab"), strings.EqualFold(key, "merges"):
			return false
		}
		return s.copyMember(rest, rawKey)
	})
}

// vocab reads {"token": id, ...}. (Its keys have escapes such as
// "\u0120", so it reads them itself rather than through object.)
func (s *jsonScanner) vocab(tables *modelTables) bool {
	text := make([]byte, 0, len(s.data)/8)
	ok := s.sequence('{', '}', func() bool {
		var ok bool
		if text, ok = s.appendString(text); !ok || !s.eat(':') {
			return false
		}
		s.ws()
		id, ok := s.integer()
		if !ok || uint64(len(text)) >= 1<<32 {
			return false
		}
		tables.vocabEnd = append(tables.vocabEnd, uint32(len(text)))
		tables.vocabIDs = append(tables.vocabIDs, id)
		return true
	})
	if ok {
		tables.vocabText = string(text)
	}
	return ok
}

// merges reads either spelling: ["a b", ...] or [["a", "b"], ...], the
// first element deciding which (as parseMerges does).
func (s *jsonScanner) merges(tables *modelTables) bool {
	text := make([]byte, 0, len(s.data)/8)
	first, pairs := true, false
	ok := s.sequence('[', ']', func() bool {
		if first {
			first, pairs = false, s.pos < len(s.data) && s.data[s.pos] == '['
		}
		start := len(text)
		var ok bool
		if pairs {
			if !s.eat('[') {
				return false
			}
			s.ws()
			if text, ok = s.appendString(text); !ok || !s.eat(',') {
				return false
			}
			mid := len(text)
			s.ws()
			if text, ok = s.appendString(text); !ok || !s.eat(']') {
				return false
			}
			tables.mergeEnd = append(tables.mergeEnd, uint32(mid), uint32(len(text)))
		} else {
			if text, ok = s.appendString(text); !ok {
				return false
			}
			space := bytes.IndexByte(text[start:], ' ')
			if space < 0 {
				return false
			}
			mid := start + space
			text = append(text[:mid], text[mid+1:]...)
			tables.mergeEnd = append(tables.mergeEnd, uint32(mid), uint32(len(text)))
		}
		return uint64(len(text)) < 1<<32
	})
	if ok {
		tables.mergeText = string(text)
	}
	return ok
}

// skipString moves past the string at pos without decoding it.
func (s *jsonScanner) skipString() bool {
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return false
	}
	for s.pos++; s.pos < len(s.data); s.pos++ {
		switch s.data[s.pos] {
		case '\\':
			s.pos++
		case '"':
			s.pos++
			return true
		}
	}
	return false
}

// skipValue moves past the value at pos; encoding/json checks it later.
func (s *jsonScanner) skipValue() bool {
	if s.pos >= len(s.data) {
		return false
	}
	switch s.data[s.pos] {
	case '"':
		return s.skipString()
	case '{', '[':
		depth := 0
		for s.pos < len(s.data) {
			switch s.data[s.pos] {
			case '"':
				if !s.skipString() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.pos++
					return true
				}
			}
			s.pos++
		}
		return false
	}
	start := s.pos
	for s.pos < len(s.data) && !strings.ContainsRune(",}] \t\r\n", rune(s.data[s.pos])) {
		s.pos++
	}
	return s.pos > start
}

// appendString appends the value of the string at pos to dst.
func (s *jsonScanner) appendString(dst []byte) ([]byte, bool) {
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return dst, false
	}
	s.pos++
	start := s.pos
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			dst = append(dst, s.data[start:s.pos]...)
			s.pos++
			return dst, true
		case c == '\\':
			dst = append(dst, s.data[start:s.pos]...)
			var ok bool
			if dst, ok = s.appendEscape(dst); !ok {
				return dst, false
			}
			start = s.pos
		case c < 0x20:
			return dst, false
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(s.data[s.pos:])
			if r == utf8.RuneError && size == 1 {
				return dst, false // encoding/json would substitute U+FFFD
			}
			s.pos += size
		default:
			s.pos++
		}
	}
	return dst, false
}

// appendEscape decodes the escape at pos (at the backslash).
func (s *jsonScanner) appendEscape(dst []byte) ([]byte, bool) {
	if s.pos+1 >= len(s.data) {
		return dst, false
	}
	c := s.data[s.pos+1]
	s.pos += 2
	switch c {
	case '"', '\\', '/':
		return append(dst, c), true
	case 'b':
		return append(dst, '\b'), true
	case 'f':
		return append(dst, '\f'), true
	case 'n':
		return append(dst, '\n'), true
	case 'r':
		return append(dst, '\r'), true
	case 't':
		return append(dst, '\t'), true
	case 'u':
		if s.pos+4 > len(s.data) {
			return dst, false
		}
		var r rune
		for _, h := range s.data[s.pos : s.pos+4] {
			switch {
			case h >= '0' && h <= '9':
				r = r<<4 | rune(h-'0')
			case h >= 'a' && h <= 'f':
				r = r<<4 | rune(h-'a'+10)
			case h >= 'A' && h <= 'F':
				r = r<<4 | rune(h-'A'+10)
			default:
				return dst, false
			}
		}
		s.pos += 4
		if r >= 0xD800 && r < 0xE000 {
			return dst, false // surrogates: left to encoding/json
		}
		return utf8.AppendRune(dst, r), true
	}
	return dst, false
}

// integer reads a JSON number that is a plain integer of int32 range.
func (s *jsonScanner) integer() (int32, bool) {
	neg := false
	if s.pos < len(s.data) && s.data[s.pos] == '-' {
		neg = true
		s.pos++
	}
	start := s.pos
	var v int64
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		v = v*10 + int64(s.data[s.pos]-'0')
		if v > 1<<31 {
			return 0, false
		}
		s.pos++
	}
	n := s.pos - start
	if n == 0 || n > 1 && s.data[start] == '0' {
		return 0, false
	}
	if s.pos < len(s.data) {
		switch s.data[s.pos] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	if neg {
		v = -v
	}
	if v >= 1<<31 {
		return 0, false
	}
	return int32(v), true
}
