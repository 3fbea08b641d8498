package jsonline

import "testing"

func TestMarshal(t *testing.T) {
	tests := []struct {
		v    any
		want string
	}{
		{map[string]string{"message": "0.078 at step 0 -> 0.812 at step 10"}, `{"message":"0.078 at step 0 -> 0.812 at step 10"}` + "\n"},
		{map[string]string{"path": "runs/a&b/<x>"}, `{"path":"runs/a&b/<x>"}` + "\n"},
		{[]int{1, 2}, "[1,2]\n"},
	}
	for _, tt := range tests {
		got, err := Marshal(tt.v)
		if err != nil || string(got) != tt.want {
			t.Errorf("Marshal(%v) = %q, %v; want %q", tt.v, got, err, tt.want)
		}
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Error("a func encoded")
	}
}
