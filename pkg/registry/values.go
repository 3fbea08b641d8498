package registry

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

var argTypes = []string{"int", "float", "string", "bool", "list", "map", "any"}

func knownType(t string) bool {
	for _, k := range argTypes {
		if t == k {
			return true
		}
	}
	return false
}

// Values are an entry's resolved arguments: every declared argument is
// present, converted to its declared type (int, float64, string, bool,
// []any, map[string]any).
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

// Override returns a copy of v where the declared arguments that also
// appear in row take row's value. Environments use it to merge a task row
// (which may carry seed, size, ...) over the configured env args; columns
// that are not arguments are ignored.
func (v Values) Override(args []Arg, keyPrefix string, row map[string]any) (Values, error) {
	out := make(Values, len(v))
	for k, x := range v {
		out[k] = x
	}
	for _, a := range args {
		raw, ok := row[a.Name]
		if !ok || raw == nil {
			continue
		}
		x, err := convert(a, keyPrefix+"."+a.Name, raw)
		if err != nil {
			return nil, err
		}
		out[a.Name] = x
	}
	return out, nil
}

func resolve(declared []Arg, keyPrefix string, args map[string]any) (Values, error) {
	byName := make(map[string]Arg, len(declared))
	names := make([]string, 0, len(declared))
	for _, a := range declared {
		byName[a.Name] = a
		names = append(names, a.Name)
	}
	given := make([]string, 0, len(args))
	for k := range args {
		given = append(given, k)
	}
	sort.Strings(given) // report the same error every run
	out := make(Values, len(declared))
	for _, k := range given {
		a, ok := byName[k]
		key := keyPrefix + "." + k
		if !ok {
			msg := fmt.Sprintf("%s is not an accepted argument", key)
			if s := Suggest(k, names); s != "" {
				msg += fmt.Sprintf("; did you mean %s.%s?", keyPrefix, s)
			} else if len(names) == 0 {
				msg += "; this takes no arguments"
			} else {
				msg += fmt.Sprintf("; accepted: %s", strings.Join(names, ", "))
			}
			return nil, &ConfigError{Key: key, Msg: msg}
		}
		x, err := convert(a, key, args[k])
		if err != nil {
			return nil, err
		}
		out[k] = x
	}
	for _, a := range declared {
		if _, ok := out[a.Name]; !ok {
			out[a.Name] = a.Default
		}
	}
	return out, nil
}

// convert accepts the shapes config layers produce: YAML/JSON numbers of
// any Go numeric type, and strings from --set k=v or environment variables.
func convert(a Arg, key string, raw any) (any, error) {
	bad := func() error {
		return &ConfigError{Key: key, Msg: fmt.Sprintf("%s must be %s %s, got %v (%T)", key, article(a.Type), a.Type, raw, raw)}
	}
	if raw == nil {
		return a.Default, nil
	}
	switch a.Type {
	case "any":
		return raw, nil
	case "string":
		switch x := raw.(type) {
		case string:
			return x, nil
		case int, int64, float64, bool:
			return fmt.Sprint(x), nil
		}
		return nil, bad()
	case "bool":
		switch x := raw.(type) {
		case bool:
			return x, nil
		case string:
			b, err := strconv.ParseBool(strings.TrimSpace(x))
			if err != nil {
				return nil, bad()
			}
			return b, nil
		}
		return nil, bad()
	case "int":
		f, ok := number(raw)
		if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return nil, bad()
		}
		return int(f), nil
	case "float":
		f, ok := number(raw)
		if !ok || math.IsNaN(f) {
			return nil, bad()
		}
		return f, nil
	case "list":
		switch x := raw.(type) {
		case []any:
			return x, nil
		case []string:
			out := make([]any, len(x))
			for i, s := range x {
				out[i] = s
			}
			return out, nil
		case string:
			// "a,b,c" from --set
			parts := strings.Split(x, ",")
			out := make([]any, 0, len(parts))
			for _, p := range parts {
				if p = strings.TrimSpace(p); p != "" {
					out = append(out, p)
				}
			}
			return out, nil
		}
		return nil, bad()
	case "map":
		if m, ok := raw.(map[string]any); ok {
			return m, nil
		}
		return nil, bad()
	}
	return nil, bad()
}

func number(raw any) (float64, bool) {
	switch x := raw.(type) {
	case int:
		return float64(x), true
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float32:
		return float64(x), true
	case float64:
		return x, true
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		return f, err == nil
	}
	return 0, false
}

func article(t string) string {
	if t == "int" || t == "any" {
		return "an"
	}
	return "a"
}
