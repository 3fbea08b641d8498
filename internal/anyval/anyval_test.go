package anyval

import "testing"

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
