package tokenizer

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// pattern is a small backtracking regular-expression engine for the
// pre-tokenizer Split patterns of Hugging Face tokenizers.
//
// Those patterns are written for Oniguruma / fancy-regex and rely on
// negative lookahead (`\s+(?!\S)`), which Go's regexp (RE2) rejects on
// purpose. The subset they use is small: alternation, (?:...) and (?i:...)
// groups, lookaheads, character classes with \p{..} properties, and
// greedy quantifiers. Matching is Perl-style (the first alternative that
// leads to a match wins), which is what the tokenizers' engines do and what
// gives the token boundaries the models were trained with.
//
// Quantified single characters (by far the common case: \p{L}+, \s*,
// [^\r\n\p{L}\p{N}]?) loop instead of recursing, so a run of a million
// letters costs no stack.
type pattern struct {
	start *node
	src   string
	words *wordSplitter // the hand-written equivalent, for the known sources
}

type nodeKind uint8

const (
	nodeChar      nodeKind = iota // one character of a class, repeated min..max times
	nodeGroup                     // alternatives, each a chain ending in a nodeJoin
	nodeJoin                      // end of an alternative: continue after the group
	nodeLookahead                 // (?=...) or (?!...)
	nodeAccept                    // end of a lookahead body
	nodeStart                     // ^ (start of text)
	nodeEnd                       // $ (end of text)
)

type node struct {
	kind     nodeKind
	class    *charClass
	min, max int // max < 0: unbounded
	alts     []*node
	optional bool // a group quantified with ?
	negate   bool // (?!...)
	next     *node
}

// charClass is a set of characters; ASCII membership is precomputed.
type charClass struct {
	ascii  [2]uint64
	negate bool
	items  []classItem
	fold   bool
	// asciiOnly: a class of ASCII characters alone (like (?i:'s)); the
	// only non-ASCII runes it matches are the case-fold partners in
	// extra (K and the Kelvin sign), so no Unicode lookup is needed.
	asciiOnly bool
	extra     []rune
}

type classItem struct {
	lo, hi rune
	table  *unicode.RangeTable
	tables []*unicode.RangeTable // any of these (\w)
	not    bool                  // \P{..}, \S, \D, \W inside a class
}

func (c *charClass) matches(r rune) bool {
	if r < 128 {
		return c.ascii[r>>6]&(1<<(uint(r)&63)) != 0
	}
	return c.slowMatches(r)
}

func (c *charClass) slowMatches(r rune) bool {
	if c.asciiOnly && r >= 128 {
		for _, e := range c.extra {
			if e == r {
				return !c.negate
			}
		}
		return c.negate
	}
	in := c.contains(r)
	if !in && c.fold {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if c.contains(f) {
				in = true
				break
			}
		}
	}
	return in != c.negate
}

func (c *charClass) contains(r rune) bool {
	for i := range c.items {
		it := &c.items[i]
		var in bool
		switch {
		case it.table != nil:
			in = unicode.Is(it.table, r)
		case it.tables != nil:
			in = unicode.IsOneOf(it.tables, r)
		default:
			in = it.lo <= r && r <= it.hi
		}
		if in != it.not {
			return true
		}
	}
	return false
}

func (c *charClass) finish() *charClass {
	for r := rune(0); r < 128; r++ {
		if c.slowMatches(r) {
			c.ascii[r>>6] |= 1 << (uint(r) & 63)
		}
	}
	for _, it := range c.items {
		if it.table != nil || it.tables != nil || it.not || it.hi >= 128 {
			return c
		}
	}
	if c.fold {
		for r := rune(0); r < 128; r++ {
			if !c.contains(r) {
				continue
			}
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				if f >= 128 {
					c.extra = append(c.extra, f)
				}
			}
		}
	}
	c.asciiOnly = true
	return c
}

// compilePattern parses src; errors name the offending part of the pattern.
func compilePattern(src string) (*pattern, error) {
	p := &parser{src: src}
	alts, err := p.alternatives(false)
	if err != nil {
		return nil, fmt.Errorf("pre-tokenizer pattern %q: %v", src, err)
	}
	if p.pos < len(p.src) {
		return nil, fmt.Errorf("pre-tokenizer pattern %q: unexpected %q at offset %d", src, p.src[p.pos], p.pos)
	}
	return &pattern{start: &node{kind: nodeGroup, alts: alts}, src: src, words: wordSplitterFor(src)}, nil
}

type parser struct {
	src  string
	pos  int
	fold bool
}

// alternatives parses a|b|c up to a closing parenthesis (when inGroup) or
// the end. Each alternative chain ends in one shared nodeJoin whose next is
// filled in by the caller.
func (p *parser) alternatives(inGroup bool) ([]*node, error) {
	join := &node{kind: nodeJoin}
	var alts []*node
	for {
		head, err := p.sequence(join)
		if err != nil {
			return nil, err
		}
		alts = append(alts, head)
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			continue
		}
		break
	}
	if inGroup {
		if p.pos >= len(p.src) || p.src[p.pos] != ')' {
			return nil, fmt.Errorf("missing ) at offset %d", p.pos)
		}
		p.pos++
	}
	return alts, nil
}

// sequence parses atoms until | or ) and links them, ending in tail.
func (p *parser) sequence(tail *node) (*node, error) {
	var atoms []*node
	for p.pos < len(p.src) && p.src[p.pos] != '|' && p.src[p.pos] != ')' {
		a, err := p.atom()
		if err != nil {
			return nil, err
		}
		if err := p.quantifier(a); err != nil {
			return nil, err
		}
		atoms = append(atoms, a)
	}
	next := tail
	for i := len(atoms) - 1; i >= 0; i-- {
		a := atoms[i]
		if a.kind == nodeGroup {
			// the group's alternatives end in their own join
			a.alts[0].lastJoin().next = next
		}
		a.next = next
		next = a
	}
	return next, nil
}

// lastJoin finds the join node ending this chain.
func (n *node) lastJoin() *node {
	for {
		switch n.kind {
		case nodeJoin:
			return n
		case nodeGroup:
			n = n.next
		default:
			n = n.next
		}
	}
}

func (p *parser) atom() (*node, error) {
	c := p.src[p.pos]
	switch c {
	case '(':
		p.pos++
		saved := p.fold
		defer func() { p.fold = saved }()
		kind := nodeGroup
		negate := false
		if strings.HasPrefix(p.src[p.pos:], "?") {
			switch {
			case strings.HasPrefix(p.src[p.pos:], "?:"):
				p.pos += 2
			case strings.HasPrefix(p.src[p.pos:], "?i:"):
				p.pos += 3
				p.fold = true
			case strings.HasPrefix(p.src[p.pos:], "?!"):
				p.pos += 2
				kind, negate = nodeLookahead, true
			case strings.HasPrefix(p.src[p.pos:], "?="):
				p.pos += 2
				kind = nodeLookahead
			default:
				return nil, fmt.Errorf("unsupported group syntax at offset %d", p.pos-1)
			}
		}
		alts, err := p.alternatives(true)
		if err != nil {
			return nil, err
		}
		if kind == nodeLookahead {
			alts[0].lastJoin().next = &node{kind: nodeAccept}
			return &node{kind: nodeLookahead, alts: alts, negate: negate}, nil
		}
		return &node{kind: nodeGroup, alts: alts}, nil
	case '[':
		cls, err := p.class()
		if err != nil {
			return nil, err
		}
		return &node{kind: nodeChar, class: cls, min: 1, max: 1}, nil
	case '.':
		p.pos++
		cls := &charClass{negate: true, items: []classItem{{lo: '\n', hi: '\n'}}}
		return &node{kind: nodeChar, class: cls.finish(), min: 1, max: 1}, nil
	case '^':
		p.pos++
		return &node{kind: nodeStart}, nil
	case '$':
		p.pos++
		return &node{kind: nodeEnd}, nil
	case '*', '+', '?', '{':
		return nil, fmt.Errorf("quantifier %q with nothing to repeat at offset %d", c, p.pos)
	case '\\':
		it, err := p.escape()
		if err != nil {
			return nil, err
		}
		cls := &charClass{items: []classItem{it}, fold: p.fold}
		return &node{kind: nodeChar, class: cls.finish(), min: 1, max: 1}, nil
	}
	r, size := utf8.DecodeRuneInString(p.src[p.pos:])
	p.pos += size
	cls := &charClass{items: []classItem{{lo: r, hi: r}}, fold: p.fold}
	return &node{kind: nodeChar, class: cls.finish(), min: 1, max: 1}, nil
}

func (p *parser) quantifier(a *node) error {
	if p.pos >= len(p.src) {
		return nil
	}
	min, max := -1, -1
	switch p.src[p.pos] {
	case '?':
		min, max = 0, 1
		p.pos++
	case '*':
		min, max = 0, -1
		p.pos++
	case '+':
		min, max = 1, -1
		p.pos++
	case '{':
		end := strings.IndexByte(p.src[p.pos:], '}')
		if end < 0 {
			return fmt.Errorf("unclosed { at offset %d", p.pos)
		}
		body := p.src[p.pos+1 : p.pos+end]
		lo, hi, found := strings.Cut(body, ",")
		var err error
		if min, err = strconv.Atoi(lo); err != nil || min < 0 {
			return fmt.Errorf("bad repetition {%s} at offset %d", body, p.pos)
		}
		max = min
		if found {
			max = -1
			if hi != "" {
				if max, err = strconv.Atoi(hi); err != nil || max < min {
					return fmt.Errorf("bad repetition {%s} at offset %d", body, p.pos)
				}
			}
		}
		p.pos += end + 1
	default:
		return nil
	}
	if p.pos < len(p.src) && (p.src[p.pos] == '?' || p.src[p.pos] == '+') {
		return fmt.Errorf("lazy and possessive quantifiers are not supported (offset %d)", p.pos)
	}
	switch a.kind {
	case nodeChar:
		a.min, a.max = min, max
	case nodeGroup:
		if min != 0 || max != 1 {
			return fmt.Errorf("only ? may follow a group (offset %d)", p.pos)
		}
		a.optional = true
	default:
		return fmt.Errorf("nothing to repeat before offset %d", p.pos)
	}
	return nil
}

// escape parses \x after the backslash into one class item.
func (p *parser) escape() (classItem, error) {
	p.pos++ // the backslash
	if p.pos >= len(p.src) {
		return classItem{}, fmt.Errorf("trailing backslash")
	}
	c := p.src[p.pos]
	p.pos++
	switch c {
	case 's', 'S':
		return classItem{table: unicode.White_Space, not: c == 'S'}, nil
	case 'd', 'D':
		return classItem{table: unicode.Nd, not: c == 'D'}, nil
	case 'w', 'W':
		return classItem{tables: []*unicode.RangeTable{unicode.L, unicode.M, unicode.Nd, unicode.Pc}, not: c == 'W'}, nil
	case 'p', 'P':
		var name string
		if p.pos < len(p.src) && p.src[p.pos] == '{' {
			end := strings.IndexByte(p.src[p.pos:], '}')
			if end < 0 {
				return classItem{}, fmt.Errorf("unclosed \\p{ at offset %d", p.pos)
			}
			name = p.src[p.pos+1 : p.pos+end]
			p.pos += end + 1
		} else if p.pos < len(p.src) {
			name = p.src[p.pos : p.pos+1]
			p.pos++
		}
		table := unicode.Categories[name]
		if table == nil {
			table = unicode.Scripts[name]
		}
		if table == nil {
			return classItem{}, fmt.Errorf("unknown Unicode class \\%c{%s}", c, name)
		}
		return classItem{table: table, not: c == 'P'}, nil
	case 'r':
		return classItem{lo: '\r', hi: '\r'}, nil
	case 'n':
		return classItem{lo: '\n', hi: '\n'}, nil
	case 't':
		return classItem{lo: '\t', hi: '\t'}, nil
	case 'f':
		return classItem{lo: '\f', hi: '\f'}, nil
	case 'v':
		return classItem{lo: '\v', hi: '\v'}, nil
	case 'x', 'u':
		width := 2
		if c == 'u' {
			width = 4
		}
		hex := ""
		if p.pos < len(p.src) && p.src[p.pos] == '{' {
			end := strings.IndexByte(p.src[p.pos:], '}')
			if end < 0 {
				return classItem{}, fmt.Errorf("unclosed \\%c{ at offset %d", c, p.pos)
			}
			hex = p.src[p.pos+1 : p.pos+end]
			p.pos += end + 1
		} else if p.pos+width <= len(p.src) {
			hex = p.src[p.pos : p.pos+width]
			p.pos += width
		}
		v, err := strconv.ParseUint(hex, 16, 32)
		if err != nil || v > unicode.MaxRune {
			return classItem{}, fmt.Errorf("bad \\%c escape at offset %d", c, p.pos)
		}
		return classItem{lo: rune(v), hi: rune(v)}, nil
	}
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return classItem{}, fmt.Errorf("unsupported escape \\%c", c)
	}
	r, size := utf8.DecodeRuneInString(p.src[p.pos-1:])
	p.pos += size - 1
	return classItem{lo: r, hi: r}, nil
}

// class parses [...] including ranges, escapes and a leading ^.
func (p *parser) class() (*charClass, error) {
	start := p.pos
	p.pos++ // [
	cls := &charClass{fold: p.fold}
	if p.pos < len(p.src) && p.src[p.pos] == '^' {
		cls.negate = true
		p.pos++
	}
	first := true
	for {
		if p.pos >= len(p.src) {
			return nil, fmt.Errorf("unclosed [ at offset %d", start)
		}
		c := p.src[p.pos]
		if c == ']' && !first {
			p.pos++
			break
		}
		first = false
		var it classItem
		if c == '\\' {
			var err error
			if it, err = p.escape(); err != nil {
				return nil, err
			}
		} else if c == '[' {
			return nil, fmt.Errorf("nested classes are not supported (offset %d)", p.pos)
		} else {
			r, size := utf8.DecodeRuneInString(p.src[p.pos:])
			p.pos += size
			it = classItem{lo: r, hi: r}
		}
		// a range a-z
		if it.table == nil && it.tables == nil && p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			var hi classItem
			if p.src[p.pos] == '\\' {
				var err error
				if hi, err = p.escape(); err != nil {
					return nil, err
				}
			} else {
				r, size := utf8.DecodeRuneInString(p.src[p.pos:])
				p.pos += size
				hi = classItem{lo: r, hi: r}
			}
			if hi.table != nil || hi.tables != nil || hi.lo < it.lo {
				return nil, fmt.Errorf("bad range in class at offset %d", p.pos)
			}
			it.hi = hi.lo
		}
		cls.items = append(cls.items, it)
	}
	return cls.finish(), nil
}

// match returns the end of the match starting exactly at pos in s.
func (pt *pattern) match(s string, pos int) (int, bool) {
	return run(pt.start, s, pos)
}

// run matches the chain starting at n against s from pos; Perl semantics.
func run(n *node, s string, pos int) (int, bool) {
	for n != nil {
		switch n.kind {
		case nodeChar:
			if n.min == 1 && n.max == 1 {
				r, size := decodeAt(s, pos)
				if size == 0 || !n.class.matches(r) {
					return 0, false
				}
				pos += size
				n = n.next
				continue
			}
			// greedy: take as many as allowed, then give back one by one
			count, end := 0, pos
			for n.max < 0 || count < n.max {
				r, size := decodeAt(s, end)
				if size == 0 || !n.class.matches(r) {
					break
				}
				end += size
				count++
			}
			if count < n.min {
				return 0, false
			}
			if n.next == nil || n.next.kind == nodeJoin && n.next.next == nil {
				return end, true
			}
			for {
				if e, ok := run(n.next, s, end); ok {
					return e, true
				}
				if count == n.min {
					return 0, false
				}
				_, size := utf8.DecodeLastRuneInString(s[pos:end])
				end -= size
				count--
			}
		case nodeGroup:
			for _, alt := range n.alts {
				if e, ok := run(alt, s, pos); ok {
					return e, true
				}
			}
			if n.optional {
				n = n.next
				continue
			}
			return 0, false
		case nodeJoin:
			n = n.next
		case nodeLookahead:
			found := false
			for _, alt := range n.alts {
				if _, ok := run(alt, s, pos); ok {
					found = true
					break
				}
			}
			if found == n.negate {
				return 0, false
			}
			n = n.next
		case nodeAccept:
			return pos, true
		case nodeStart:
			if pos != 0 {
				return 0, false
			}
			n = n.next
		case nodeEnd:
			if pos != len(s) {
				return 0, false
			}
			n = n.next
		}
	}
	return pos, true
}

// decodeAt decodes the rune at pos; size 0 at the end of s. Invalid bytes
// decode as U+FFFD of size 1, which every class treats as a symbol.
func decodeAt(s string, pos int) (rune, int) {
	if pos >= len(s) {
		return 0, 0
	}
	if c := s[pos]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[pos:])
}

// findAll calls fn with the [start,end) of every non-empty match, left to
// right, as a find-iterator does.
func (pt *pattern) findAll(s string, fn func(start, end int)) {
	if pt.words != nil {
		table := runeClasses()
		for pos := 0; pos < len(s); {
			end := pt.words.matchAt(table, s, pos)
			fn(pos, end)
			pos = end
		}
		return
	}
	pt.findAllGeneral(s, fn)
}

// findAllGeneral is findAll by the backtracking engine alone.
func (pt *pattern) findAllGeneral(s string, fn func(start, end int)) {
	for pos := 0; pos < len(s); {
		if end, ok := pt.match(s, pos); ok && end > pos {
			fn(pos, end)
			pos = end
			continue
		}
		_, size := decodeAt(s, pos)
		pos += size
	}
}
