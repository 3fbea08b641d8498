package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/internal/suggest"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/reward"
)

// A field map says how a Hub row becomes an rllm task: task field → spec.
// A spec is a source and optional steps, separated by " | ":
//
//	answer                     the column answer
//	prompt[0].content          a path into nested columns (lists by index, structs by name)
//	const:gsm8k                a constant (JSON when it parses as JSON, else the text)
//	config                     the name of the dataset config the row came from
//	format:Reach {target}.     text with {path} replaced by the value (lists as [a, b])
//	answer | re:####\s*(.+)    the regex's first group in the last match (the value as it is when none)
//	solution | boxed           the last \boxed{...} (nested braces kept)
//	answer | str               the value as text (numbers written as JSON writes them)
//	public_test_cases | json   a JSON string decoded into values
//
// re: takes the rest of the spec, so a regex may contain " | ".
type FieldMap map[string]string

// Field is one parsed spec.
type Field struct {
	Spec  string
	Const any  // const:
	IsCon bool // a constant
	Conf  bool // the config name
	// Format, for format:, alternates literal text and paths.
	Format []Piece
	Path   []PathElem
	Steps  []Step
}

// Piece is literal text or, when Path is set, a value.
type Piece struct {
	Lit  string
	Path []PathElem
}

// PathElem is a struct field name or a list index.
type PathElem struct {
	Name  string
	Index int
	IsIdx bool
}

// Step transforms a value.
type Step struct {
	Op string // re, boxed, str, json
	Re *regexp.Regexp
}

// Columns are the top-level columns the spec reads.
func (f Field) Columns() []string {
	var out []string
	if len(f.Path) > 0 {
		out = append(out, f.Path[0].Name)
	}
	for _, p := range f.Format {
		if len(p.Path) > 0 {
			out = append(out, p.Path[0].Name)
		}
	}
	return out
}

// ParseField parses one spec.
func ParseField(spec string) (Field, error) {
	f := Field{Spec: spec}
	src, rest, _ := strings.Cut(spec, " | ")
	src = strings.TrimSpace(src)
	switch {
	case strings.HasPrefix(src, "const:"):
		v := strings.TrimPrefix(src, "const:")
		f.IsCon, f.Const = true, v
		var j any
		if json.Unmarshal([]byte(v), &j) == nil {
			f.Const = j
		}
		if rest != "" {
			return f, fmt.Errorf("field spec %q: a constant takes no steps", spec)
		}
		return f, nil
	case strings.HasPrefix(src, "format:"):
		pieces, err := parseFormat(strings.TrimPrefix(src, "format:"))
		if err != nil {
			return f, fmt.Errorf("field spec %q: %v", spec, err)
		}
		f.Format = pieces
	case src == "config":
		f.Conf = true
	default:
		p, err := parsePath(src)
		if err != nil {
			return f, fmt.Errorf("field spec %q: %v", spec, err)
		}
		f.Path = p
	}
	for rest != "" {
		var step string
		if r, ok := strings.CutPrefix(strings.TrimLeft(rest, " "), "re:"); ok {
			re, err := regexp.Compile(r)
			if err != nil {
				return f, fmt.Errorf("field spec %q: bad regex: %v", spec, err)
			}
			if re.NumSubexp() < 1 {
				return f, fmt.Errorf("field spec %q: the regex %q needs a group ( ) around the part to keep", spec, r)
			}
			f.Steps = append(f.Steps, Step{Op: "re", Re: re})
			break
		}
		step, rest, _ = strings.Cut(rest, " | ")
		switch op := strings.TrimSpace(step); op {
		case "boxed", "str", "json":
			f.Steps = append(f.Steps, Step{Op: op})
		default:
			return f, fmt.Errorf("field spec %q: unknown step %q; steps are re:REGEX, boxed, str and json", spec, op)
		}
	}
	return f, nil
}

// parseFormat splits text with {path} placeholders.
func parseFormat(s string) ([]Piece, error) {
	var out []Piece
	for s != "" {
		i := strings.IndexAny(s, "{}")
		if i < 0 {
			out = append(out, Piece{Lit: s})
			break
		}
		if s[i] == '}' {
			return nil, fmt.Errorf("a } without {")
		}
		if i > 0 {
			out = append(out, Piece{Lit: s[:i]})
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("a { without }")
		}
		p, err := parsePath(s[i+1 : i+end])
		if err != nil {
			return nil, err
		}
		out = append(out, Piece{Path: p})
		s = s[i+end+1:]
	}
	return out, nil
}

// parsePath reads name(.name|[i])*; a name is any text without . [ ] |
// (column names may hold spaces).
func parsePath(s string) ([]PathElem, error) {
	if s == "" {
		return nil, fmt.Errorf("no column named")
	}
	var out []PathElem
	i := 0
	readName := func() (string, error) {
		j := i
		for j < len(s) && !strings.ContainsRune(".[]|", rune(s[j])) {
			j++
		}
		if j == i {
			return "", fmt.Errorf("empty column name at offset %d", i)
		}
		n := s[i:j]
		i = j
		return n, nil
	}
	n, err := readName()
	if err != nil {
		return nil, err
	}
	out = append(out, PathElem{Name: n})
	for i < len(s) {
		switch s[i] {
		case '.':
			i++
			n, err := readName()
			if err != nil {
				return nil, err
			}
			out = append(out, PathElem{Name: n})
		case '[':
			end := strings.IndexByte(s[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unclosed [ at offset %d", i)
			}
			k, err := strconv.Atoi(s[i+1 : i+end])
			if err != nil || k < 0 || k > 1<<20 {
				return nil, fmt.Errorf("[%s] is not a list index", s[i+1:i+end])
			}
			out = append(out, PathElem{Index: k, IsIdx: true})
			i += end + 1
		default:
			return nil, fmt.Errorf("unexpected %q at offset %d", s[i], i)
		}
	}
	return out, nil
}

// Mapper applies a parsed field map.
type Mapper struct {
	fields []string // sorted task field names
	parsed map[string]Field
}

// Compile parses every spec of m; an error names the field.
func (m FieldMap) Compile() (*Mapper, error) {
	mp := &Mapper{parsed: map[string]Field{}}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k == "" {
			return nil, fmt.Errorf("field map: an empty task field name")
		}
		f, err := ParseField(m[k])
		if err != nil {
			return nil, fmt.Errorf("field map %s: %v", k, err)
		}
		mp.fields = append(mp.fields, k)
		mp.parsed[k] = f
	}
	return mp, nil
}

// Columns are the top-level columns the map reads.
func (mp *Mapper) Columns() []string {
	var out []string
	for _, k := range mp.fields {
		for _, c := range mp.parsed[k].Columns() {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// MissingColumnError is a field map naming a column the rows lack.
type MissingColumnError struct {
	Field, Column string
	Have          []string
}

func (e *MissingColumnError) Error() string {
	msg := fmt.Sprintf("field %s reads column %q, which the dataset does not have (columns: %s)", e.Field, e.Column, strings.Join(e.Have, ", "))
	best, bestD := "", suggest.Near(len(e.Column))+1
	for _, h := range e.Have {
		if d := suggest.Distance(strings.ToLower(h), strings.ToLower(e.Column)); d < bestD {
			best, bestD = h, d
		}
	}
	if best != "" {
		msg += fmt.Sprintf("; did you mean %q?", best)
	}
	return msg
}

// Check refuses a map that reads a column the dataset lacks.
func (mp *Mapper) Check(columns []string) error {
	for _, k := range mp.fields {
		for _, c := range mp.parsed[k].Columns() {
			if !slices.Contains(columns, c) {
				return &MissingColumnError{Field: k, Column: c, Have: slices.Sorted(slices.Values(columns))}
			}
		}
	}
	return nil
}

// Apply maps one row; config is the config it came from.
func (mp *Mapper) Apply(row episode.Task, config string) (episode.Task, error) {
	out := make(episode.Task, len(mp.fields))
	for _, k := range mp.fields {
		v, err := mp.parsed[k].value(row, config)
		var mc *MissingColumnError
		if errors.As(err, &mc) {
			mc.Field = k
			return nil, mc
		}
		if err != nil {
			return nil, fmt.Errorf("field %s (%s): %v", k, mp.parsed[k].Spec, err)
		}
		out[k] = v
	}
	return out, nil
}

func (f Field) value(row episode.Task, config string) (any, error) {
	var v any
	switch {
	case f.IsCon:
		return f.Const, nil
	case f.Conf:
		v = config
	case f.Format != nil:
		var b strings.Builder
		for _, p := range f.Format {
			if p.Path == nil {
				b.WriteString(p.Lit)
				continue
			}
			x, err := lookup(row, p.Path)
			if err != nil {
				return nil, err
			}
			b.WriteString(formatText(x))
		}
		v = b.String()
	default:
		var err error
		if v, err = lookup(row, f.Path); err != nil {
			return nil, err
		}
	}
	for _, s := range f.Steps {
		var err error
		if v, err = s.apply(v); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// lookup follows a path into a row.
func lookup(row episode.Task, path []PathElem) (any, error) {
	cur := any(map[string]any(row))
	for i, p := range path {
		if p.IsIdx {
			l, isList := cur.([]any)
			if !isList || p.Index >= len(l) {
				return nil, fmt.Errorf("%s has no item %d", pathString(path[:i]), p.Index)
			}
			cur = l[p.Index]
			continue
		}
		m, ok := cur.(map[string]any)
		if !ok {
			if cur == nil {
				return nil, nil // a null struct: the field is null
			}
			return nil, fmt.Errorf("%s is not a struct", pathString(path[:i]))
		}
		if cur, ok = m[p.Name]; !ok {
			if i == 0 {
				return nil, &MissingColumnError{Column: p.Name, Have: slices.Sorted(maps.Keys(m))}
			}
			return nil, fmt.Errorf("%s has no field %q", pathString(path[:i]), p.Name)
		}
	}
	return cur, nil
}

// formatText writes a value into format: text; a list as [a, b].
func formatText(v any) string {
	if l, ok := v.([]any); ok {
		parts := make([]string, len(l))
		for i, x := range l {
			parts[i] = formatText(x)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return text(v)
}

func pathString(p []PathElem) string {
	var b strings.Builder
	for i, e := range p {
		switch {
		case e.IsIdx:
			fmt.Fprintf(&b, "[%d]", e.Index)
		case i > 0:
			b.WriteString("." + e.Name)
		default:
			b.WriteString(e.Name)
		}
	}
	return b.String()
}

func (s Step) apply(v any) (any, error) {
	switch s.Op {
	case "str":
		return text(v), nil
	case "json":
		t, ok := v.(string)
		if !ok {
			return v, nil // already values
		}
		var out any
		if err := json.Unmarshal([]byte(t), &out); err != nil {
			return nil, fmt.Errorf("not JSON: %v", err)
		}
		return out, nil
	case "boxed":
		t, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("boxed needs text, got %T", v)
		}
		if b, err := reward.LastBoxed(t); err == nil {
			return b, nil
		}
		return t, nil
	case "re":
		t, ok := v.(string)
		if !ok {
			if v == nil {
				return nil, nil
			}
			t = text(v)
		}
		all := s.Re.FindAllStringSubmatch(t, -1)
		if len(all) == 0 {
			return t, nil
		}
		return strings.TrimSpace(all[len(all)-1][1]), nil
	}
	return nil, fmt.Errorf("unknown step %q", s.Op)
}

func text(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
