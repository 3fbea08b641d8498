package chattemplate

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// pyJSON writes values as Python's json.dumps does, which is what
// transformers' `tojson` filter calls (ensure_ascii=False by default):
// ", " and ": " separators, insertion order of objects, floats in Python's
// repr, non-ASCII kept as is. Exact bytes matter: they become tokens.
type pyJSON struct {
	b           strings.Builder
	indent      string // "" and !pretty: one line
	pretty      bool
	itemSep     string
	keySep      string
	sortKeys    bool
	ensureASCII bool
	depth       int
}

func newPyJSON() *pyJSON {
	return &pyJSON{itemSep: ", ", keySep: ": "}
}

func (j *pyJSON) newline() {
	if j.pretty {
		j.b.WriteByte('\n')
		for i := 0; i < j.depth; i++ {
			j.b.WriteString(j.indent)
		}
	}
}

func (j *pyJSON) write(v any) error {
	if j.depth > 200 {
		return fmt.Errorf("tojson: value nested too deeply")
	}
	switch x := v.(type) {
	case nil:
		j.b.WriteString("null")
		return nil
	case *exec.Value:
		if x == nil || x.IsNil() {
			j.b.WriteString("null")
			return nil
		}
		if x.IsError() {
			return fmt.Errorf("%s", x.Error())
		}
		return j.write(x.Interface())
	case string:
		j.str(x)
		return nil
	case bool:
		if x {
			j.b.WriteString("true")
		} else {
			j.b.WriteString("false")
		}
		return nil
	case int:
		j.b.WriteString(strconv.Itoa(x))
		return nil
	case int64:
		j.b.WriteString(strconv.FormatInt(x, 10))
		return nil
	case float64:
		j.b.WriteString(pyFloat(x))
		return nil
	case *exec.Dict:
		keys := make([]string, 0, len(x.Pairs))
		vals := make(map[string]any, len(x.Pairs))
		for _, p := range x.Pairs {
			k := p.Key.String()
			if _, dup := vals[k]; !dup {
				keys = append(keys, k)
			}
			vals[k] = p.Value
		}
		return j.object(keys, vals)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys) // a Go map has no order; sorted is at least stable
		return j.object(keys, x)
	case []any:
		return j.array(len(x), func(i int) any { return x[i] })
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		return j.array(rv.Len(), func(i int) any { return rv.Index(i).Interface() })
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		keys := make([]string, 0, rv.Len())
		vals := make(map[string]any, rv.Len())
		for _, k := range rv.MapKeys() {
			keys = append(keys, k.String())
			vals[k.String()] = rv.MapIndex(k).Interface()
		}
		sort.Strings(keys)
		return j.object(keys, vals)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		j.b.WriteString(strconv.FormatInt(rv.Int(), 10))
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		j.b.WriteString(strconv.FormatUint(rv.Uint(), 10))
		return nil
	case reflect.Float32:
		j.b.WriteString(pyFloat(rv.Float()))
		return nil
	case reflect.Pointer:
		if rv.IsNil() {
			j.b.WriteString("null")
			return nil
		}
		return j.write(rv.Elem().Interface())
	}
	return fmt.Errorf("tojson: cannot serialize a value of type %T", v)
}

func (j *pyJSON) object(keys []string, vals map[string]any) error {
	if len(keys) == 0 {
		j.b.WriteString("{}")
		return nil
	}
	if j.sortKeys {
		sort.Strings(keys)
	}
	j.b.WriteByte('{')
	j.depth++
	for i, k := range keys {
		if i > 0 {
			j.b.WriteString(j.itemSep)
		}
		j.newline()
		j.str(k)
		j.b.WriteString(j.keySep)
		if err := j.write(vals[k]); err != nil {
			return err
		}
	}
	j.depth--
	j.newline()
	j.b.WriteByte('}')
	return nil
}

func (j *pyJSON) array(n int, at func(int) any) error {
	if n == 0 {
		j.b.WriteString("[]")
		return nil
	}
	j.b.WriteByte('[')
	j.depth++
	for i := 0; i < n; i++ {
		if i > 0 {
			j.b.WriteString(j.itemSep)
		}
		j.newline()
		if err := j.write(at(i)); err != nil {
			return err
		}
	}
	j.depth--
	j.newline()
	j.b.WriteByte(']')
	return nil
}

func (j *pyJSON) str(s string) {
	const hex = "0123456789abcdef"
	j.b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				j.b.WriteString(`\"`)
			case '\\':
				j.b.WriteString(`\\`)
			case '\n':
				j.b.WriteString(`\n`)
			case '\r':
				j.b.WriteString(`\r`)
			case '\t':
				j.b.WriteString(`\t`)
			case '\b':
				j.b.WriteString(`\b`)
			case '\f':
				j.b.WriteString(`\f`)
			default:
				if c < 0x20 || (c == 0x7f && j.ensureASCII) {
					j.b.WriteString(`\u00`)
					j.b.WriteByte(hex[c>>4])
					j.b.WriteByte(hex[c&0xf])
				} else {
					j.b.WriteByte(c)
				}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if !j.ensureASCII {
			j.b.WriteString(s[i : i+size])
		} else if r >= 0x10000 {
			r -= 0x10000
			fmt.Fprintf(&j.b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		} else {
			fmt.Fprintf(&j.b, `\u%04x`, r)
		}
		i += size
	}
	j.b.WriteByte('"')
}

// pyFloat formats f as Python's repr(float) does: the shortest digits that
// round-trip, "1.0" for integral values, exponent form below 1e-4 and from
// 1e16 on, with a two-digit exponent ("1e-05").
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-4 || abs >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		mant, exp, _ := strings.Cut(s, "e")
		sign := exp[0]
		digits := strings.TrimLeft(exp[1:], "0")
		if len(digits) < 2 {
			digits = strings.Repeat("0", 2-len(digits)) + digits
		}
		return mant + "e" + string(sign) + digits
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
