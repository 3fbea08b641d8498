package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Rune classes the hand-written splitter and the NFC fast path need, one
// table lookup per rune instead of several binary searches through
// unicode range tables.
const (
	classL     uint8 = 1 << iota // \p{L}
	classN                       // \p{N}
	classSpace                   // \s (White_Space)
	classCRLF                    // \r or \n
	// classInert: NFC leaves the rune alone whatever surrounds it: it is
	// NFC_Quick_Check=Yes with combining class 0, so it neither changes,
	// reorders, nor combines with the rune before it. Text made only of
	// such runes is already NFC.
	classInert
)

var (
	classOnce sync.Once
	bmpClass  [0x10000]uint8 // the Basic Multilingual Plane; others are computed
)

// runeClasses fills the class table once per process (a few milliseconds,
// paid by the first Encode rather than by every Load).
func runeClasses() *[0x10000]uint8 {
	classOnce.Do(func() {
		// categories range by range, which is far quicker than rune by rune
		for _, tc := range []struct {
			table *unicode.RangeTable
			class uint8
		}{{unicode.L, classL}, {unicode.N, classN}, {unicode.White_Space, classSpace}} {
			for _, r := range tc.table.R16 {
				for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
					bmpClass[c] |= tc.class
				}
			}
			for _, r := range tc.table.R32 {
				for c := rune(r.Lo); c <= rune(r.Hi) && c < 0x10000; c += rune(r.Stride) {
					bmpClass[c] |= tc.class
				}
			}
		}
		bmpClass['\r'] |= classCRLF
		bmpClass['\n'] |= classCRLF
		var buf [utf8.UTFMax]byte
		for r := rune(0); r < 0x10000; r++ {
			if r < utf8.RuneSelf || utf8.ValidRune(r) && isInert(string(utf8.AppendRune(buf[:0], r))) {
				bmpClass[r] |= classInert
			}
		}
	})
	return &bmpClass
}

// categoryClass is the class of r without classInert.
func categoryClass(r rune) uint8 {
	var c uint8
	if unicode.Is(unicode.L, r) {
		c |= classL
	}
	if unicode.Is(unicode.N, r) {
		c |= classN
	}
	if unicode.Is(unicode.White_Space, r) {
		c |= classSpace
	}
	if r == '\r' || r == '\n' {
		c |= classCRLF
	}
	return c
}

// isInert reports whether the single rune in s is NFC-inert.
func isInert(s string) bool {
	p := norm.NFC.PropertiesString(s)
	return p.CCC() == 0 && p.BoundaryBefore() && norm.NFC.IsNormalString(s)
}

// classOf returns the class of the rune at s[i] and its size; classInert
// is set only for runes in the table. Invalid UTF-8 is one byte of U+FFFD,
// a symbol, as in the general pattern engine.
func classOf(table *[0x10000]uint8, s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return table[c], 1
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return table[r], size
	}
	return categoryClass(r), size
}

// normalizeNFC returns the NFC form of s. Text whose runes are all inert
// (ASCII, most scripts, CJK, emoji) is returned as is after one table
// pass; from the inert rune before the first other one on (a boundary
// NFC never works across), the norm package does the work.
func normalizeNFC(s string) string {
	table := runeClasses()
	prev := 0 // start of the last inert rune
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			prev = i
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		var inert bool
		if r < 0x10000 {
			inert = table[r]&classInert != 0
		} else {
			inert = isInert(s[i : i+size])
		}
		if !inert {
			out := make([]byte, prev, len(s)+len(s)/8)
			copy(out, s)
			return string(norm.NFC.AppendString(out, s[prev:]))
		}
		prev = i
		i += size
	}
	return s
}
