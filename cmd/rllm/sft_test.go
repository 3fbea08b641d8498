package main

import (
	"testing"
	"unicode/utf8"
)

func TestSparkline(t *testing.T) {
	ramp := func(n int) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(n - i)
		}
		return xs
	}
	for _, tc := range []struct {
		name string
		xs   []float64
		want string
	}{
		{"flat", []float64{2, 2, 2}, "▁▁▁"},
		{"falling", []float64{8, 4, 1}, "█▄▁"},
		{"one bar a step up to the width", ramp(sparklineWidth), ""},
		{"a long run averaged into the width", ramp(625), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sparkline(tc.xs)
			if n := utf8.RuneCountInString(got); n != min(len(tc.xs), sparklineWidth) {
				t.Fatalf("%d bars for %d losses, want %d", n, len(tc.xs), min(len(tc.xs), sparklineWidth))
			}
			if tc.want != "" && got != tc.want {
				t.Fatalf("sparkline(%v) = %q, want %q", tc.xs, got, tc.want)
			}
			r := []rune(got)
			if len(tc.xs) > 3 && (r[0] != '█' || r[len(r)-1] != '▁') {
				t.Fatalf("a falling loss should run from █ to ▁, got %q", got)
			}
		})
	}
}
