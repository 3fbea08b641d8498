package program

import "strings"

// shellProgram returns the program /bin/sh -c would run for line when
// line is a simple command: words of plain characters or quoted with
// '...' or "..." (without $, ` or \ inside), separated by blanks,
// optionally after NAME=value assignments. For anything the shell alone
// resolves (expansions, globs, redirections, pipes and lists, escapes,
// comments, builtins and reserved words) it returns false rather than
// guess.
func shellProgram(line string) (string, bool) {
	words, ok := simpleWords(line)
	if !ok {
		return "", false
	}
	for _, w := range words {
		// A leading NAME=value, its name unquoted, is an assignment.
		if eq := strings.IndexByte(w.text, '='); eq > 0 && isName(w.text[:eq]) && strings.HasPrefix(w.raw, w.text[:eq+1]) {
			continue
		}
		if w.text == "" || shellBuiltins[w.text] {
			return "", false
		}
		return w.text, true
	}
	return "", false
}

// shellWord is one word after quote removal, and the text it was read
// from.
type shellWord struct{ text, raw string }

// simpleWords splits line as sh would when it holds only plain words and
// simple quotes; ok is false for anything else.
func simpleWords(line string) (words []shellWord, ok bool) {
	var cur strings.Builder
	start := -1
	flush := func(end int) {
		if start >= 0 {
			words = append(words, shellWord{text: cur.String(), raw: line[start:end]})
		}
		cur.Reset()
		start = -1
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c == ' ' || c == '\t' {
			flush(i)
			continue
		}
		inWord := start >= 0
		if !inWord {
			start = i
		}
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				return nil, false
			}
			q := line[i+1 : i+1+j]
			if c == '"' && strings.ContainsAny(q, "$`\\") {
				return nil, false
			}
			cur.WriteString(q)
			i += j + 1
		case plainByte(c) || (c == '~' || c == '#') && inWord:
			// ~ and # are plain inside a word, special at its start.
			cur.WriteByte(c)
		default:
			return nil, false
		}
	}
	flush(len(line))
	return words, true
}

func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("-_./=:,+@%^", c) >= 0 || c >= 0x80
}

func isName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// shellBuiltins are the words sh runs itself (POSIX reserved words and
// builtins, and dash's and bash's common ones): the program they start,
// if any, is not the first word.
var shellBuiltins = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`! { } case do done elif else esac fi for if in then until while function select time
		. : break continue eval exec exit export readonly return set shift times trap unset
		alias bg cd command false fg getopts hash jobs kill read true type ulimit umask unalias wait
		echo printf test [ local source builtin declare typeset let pwd`) {
		shellBuiltins[w] = true
	}
}
