package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

const benchRows = 100_000

// benchTasks are verl-style math rows (about 400 bytes of JSON each).
func benchTasks() []episode.Task {
	tasks := make([]episode.Task, benchRows)
	for i := range tasks {
		q := fmt.Sprintf("Let x be the number of apples after %d days if a tree grows %d apples a day and %d are eaten. What is x? Put the answer in \\boxed{}.", i, i%97, i%13)
		tasks[i] = episode.Task{
			"data_source":  []string{"gsm8k", "math", "deepscaler"}[i%3],
			"prompt":       []any{map[string]any{"role": "user", "content": q}},
			"ability":      "math",
			"reward_model": map[string]any{"ground_truth": fmt.Sprint(i*(i%97) - i%13), "style": "rule"},
			"extra_info":   map[string]any{"index": int64(i), "split": "train"},
			"difficulty":   float64(i%10) / 10,
		}
	}
	return tasks
}

func benchFile(b *testing.B, name string) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), name)
	if err := Write(context.Background(), path, benchTasks(), WriteOptions{}); err != nil {
		b.Fatal(err)
	}
	return path
}

func benchRead(b *testing.B, name string) {
	path := benchFile(b, name)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r, err := Open(context.Background(), path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			_, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		r.Close()
		if n != benchRows {
			b.Fatalf("read %d rows", n)
		}
	}
	b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkReadJSONL100k(b *testing.B)   { benchRead(b, "bench.jsonl") }
func BenchmarkReadParquet100k(b *testing.B) { benchRead(b, "bench.parquet") }

func benchWrite(b *testing.B, name string) {
	tasks := benchTasks()
	dir := b.TempDir()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := Write(context.Background(), filepath.Join(dir, name), tasks, WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkWriteJSONL100k(b *testing.B)   { benchWrite(b, "bench.jsonl") }
func BenchmarkWriteParquet100k(b *testing.B) { benchWrite(b, "bench.parquet") }

func BenchmarkLoaderEpoch100k(b *testing.B) {
	l, err := NewLoader(benchTasks(), LoaderOptions{BatchSize: 1024, Shuffle: true, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		for range l.BatchesPerEpoch() {
			l.Next()
		}
	}
}
