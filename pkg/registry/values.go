package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/internal/anyval"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// argType is one type an argument may have: its name as `rllm list`
// prints it and the Go type its values are held in. This table is the
// whole of the conversion rules; an args struct field must have one of
// these Go types.
type argType struct {
	name string
	typ  reflect.Type
}

var argTypes = []argType{
	{"int", reflect.TypeFor[int]()},
	{"float", reflect.TypeFor[float64]()},
	{"string", reflect.TypeFor[string]()},
	{"bool", reflect.TypeFor[bool]()},
	{"list", reflect.TypeFor[[]any]()},
	{"list of strings", reflect.TypeFor[[]string]()},
	{"map", reflect.TypeFor[map[string]any]()},
	{"map of strings", reflect.TypeFor[map[string]string]()},
	{"any", reflect.TypeFor[any]()},
}

func typeNamed(name string) (argType, bool) {
	for _, t := range argTypes {
		if t.name == name {
			return t, true
		}
	}
	return argType{}, false
}

func typeOf(t reflect.Type) (argType, bool) {
	for _, a := range argTypes {
		if a.typ == t {
			return a, true
		}
	}
	return argType{}, false
}

func knownType(t string) bool { _, ok := typeNamed(t); return ok }

// Values are an entry's resolved arguments: every declared argument is
// present, converted to its declared type (int, float64, string, bool,
// []any, []string, map[string]any, map[string]string).
type Values map[string]any

// Int returns the int argument name (0 if absent).
func (v Values) Int(name string) int { i, _ := v[name].(int); return i }

// Float returns the float argument name (0 if absent).
func (v Values) Float(name string) float64 { f, _ := v[name].(float64); return f }

// String returns the string argument name ("" if absent).
func (v Values) String(name string) string { s, _ := v[name].(string); return s }

// Bool returns the bool argument name (false if absent).
func (v Values) Bool(name string) bool { b, _ := v[name].(bool); return b }

// Map returns the map argument name (nil if absent).
func (v Values) Map(name string) map[string]any { m, _ := v[name].(map[string]any); return m }

// List returns the list argument name (nil if absent).
func (v Values) List(name string) []any { l, _ := v[name].([]any); return l }

// As fills an args struct S (the Params of an entry) from resolved
// values: each field tagged `arg:"name"` takes the value of name.
func As[S any](v Values) S {
	var s S
	rv := reflect.ValueOf(&s).Elem()
	if rv.Kind() != reflect.Struct {
		panic(fmt.Sprintf("registry.As: %T is not a struct", s))
	}
	for _, f := range reflect.VisibleFields(rv.Type()) {
		name := argName(f)
		if name == "" {
			continue
		}
		if x, ok := v[name]; ok && x != nil {
			rv.FieldByIndex(f.Index).Set(reflect.ValueOf(x))
		}
	}
	return s
}

// Override returns a copy of v where the arguments declared FromTask that
// also appear in row take row's value. Environments use it to merge a
// task row (which may carry seed, size, ...) over the configured env
// args; other columns, and arguments a row may not set (a command to run,
// a server URL), are ignored.
func (v Values) Override(args []Arg, keyPrefix string, row map[string]any) (Values, error) {
	out := make(Values, len(v))
	for k, x := range v {
		out[k] = x
	}
	var errs []error
	for _, a := range args {
		raw, ok := row[a.Name]
		if !a.FromTask || !ok || raw == nil {
			continue
		}
		x, err := a.convert(keyPrefix+"."+a.Name, raw)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[a.Name] = x
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// resolve converts every given argument, reporting all mistakes at once
// (errors.Join of *usererr.Error, one per key, sorted by key).
func resolve(declared []Arg, keyPrefix string, args map[string]any) (Values, error) {
	byName := make(map[string]*Arg, len(declared))
	names := make([]string, 0, len(declared))
	for i := range declared {
		byName[declared[i].Name] = &declared[i]
		names = append(names, declared[i].Name)
	}
	given := make([]string, 0, len(args))
	for k := range args {
		given = append(given, k)
	}
	sort.Strings(given) // report the same errors every run
	out := make(Values, len(declared))
	var errs []error
	for _, k := range given {
		a, ok := byName[k]
		key := keyPrefix + "." + k
		if !ok {
			msg := "is not an accepted argument"
			if s := Suggest(k, names); s != "" {
				msg += fmt.Sprintf("; did you mean %s.%s?", keyPrefix, s)
			} else if len(names) == 0 {
				msg += "; this takes no arguments"
			} else {
				msg += fmt.Sprintf("; accepted: %s", strings.Join(names, ", "))
			}
			errs = append(errs, &usererr.Error{Subject: key, Msg: msg})
			continue
		}
		x, err := a.convert(key, args[k])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[k] = x
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, a := range declared {
		if _, ok := out[a.Name]; !ok {
			out[a.Name] = a.Default
		}
	}
	return out, nil
}

// convert turns raw (as a config layer delivered it: YAML/JSON values of
// any Go numeric type, or text from --set and environment variables) into
// the argument's type and checks its range.
func (a *Arg) convert(key string, raw any) (any, error) {
	if raw == nil {
		return a.Default, nil
	}
	t, _ := typeNamed(a.Type)
	x, msg := decode(t, raw)
	if msg == "" && a.rng != nil {
		msg = a.rng.check(x)
	}
	if msg != "" {
		return nil, &usererr.Error{Subject: key, Msg: msg}
	}
	return x, nil
}

// decode is the one conversion engine of component arguments. It
// returns the value in t's Go type, or a message saying what was wrong.
func decode(t argType, raw any) (any, string) {
	bad := func() (any, string) {
		return nil, fmt.Sprintf("must be %s %s, got %s", article(t.name), t.name, show(raw))
	}
	switch t.name {
	case "any":
		return raw, ""
	case "string":
		switch x := raw.(type) {
		case string:
			return x, ""
		case bool, int, int64, float64, uint64:
			return fmt.Sprint(x), ""
		}
	case "bool":
		switch x := raw.(type) {
		case bool:
			return x, ""
		case string:
			if b, err := strconv.ParseBool(strings.TrimSpace(x)); err == nil {
				return b, ""
			}
		}
	case "int":
		f, ok := number(raw)
		if ok && f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
			return int(f), ""
		}
	case "float":
		f, ok := number(raw)
		if ok && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, ""
		}
	case "list", "list of strings":
		items, ok := asList(raw)
		if !ok {
			return bad()
		}
		if t.name == "list" {
			return items, ""
		}
		return anyval.ConvertList(items, decodeString)
	case "map", "map of strings":
		m, ok := asMap(raw)
		if !ok {
			return bad()
		}
		if t.name == "map" {
			return m, ""
		}
		return anyval.ConvertMap(m, decodeString)
	}
	return bad()
}

// decodeString decodes an item of a list or a map of strings.
func decodeString(raw any) (string, string) {
	s, msg := decode(argType{name: "string"}, raw)
	str, _ := s.(string)
	return str, msg
}

// number reads any Go number, or text that parses as one.
func number(raw any) (float64, bool) {
	if s, ok := raw.(string); ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		return f, err == nil
	}
	return anyval.Float(raw)
}

func article(t string) string {
	if t == "int" || t == "any" {
		return "an"
	}
	return "a"
}

// bounds is a parsed range tag: "[1,64]", "(0,1]", "[0,)" (no upper
// bound).
type bounds struct {
	lo, hi         float64
	hasLo, hasHi   bool
	loOpen, hiOpen bool
	text           string
}

func parseRange(s string) (*bounds, error) {
	s = strings.TrimSpace(s)
	if len(s) < 3 || !strings.ContainsRune("[(", rune(s[0])) || !strings.ContainsRune("])", rune(s[len(s)-1])) {
		return nil, fmt.Errorf("range %q: write it as [lo,hi], (lo,hi], [lo,) ...", s)
	}
	parts := strings.Split(s[1:len(s)-1], ",")
	if len(parts) != 2 {
		return nil, fmt.Errorf("range %q needs exactly one comma", s)
	}
	b := &bounds{loOpen: s[0] == '(', hiOpen: s[len(s)-1] == ')', text: s}
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		f, err := strconv.ParseFloat(p, 64)
		if err != nil {
			return nil, fmt.Errorf("range %q: %q is not a number", s, p)
		}
		if i == 0 {
			b.lo, b.hasLo = f, true
		} else {
			b.hi, b.hasHi = f, true
		}
	}
	return b, nil
}

func (b *bounds) check(x any) string {
	f, ok := number(x)
	if !ok {
		return ""
	}
	if (b.hasLo && (f < b.lo || (b.loOpen && f == b.lo))) || (b.hasHi && (f > b.hi || (b.hiOpen && f == b.hi))) {
		return fmt.Sprintf("must be in %s, got %s", b.text, show(x))
	}
	return ""
}

// ArgsOf describes the arguments an args struct declares with field tags:
//
//	type Args struct {
//		Size  int     `arg:"size" default:"4" range:"[2,64]" doc:"side of a random map" task:"true"`
//		P     float64 `arg:"p" default:"0.8" range:"(0,1]" doc:"..."`
//	}
//
// arg names the argument (fields without it are not arguments); default
// is parsed like a --set value (JSON for lists and maps); range bounds
// numbers; doc is the line `rllm list --args` prints; task:"true" lets a
// task row's column of the same name override the configured value.
// params is a value of the struct type (or a pointer to one); a field
// without a default tag defaults to the value it holds in params, so
// several entries can share one struct with defaults of their own.
// Fields of embedded structs count as the struct's own.
func ArgsOf(params any) ([]Arg, error) {
	pv := reflect.ValueOf(params)
	if pv.Kind() == reflect.Pointer && !pv.IsNil() {
		pv = pv.Elem()
	}
	if pv.Kind() != reflect.Struct {
		return nil, fmt.Errorf("args must be a struct, got %T", params)
	}
	t := pv.Type()
	var out []Arg
	for _, f := range reflect.VisibleFields(t) {
		name := argName(f)
		if name == "" {
			continue
		}
		at, ok := typeOf(f.Type)
		if !ok {
			return nil, fmt.Errorf("field %s (%s) has type %s; use one of int, float64, string, bool, []any, []string, map[string]any, map[string]string, any", f.Name, name, f.Type)
		}
		a := Arg{Name: name, Type: at.name, Doc: f.Tag.Get("doc"), FromTask: f.Tag.Get("task") == "true"}
		if r, ok := f.Tag.Lookup("range"); ok {
			b, err := parseRange(r)
			if err != nil {
				return nil, fmt.Errorf("field %s: %v", f.Name, err)
			}
			if at.name != "int" && at.name != "float" {
				return nil, fmt.Errorf("field %s: a range needs an int or float field", f.Name)
			}
			a.Range, a.rng = b.text, b
		}
		if d, ok := f.Tag.Lookup("default"); ok {
			var raw any = d
			if td := strings.TrimSpace(d); at.name != "string" && (strings.HasPrefix(td, "[") || strings.HasPrefix(td, "{")) {
				if err := json.Unmarshal([]byte(d), &raw); err != nil {
					return nil, fmt.Errorf("field %s: default %q: %v", f.Name, d, err)
				}
			}
			x, msg := decode(at, raw)
			if msg == "" && a.rng != nil {
				msg = a.rng.check(x)
			}
			if msg != "" {
				return nil, fmt.Errorf("field %s: default %q %s", f.Name, d, msg)
			}
			a.Default = x
		} else {
			a.Default = pv.FieldByIndex(f.Index).Interface()
		}
		out = append(out, a)
	}
	return out, nil
}

func argName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("arg"), ",")
	if name == "-" || !f.IsExported() || f.Anonymous {
		return ""
	}
	return name
}

func asList(raw any) ([]any, bool) {
	if x, ok := raw.(string); ok { // "a, b" on a command line
		parts := strings.Split(x, ",")
		out := make([]any, 0, len(parts))
		for _, p := range parts {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out, true
	}
	return anyval.Slice(raw)
}

func asMap(raw any) (map[string]any, bool) { return anyval.Map(raw) }

// show renders a value for an error message.
func show(v any) string { return anyval.Show(v) }
