package main

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func TestSFTExamplesBadInput(t *testing.T) {
	cases := []struct {
		name string
		rows []episode.Task
		want string
	}{
		{"missing key", []episode.Task{{"prompt": "a", "response": "b"}, {"prompt": "a"}}, `pairs.jsonl: row 1: lacks a "prompt" or "response" string`},
		{"not a string", []episode.Task{{"prompt": "a", "response": int64(2)}}, `pairs.jsonl: row 0: lacks a "prompt" or "response" string`},
		{"empty", nil, "pairs.jsonl has no rows"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := sftExamples("pairs.jsonl", c.rows, "prompt", "response")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if exitCode(context.Background(), err) != exitUsage {
				t.Fatalf("exit code %d, want %d", exitCode(context.Background(), err), exitUsage)
			}
		})
	}
	ex, err := sftExamples("pairs.jsonl", []episode.Task{{"q": "3+4=", "a": "7"}}, "q", "a")
	if err != nil || len(ex) != 1 || ex[0].Reply != "7" || ex[0].Messages[0].Role != "user" || ex[0].Messages[0].Content != "3+4=" {
		t.Fatalf("examples %+v, %v", ex, err)
	}
}

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
