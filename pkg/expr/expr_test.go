package expr

import (
	"errors"
	"strings"
	"testing"
)

func TestEval(t *testing.T) {
	tests := []struct {
		in, want string
		nums     int
		err      error
	}{
		{"1+2*3", "7", 3, nil},
		{"(1+2)*3", "9", 3, nil},
		{"7/2", "7/2", 2, nil},
		{"1/3*3", "1", 3, nil},
		{"-(2-5)", "3", 2, nil},
		{" 8 / ( 3 - 8 / 3 ) ", "24", 4, nil}, // the classic 24 puzzle, exact only with rationals
		{"10-2-3", "5", 3, nil},               // left associative
		{"12/2/3", "2", 3, nil},
		{"1/0", "", 0, ErrDivByZero},
		{"1/(2-2)", "", 0, ErrDivByZero},
		{"2**3", "", 0, ErrSyntax},
		{"7//2", "", 0, ErrSyntax},
		{"1.5+1", "", 0, ErrSyntax},
		{"(1+2", "", 0, ErrSyntax},
		{"1+", "", 0, ErrSyntax},
		{"", "", 0, ErrSyntax},
		{"x+1", "", 0, ErrSyntax},
		{strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300), "", 0, ErrTooLarge},
		{strings.Repeat("9", 300), "", 0, ErrTooLarge},
		{strings.Repeat("1+", 3000) + "1", "", 0, ErrTooLarge},
	}
	for _, tt := range tests {
		r, err := Eval(tt.in)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("%.40q: err %v, want %v", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || r.Value.RatString() != tt.want || len(r.Numbers) != tt.nums {
			t.Errorf("%q = %v (%d numbers), %v; want %s", tt.in, r.Value, len(r.Numbers), err, tt.want)
		}
	}
}

func FuzzEval(f *testing.F) {
	for _, s := range []string{"1+2", "((3))", "-1/-1", "9*9*9/(8-8)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Eval(s)
		if err == nil && r.Value == nil {
			t.Fatal("nil value without error")
		}
	})
}
