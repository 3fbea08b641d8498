package hub

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/rllm-org/rllm-go/internal/fakehub"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/progress"
)

// bigHub holds o/big: one LFS parquet file of about mb MB of
// incompressible text rows.
func bigHub(b *testing.B, mb int) (*fakehub.Hub, int64) {
	rng := rand.New(rand.NewPCG(1, 2))
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
	var rows []episode.Task
	for range mb * 1000 {
		q := make([]byte, 1000)
		for i := range q {
			q[i] = letters[rng.IntN(len(letters))]
		}
		rows = append(rows, episode.Task{"question": string(q), "answer": "#### 7"})
	}
	data := parquetOf(b, rows)
	h := fakehub.New()
	b.Cleanup(h.Close)
	h.Commit("o/big", "main", map[string]fakehub.File{"data/train-00000-of-00001.parquet": {Data: data, LFS: true}})
	return h, int64(len(data))
}

// The link's speed: a plain GET of the file from the fake CDN to disk.
func BenchmarkLink100MB(b *testing.B) {
	h, size := bigHub(b, 100)
	c := client(h, b.TempDir())
	m, err := c.Head(context.Background(), "o/big", "main", "data/train-00000-of-00001.parquet")
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(b.TempDir(), "f")
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		resp, err := http.Get(m.Location)
		if err != nil {
			b.Fatal(err)
		}
		f, _ := os.Create(out)
		io.Copy(f, resp.Body)
		resp.Body.Close()
		f.Close()
	}
}

// A first pull's download (HEAD, GET, sha256 check, snapshot link) with
// a progress bar drawn.
func BenchmarkDownload100MB(b *testing.B) {
	h, size := bigHub(b, 100)
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		c := client(h, b.TempDir())
		c.Progress = progress.NewText(io.Discard, progress.Options{})
		b.StartTimer()
		if _, _, err := c.Download(context.Background(), "o/big", "main", "data/train-00000-of-00001.parquet"); err != nil {
			b.Fatal(err)
		}
	}
}

// A second download of a cached file: one HEAD and the ETag check.
func BenchmarkDownloadCached100MB(b *testing.B) {
	h, size := bigHub(b, 100)
	c := client(h, b.TempDir())
	if _, _, err := c.Download(context.Background(), "o/big", "main", "data/train-00000-of-00001.parquet"); err != nil {
		b.Fatal(err)
	}
	gets := h.CDNGets.Load()
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		if _, _, err := c.Download(context.Background(), "o/big", "main", "data/train-00000-of-00001.parquet"); err != nil {
			b.Fatal(err)
		}
	}
	if h.CDNGets.Load() != gets {
		b.Fatal("a cached file was downloaded again")
	}
}

// A whole pull (download, read, field map) of the 100 MB dataset, first
// and cached.
func BenchmarkPull100MB(b *testing.B) {
	h, size := bigHub(b, 100)
	src := Source{Name: "o/big", Repo: "o/big", Fields: FieldMap{"question": "question", "ground_truth": "answer | re:####\\s*(.+)"}}
	for _, cached := range []bool{false, true} {
		name := "first"
		if cached {
			name = "cached"
		}
		b.Run(name, func(b *testing.B) {
			cache := b.TempDir()
			if cached {
				if _, err := client(h, cache).Pull(context.Background(), src); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(size)
			b.ResetTimer()
			for range b.N {
				if !cached {
					b.StopTimer()
					cache = b.TempDir()
					b.StartTimer()
				}
				if _, err := client(h, cache).Pull(context.Background(), src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
