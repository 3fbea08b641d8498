package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/internal/anyval"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// normalizeJSON replaces every json.Number in v (decoded with UseNumber)
// by int64 when the literal is an integer that fits, else by float64.
// This is what Python's json module does, so an id or a ground truth
// written as 12 stays the integer 12 and 12.0 stays a float; an integer
// too large for int64 becomes the nearest float64.
func normalizeJSON(v any) (any, error) {
	if n, ok := v.(json.Number); ok {
		return jsonNumber(string(n))
	}
	if err := convertChildren(v, normalizeJSON); err != nil {
		return nil, err
	}
	return v, nil
}

// convertChildren replaces, in place, each field of a map[string]any or
// element of a []any by f of it; an error names the field or element.
// Other values are left as they are.
func convertChildren(v any, f func(any) (any, error)) error {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			n, err := f(e)
			if err != nil {
				return fmt.Errorf("field %q: %w", k, err)
			}
			x[k] = n
		}
	case []any:
		for i, e := range x {
			n, err := f(e)
			if err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
			x[i] = n
		}
	}
	return nil
}

func jsonNumber(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, fmt.Errorf("number %s is out of range for a float64", s)
	}
	return f, nil
}

// asTask checks that a decoded JSON value is an object.
func asTask(v any) (episode.Task, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("row is %s, not a JSON object", anyval.Kind(v))
	}
	if _, err := normalizeJSON(m); err != nil {
		return nil, err
	}
	return episode.Task(m), nil
}

func decodeJSONValue(b []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}
