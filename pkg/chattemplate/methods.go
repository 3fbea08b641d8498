package chattemplate

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// Python string and dict methods that gonja implements, which we keep and
// delegate to; the overlay replaces a few with Python-exact versions.
var (
	pyStrMethodNames = []string{
		"capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find",
		"format", "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
		"isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper",
		"join", "ljust", "lower", "partition", "removeprefix", "removesuffix", "replace", "rfind",
		"rindex", "rjust", "rpartition", "rsplit", "split", "splitlines", "startswith", "swapcase",
		"title", "translate", "upper", "zfill", "capwords",
	}
	pyDictMethodNames = []string{"get", "pop", "setdefault", "update", "copy", "clear"}
)

func overlay[I any](base *exec.MethodSet[I], names []string, over map[string]exec.Method[I]) *exec.MethodSet[I] {
	all := map[string]exec.Method[I]{}
	for _, name := range names {
		if m, ok := base.Get(name); ok {
			all[name] = m
		}
	}
	for name, m := range over {
		all[name] = m
	}
	return exec.NewMethodSet(all)
}

// pythonStrMethods fixes strip/lstrip/rstrip: with no argument (or None)
// Python strips all whitespace; with one it strips any of those chars.
func pythonStrMethods(base *exec.MethodSet[string]) *exec.MethodSet[string] {
	strip := func(kind string) exec.Method[string] {
		return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
			if len(args.Args) > 1 || len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(fmt.Errorf("%s() takes at most 1 argument", kind))
			}
			var trim func(string, func(rune) bool) string
			switch kind {
			case "strip":
				trim = strings.TrimFunc
			case "lstrip":
				trim = strings.TrimLeftFunc
			default:
				trim = strings.TrimRightFunc
			}
			if len(args.Args) == 0 || args.Args[0].IsNil() {
				return trim(self, unicode.IsSpace), nil
			}
			if !args.Args[0].IsString() {
				return nil, exec.ErrInvalidCall(fmt.Errorf("%s arg must be None or str", kind))
			}
			chars := args.Args[0].String()
			return trim(self, func(r rune) bool { return strings.ContainsRune(chars, r) }), nil
		}
	}
	return overlay(base, pyStrMethodNames, map[string]exec.Method[string]{
		"strip":  strip("strip"),
		"lstrip": strip("lstrip"),
		"rstrip": strip("rstrip"),
	})
}

// orderedDictMethods makes keys/values/items follow insertion order for
// ordered dicts (gonja sorts them); plain Go maps stay sorted.
func orderedDictMethods(base *exec.MethodSet[map[string]any]) *exec.MethodSet[map[string]any] {
	ordered := func(kind string, fallback exec.Method[map[string]any]) exec.Method[map[string]any] {
		return func(self map[string]any, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
			d, ok := selfValue.Interface().(*exec.Dict)
			if !ok {
				if fallback == nil {
					return nil, errors.New(kind + "() is not available here")
				}
				return fallback(self, selfValue, args)
			}
			if len(args.Args) > 0 || len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(fmt.Errorf("%s() takes no arguments", kind))
			}
			out := make([]any, 0, len(d.Pairs))
			for _, p := range d.Pairs {
				switch kind {
				case "keys":
					out = append(out, p.Key)
				case "values":
					out = append(out, p.Value)
				default:
					out = append(out, []any{p.Key, p.Value})
				}
			}
			return out, nil
		}
	}
	over := map[string]exec.Method[map[string]any]{}
	for _, kind := range []string{"keys", "values", "items"} {
		fb, _ := base.Get(kind)
		over[kind] = ordered(kind, fb)
	}
	return overlay(base, pyDictMethodNames, over)
}

// strftime formats t with C/Python strftime directives (the common ones
// templates use, e.g. "%d %b %Y" in Llama 3.x).
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			fmt.Fprintf(&b, "%02d", h)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'B':
			b.WriteString(t.Month().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'w':
			fmt.Fprintf(&b, "%d", int(t.Weekday()))
		case 'Z':
			name, _ := t.Zone()
			b.WriteString(name)
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
