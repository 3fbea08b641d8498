package anyval

import (
	"math"
	"testing"
)

func TestAnyval(t *testing.T) {
	if l, ok := Slice([]string{"a", "b"}); !ok || len(l) != 2 || l[1] != "b" {
		t.Errorf("Slice([]string) = %v %v", l, ok)
	}
	if _, ok := Slice("a,b"); ok {
		t.Error("a string is not a slice")
	}
	if m, ok := Map(map[string]string{"k": "v"}); !ok || m["k"] != "v" {
		t.Errorf("Map = %v %v", m, ok)
	}
	for v, want := range map[any]string{"x": `"x"`, 2.5: "2.5", 3: "3", true: "true"} {
		if got := Show(v); got != want {
			t.Errorf("Show(%v) = %s, want %s", v, got, want)
		}
	}
	if Show([]any{1}) != "a list" || Show(map[string]any{}) != "a mapping" {
		t.Error("Show of a list or a mapping")
	}
}

func TestNumbers(t *testing.T) {
	type named int16
	tests := []struct {
		v   any
		i   int64
		iOK bool
		f   float64
		fOK bool
	}{
		{v: 3, i: 3, iOK: true, f: 3, fOK: true},
		{v: int8(-7), i: -7, iOK: true, f: -7, fOK: true},
		{v: int32(1 << 30), i: 1 << 30, iOK: true, f: 1 << 30, fOK: true},
		{v: int64(math.MinInt64), i: math.MinInt64, iOK: true, f: math.MinInt64, fOK: true},
		{v: uint8(255), i: 255, iOK: true, f: 255, fOK: true},
		{v: uint64(math.MaxInt64), i: math.MaxInt64, iOK: true, f: math.MaxInt64, fOK: true},
		{v: uint64(math.MaxUint64), f: math.MaxUint64, fOK: true}, // too large for int64
		{v: named(12), i: 12, iOK: true, f: 12, fOK: true},
		{v: 2.0, f: 2, fOK: true}, // a whole float is not an integer
		{v: float32(0.5), f: 0.5, fOK: true},
		{v: "3"},
		{v: true},
		{v: nil},
		{v: []int{1}},
	}
	for _, tt := range tests {
		if i, ok := Int64(tt.v); i != tt.i || ok != tt.iOK {
			t.Errorf("Int64(%T %v) = %d %v, want %d %v", tt.v, tt.v, i, ok, tt.i, tt.iOK)
		}
		if f, ok := Float(tt.v); f != tt.f || ok != tt.fOK {
			t.Errorf("Float(%T %v) = %g %v, want %g %v", tt.v, tt.v, f, ok, tt.f, tt.fOK)
		}
	}
}

func TestConvert(t *testing.T) {
	even := func(v any) (int, string) {
		if n, ok := v.(int); ok && n%2 == 0 {
			return n, ""
		}
		return 0, "must be even, got " + Show(v)
	}
	if l, msg := ConvertList([]any{2, 4}, even); msg != "" || len(l) != 2 || l[1] != 4 {
		t.Errorf("ConvertList = %v %q", l, msg)
	}
	if l, msg := ConvertList([]any{}, even); msg != "" || l == nil || len(l) != 0 {
		t.Errorf("ConvertList of no items = %#v %q, want an empty non-nil list", l, msg)
	}
	if _, msg := ConvertList([]any{2, "x", 3}, even); msg != `item 1 must be even, got "x"` {
		t.Errorf("ConvertList message %q", msg)
	}
	if m, msg := ConvertMap(map[string]any{"a": 2}, even); msg != "" || m["a"] != 2 {
		t.Errorf("ConvertMap = %v %q", m, msg)
	}
	if _, msg := ConvertMap(map[string]any{"k": 3}, even); msg != `value of "k" must be even, got 3` {
		t.Errorf("ConvertMap message %q", msg)
	}
}
