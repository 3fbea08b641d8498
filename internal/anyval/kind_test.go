package anyval

import (
	"encoding/json"
	"testing"
)

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{nil, "null"},
		{true, "a boolean"},
		{json.Number("1.5"), "a number"},
		{2.5, "a number"},
		{int64(-3), "a number"},
		{uint8(7), "a number"},
		{float32(1), "a number"},
		{"x", "a string"},
		{[]any{1}, "an array"},
		{map[string]any{}, "an object"},
		{[]string{"a"}, "a []string"},
	} {
		if got := Kind(tc.v); got != tc.want {
			t.Errorf("Kind(%#v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
