package reward

import (
	"errors"
	"strings"
)

// AfterThinking returns the part of a reply after the last </think>, the
// answer proper of a reasoning model (the whole reply if there is none).
func AfterThinking(reply string) string {
	if i := strings.LastIndex(reply, "</think>"); i >= 0 {
		return reply[i+len("</think>"):]
	}
	return reply
}

// Reasons a reply cannot be graded, kept in Metadata["format_error"].
var (
	ErrNoBoxed         = errors.New(`no \boxed{...} answer`)
	ErrUnbalancedBoxed = errors.New(`unbalanced braces in \boxed{`)
	ErrEmptyBoxed      = errors.New(`empty \boxed{}`)
)

// LastBoxed extracts the content of the last \boxed{...} (or \fbox{...})
// in s, honouring nested braces; the brace-less form "\boxed 42" is read
// up to the next space or $.
func LastBoxed(s string) (string, error) {
	i := max(strings.LastIndex(s, `\boxed`), strings.LastIndex(s, `\fbox`))
	if i < 0 {
		return "", ErrNoBoxed
	}
	j := strings.IndexAny(s[i:], "{ ")
	if j < 0 {
		return "", ErrUnbalancedBoxed
	}
	rest := s[i+j:]
	if rest[0] == ' ' {
		rest = strings.TrimLeft(rest, " ")
		if rest == "" || rest[0] != '{' {
			end := strings.IndexAny(rest, " $\n")
			if end < 0 {
				end = len(rest)
			}
			if end == 0 {
				return "", ErrEmptyBoxed
			}
			return rest[:end], nil
		}
	}
	depth := 0
	for k := 0; k < len(rest); k++ {
		switch rest[k] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				content := strings.TrimSpace(rest[1:k])
				if content == "" {
					return "", ErrEmptyBoxed
				}
				return content, nil
			}
		}
	}
	return "", ErrUnbalancedBoxed
}
