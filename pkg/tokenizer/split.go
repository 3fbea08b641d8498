package tokenizer

// wordSplitter is a hand-written matcher for the split pattern of the
// Llama 3 / Qwen2 / Qwen3 family, the hot loop of encoding:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,K}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// with K = 3 (Llama 3) or a single \p{N} (Qwen). It gives exactly the
// matches the general engine (pattern.go) gives for the same source, which
// TestWordSplitterMatchesEngine and FuzzWordSplitter check; compilePattern
// uses it only for these literal sources.
type wordSplitter struct {
	maxDigits int
}

// wordSplitterFor recognises the sources the splitter implements.
func wordSplitterFor(src string) *wordSplitter {
	const (
		head = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|`
		tail = `| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	)
	switch src {
	case head + `\p{N}{1,3}` + tail:
		return &wordSplitter{maxDigits: 3}
	case head + `\p{N}` + tail:
		return &wordSplitter{maxDigits: 1}
	}
	return nil
}

// matchAt returns the end of the match at pos (pos < len(s)); every
// non-empty text matches, so the end is always past pos.
func (w *wordSplitter) matchAt(table *[0x10000]uint8, s string, pos int) int {
	c, size := classOf(table, s, pos)

	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if s[pos] == '\'' && pos+1 < len(s) {
		if end := contraction(s, pos+1); end > 0 {
			return end
		}
	}

	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c&classL != 0 {
		return letterRun(table, s, pos+size)
	}
	if c&(classN|classCRLF) == 0 && pos+size < len(s) {
		if c2, size2 := classOf(table, s, pos+size); c2&classL != 0 {
			return letterRun(table, s, pos+size+size2)
		}
	}

	// \p{N}{1,K}
	if c&classN != 0 {
		end := pos + size
		for n := 1; n < w.maxDigits && end < len(s); n++ {
			c2, size2 := classOf(table, s, end)
			if c2&classN == 0 {
				break
			}
			end += size2
		}
		return end
	}

	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	start := pos
	if s[pos] == ' ' {
		start++
	}
	if start < len(s) {
		if c2, size2 := classOf(table, s, start); c2&(classL|classN|classSpace) == 0 {
			end := start + size2
			for end < len(s) {
				c3, size3 := classOf(table, s, end)
				if c3&(classL|classN|classSpace) != 0 {
					break
				}
				end += size3
			}
			for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
				end++
			}
			return end
		}
	}

	// Only whitespace is left (c has classSpace). Over the run s[pos:end]:
	// \s*[\r\n]+ ends just after the run's last \r or \n; else
	// \s+(?!\S) takes the run at the end of the text, or all of it but
	// its last rune (which then starts the next word); else \s+ takes the
	// single whitespace rune.
	end, lastRune, afterNewline := pos, pos, -1
	for end < len(s) {
		c3, size3 := classOf(table, s, end)
		if c3&classSpace == 0 {
			break
		}
		lastRune = end
		end += size3
		if c3&classCRLF != 0 {
			afterNewline = end
		}
	}
	switch {
	case afterNewline > 0:
		return afterNewline
	case end == len(s):
		return end
	case lastRune > pos:
		return lastRune
	}
	return end
}

// contraction matches 's 't 're 've 'm 'll 'd (any case; s also as ſ,
// its Unicode case-fold partner) after the apostrophe at i-1; 0 if none.
func contraction(s string, i int) int {
	switch s[i] | 0x20 {
	case 's', 't', 'm', 'd':
		return i + 1
	case 'r', 'v':
		if i+1 < len(s) && s[i+1]|0x20 == 'e' {
			return i + 2
		}
	case 'l':
		if i+1 < len(s) && s[i+1]|0x20 == 'l' {
			return i + 2
		}
	}
	if len(s) >= i+2 && s[i] == 0xC5 && s[i+1] == 0xBF { // ſ U+017F
		return i + 2
	}
	return 0
}

func letterRun(table *[0x10000]uint8, s string, end int) int {
	for end < len(s) {
		c, size := classOf(table, s, end)
		if c&classL == 0 {
			break
		}
		end += size
	}
	return end
}
