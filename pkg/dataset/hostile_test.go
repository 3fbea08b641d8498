package dataset

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Files that never end, rows longer than the bound and FIFOs with no
// writer end in an error naming the file (and line) or in the context's
// error, never in unbounded memory or a hang.
func TestEndlessAndOversizedRows(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	long := strings.Repeat("x", 2000)
	tests := []struct {
		name, path string
		want       string
	}{
		{"long JSON line", write("long.jsonl", `{"q":"a"}`+"\n"+`{"q":"`+long+`"}`+"\n"), "long.jsonl:2: a line is larger than the limit of 1 KiB"},
		{"long CSV record", write("long.csv", "q\na\n\""+long+"\"\n"), "long.csv:3: a row is larger than the limit of 1 KiB"},
		{"long JSON row", write("long.json", `[{"q":"a"},{"q":"`+long+strings.Repeat(" ", 600<<10)+`"}]`), "long.json: row 1: the row is larger than the limit of 1 KiB"},
		{"row just under the bound", write("ok.jsonl", `{"q":"`+strings.Repeat("y", 1000)+`"}`+"\n"), ""},
	}
	for _, ext := range []string{".jsonl", ".csv", ".json"} {
		link := filepath.Join(dir, "zero"+ext)
		if os.Symlink("/dev/zero", link) == nil {
			if _, err := os.Stat("/dev/zero"); err == nil {
				want := "is larger than the limit of 1 KiB"
				if ext == ".json" {
					want = "invalid JSON near byte 0"
				}
				tests = append(tests, struct{ name, path, want string }{"/dev/zero as " + ext, link, want})
			}
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadAll(context.Background(), tt.path, Options{MaxRowBytes: 1 << 10})
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if !usererr.Is(err) {
				t.Errorf("%v is not a user error", err)
			}
		})
	}
}

func TestFIFODatasetStopsOnCancel(t *testing.T) {
	for _, ext := range []string{".jsonl", ".csv"} {
		path := filepath.Join(t.TempDir(), "d"+ext)
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Skip(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := Load(ctx, path, Options{})
			done <- err
		}()
		time.Sleep(10 * time.Millisecond)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: err = %v, want context.Canceled", ext, err)
		}
		// A writer that opens the FIFO and then stalls.
		ctx, cancel = context.WithCancel(context.Background())
		go func() {
			_, err := Load(ctx, path, Options{})
			done <- err
		}()
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("{\"q\":1}\n"))
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("%s with a stalled writer: err = %v, want context.Canceled", ext, err)
		}
		w.Close()
	}
}

func TestParquetNeedsARegularFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.parquet")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip(err)
	}
	go func() { // a writer, so that opening completes
		if w, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			time.Sleep(50 * time.Millisecond)
			w.Close()
		}
	}()
	_, err := Load(context.Background(), path, Options{})
	if err == nil || !strings.Contains(err.Error(), "is not a regular file") {
		t.Fatalf("err = %v", err)
	}
}
