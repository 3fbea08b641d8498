package main

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/rllm-org/rllm-go/internal/fakehub"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// What rllm train does with data.train_files=[hf://...] before the loop
// starts, for a 100 MB dataset: the first run fetches, maps and writes it;
// a second run finds the mapped split by commit (the metadata requests
// only).
func BenchmarkTrainStartHF100MB(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789 "
	var rows []episode.Task
	for range 100 * 1000 {
		q := make([]byte, 1000)
		for i := range q {
			q[i] = letters[rng.IntN(len(letters))]
		}
		rows = append(rows, episode.Task{"question": string(q), "answer": "#### 7"})
	}
	p := filepath.Join(b.TempDir(), "x.parquet")
	if err := dataset.Write(context.Background(), p, rows, dataset.WriteOptions{}); err != nil {
		b.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	h := fakehub.New()
	b.Cleanup(h.Close)
	h.Commit("openai/gsm8k", "main", map[string]fakehub.File{"README.md": {Data: []byte(fakeGSMCard)}, "main/train-00000-of-00001.parquet": {Data: data, LFS: true}})
	for _, second := range []bool{false, true} {
		name := "first"
		if second {
			name = "second"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			env := map[string]string{"HF_ENDPOINT": h.URL(), "HF_HUB_CACHE": filepath.Join(dir, "hub")}
			a := &App{Stderr: io.Discard, Getenv: func(k string) string { return env[k] }}
			c := &config.Config{}
			c.Data.DatasetsDir = filepath.Join(dir, "reg")
			files := []string{"hf://datasets/openai/gsm8k/main/train"}
			if second {
				if _, _, err := resolveHubFiles(context.Background(), a, c, "data.train_files", files); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for range b.N {
				if !second {
					b.StopTimer()
					os.RemoveAll(dir)
					b.StartTimer()
				}
				if _, _, err := resolveHubFiles(context.Background(), a, c, "data.train_files", files); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
