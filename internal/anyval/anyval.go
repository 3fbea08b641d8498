// Package anyval reads the untyped values that YAML, JSON and koanf hand
// over (any, []any, map[string]any): the one place pkg/config and
// pkg/registry turn them into lists and maps and show them in messages.
package anyval

import (
	"fmt"
	"reflect"
	"strconv"
)

// Slice returns v as a []any when it is a slice of any element type.
func Slice(v any) ([]any, bool) {
	if x, ok := v.([]any); ok {
		return x, true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice {
		return nil, false
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out, true
}

// Map returns v as a map[string]any when it is one, or a map[string]string.
func Map(v any) (map[string]any, bool) {
	switch x := v.(type) {
	case map[string]any:
		return x, true
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, s := range x {
			out[k] = s
		}
		return out, true
	}
	return nil, false
}

// Show renders a value for an error message: strings quoted, lists and
// mappings named by their kind.
func Show(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}
