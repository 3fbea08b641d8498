package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"

	"github.com/rllm-org/rllm-go/internal/anyval"
)

// coerce checks that v fits leaf l and returns it in the one Go type the
// store holds for that kind (int, float64, bool, string, []string,
// []float64, map[string]any, map[string]string), or nil for a null
// optional key. raw is the value as typed, when there was text.
func coerce(l *leaf, v any, raw string, hasRaw bool) (any, string) {
	if v == nil {
		switch {
		case l.nullable:
			return nil, ""
		case l.kind == kindString:
			return "", ""
		case l.kind == kindStringList:
			return []string{}, ""
		case l.kind == kindOpenMap:
			return map[string]any{}, ""
		case l.kind == kindStringMap:
			return map[string]string{}, ""
		}
		return nil, fmt.Sprintf("must be %s, not null", l.kind.describe())
	}
	switch l.kind {
	case kindInt:
		return toInt(v)
	case kindFloat:
		return toFloat(v)
	case kindBool:
		if b, ok := v.(bool); ok {
			return b, ""
		}
		return nil, fmt.Sprintf("must be true or false, got %s", show(v))
	case kindString:
		switch x := v.(type) {
		case string:
			return x, ""
		case bool, int, int64, float64, uint64:
			// A name typed as 2024 is still a name.
			if hasRaw {
				return raw, ""
			}
			return fmt.Sprint(x), ""
		}
		return nil, fmt.Sprintf("must be a string, got %s", show(v))
	case kindStringList:
		if str, ok := v.(string); ok && (l.key == "data.train_files" || l.key == "data.val_files" || l.key == "trainer.logger") {
			return []string{str}, "" // verl takes one file, and one logger, as a plain string
		}
		if items, ok := asList(v); ok {
			return anyval.ConvertList(items, listString)
		}
	case kindFloatList:
		if items, ok := asList(v); ok {
			return anyval.ConvertList(items, toFloat)
		}
	case kindOpenMap:
		if m, ok := asMap(v); ok {
			return m, ""
		}
	case kindStringMap:
		if m, ok := asMap(v); ok {
			return anyval.ConvertMap(m, func(it any) (string, string) {
				if s, ok := it.(string); ok {
					return s, ""
				}
				return "", "must be a string, got " + show(it)
			})
		}
	default:
		return nil, "has an unsupported type"
	}
	return nil, fmt.Sprintf("must be %s, got %s", l.kind.describe(), show(v))
}

// listString reads an item of a list of strings; a scalar YAML read as
// another type (a tag typed as 2024) is still a string.
func listString(it any) (string, string) {
	switch x := it.(type) {
	case string:
		return x, ""
	case bool, int, int64, float64:
		return fmt.Sprint(x), ""
	}
	return "", "must be a string, got " + show(it)
}

func toInt(v any) (any, string) {
	rv := reflect.ValueOf(v)
	switch {
	case rv.CanInt():
		n := rv.Int()
		if n < math.MinInt || n > math.MaxInt {
			return nil, fmt.Sprintf("is out of range: %d", n)
		}
		return int(n), ""
	case rv.CanUint():
		n := rv.Uint()
		if n > math.MaxInt {
			return nil, fmt.Sprintf("is out of range: %d", n)
		}
		return int(n), ""
	case rv.CanFloat():
		f := rv.Float()
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return nil, fmt.Sprintf("must be a whole number, got %s", show(v))
		case f != math.Trunc(f):
			return nil, fmt.Sprintf("must be a whole number, got %s", show(v))
		case f < -(1<<53) || f > 1<<53:
			return nil, fmt.Sprintf("is out of range: %s", strconv.FormatFloat(f, 'g', -1, 64))
		}
		return int(f), ""
	}
	return nil, fmt.Sprintf("must be a whole number, got %s", show(v))
}

func toFloat(v any) (float64, string) {
	f, ok := anyval.Float(v)
	if !ok {
		return 0, fmt.Sprintf("must be a number, got %s", show(v))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Sprintf("must be a finite number, got %s", show(v))
	}
	return f, ""
}

func asList(v any) ([]any, bool)         { return anyval.Slice(v) }
func asMap(v any) (map[string]any, bool) { return anyval.Map(v) }

// show renders a value for an error message, with its kind.
func show(v any) string { return anyval.Show(v) }
