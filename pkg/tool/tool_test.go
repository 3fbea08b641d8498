package tool

import (
	"context"
	"testing"
)

func TestCalculator(t *testing.T) {
	c, err := New("calculator", "tools", nil)
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		`{"expression": "8/(3-8/3)"}`: "24",
		`{"expression": "1/3"}`:       "1/3",
		`{"expression": "1/0"}`:       "error: division by zero",
		`{"expr": 1}`:                 "error: syntax error: expression ends where a number was expected",
		`not json`:                    "error: arguments must be a JSON object with an expression string: invalid character 'o' in literal null (expecting 'u')",
	} {
		got, err := c.Call(context.Background(), in)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", in, got, err, want)
		}
	}
	if c.Spec().Function.Name != "calculator" {
		t.Error(c.Spec())
	}
}

func FuzzCalculator(f *testing.F) {
	f.Add(`{"expression":"1+2"}`)
	f.Fuzz(func(t *testing.T, args string) {
		if _, err := (Calculator{}).Call(context.Background(), args); err != nil {
			t.Fatal(err)
		}
	})
}
