// Package anyval reads the untyped values that YAML, JSON and koanf hand
// over (any, []any, map[string]any): the one place pkg/config and
// pkg/registry turn them into lists and maps and show them in messages,
// and the one place a Go number of any type (from YAML, JSON, parquet or
// a caller's task row) is read as an int64 or a float64.
package anyval

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
)

// Int64 returns v as an int64 when it is a Go integer of any type (named
// types included) whose value fits. Floating-point numbers are not
// integers here, even whole ones: callers that take 3.0 for 3 say so.
func Int64(v any) (int64, bool) {
	rv := reflect.ValueOf(v)
	switch {
	case rv.CanInt():
		return rv.Int(), true
	case rv.CanUint():
		if u := rv.Uint(); u <= math.MaxInt64 {
			return int64(u), true
		}
	}
	return 0, false
}

// Float returns v as a float64 when it is a Go integer or floating-point
// number of any type. Integers beyond 2^53 are rounded to the nearest
// float64; NaN and infinities are returned as they are.
func Float(v any) (float64, bool) {
	rv := reflect.ValueOf(v)
	switch {
	case rv.CanInt():
		return float64(rv.Int()), true
	case rv.CanUint():
		return float64(rv.Uint()), true
	case rv.CanFloat():
		return rv.Float(), true
	}
	return 0, false
}

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

// ConvertList converts every item of a list with conv, which returns a
// message (empty when the item is right). The first item that fails
// stops it, its message prefixed with where it is: "item 2 must be ...".
func ConvertList[T any](items []any, conv func(any) (T, string)) ([]T, string) {
	out := make([]T, len(items))
	for i, it := range items {
		var msg string
		if out[i], msg = conv(it); msg != "" {
			return nil, fmt.Sprintf("item %d %s", i, msg)
		}
	}
	return out, ""
}

// ConvertMap does what ConvertList does for the values of a mapping:
// `value of "k" must be ...`.
func ConvertMap[T any](m map[string]any, conv func(any) (T, string)) (map[string]T, string) {
	out := make(map[string]T, len(m))
	for k, it := range m {
		x, msg := conv(it)
		if msg != "" {
			return nil, fmt.Sprintf("value of %q %s", k, msg)
		}
		out[k] = x
	}
	return out, ""
}
