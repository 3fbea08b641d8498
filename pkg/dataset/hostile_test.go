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

// A FIFO with no writer, or whose writer stalls in the middle of a
// line, ends in context.Canceled when the context is cancelled. Nothing
// here depends on when the reader runs: the rows written are valid in
// their format and the last one is unfinished, so the reader cannot end
// before the cancel whichever of the two runs first.
func TestFIFODatasetStopsOnCancel(t *testing.T) {
	tests := []struct {
		ext     string
		written string // whole rows, then half of one
	}{
		{".jsonl", "{\"q\":1}\n{\"q\":"},
		{".csv", "q\n1\nab\""},
	}
	for _, tt := range tests {
		t.Run(tt.ext, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d"+tt.ext)
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Skip(err)
			}
			// No writer: opening waits, and gives up on cancel.
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := Load(ctx, path, Options{})
				done <- err
			}()
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("no writer: err = %v, want context.Canceled", err)
			}
			// A writer that opens the FIFO, writes and then stalls.
			ctx, cancel = context.WithCancel(context.Background())
			go func() {
				_, err := Load(ctx, path, Options{})
				done <- err
			}()
			w, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if _, err := w.Write([]byte(tt.written)); err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("stalled writer: err = %v, want context.Canceled", err)
			}
		})
	}
}

// Reader.Next, not only ReadAll, reports the cancel rather than what the
// parser makes of the half-written line the cancelled read left (here a
// bare quote, which the CSV parser reports before the read's error).
func TestReaderNextReportsCancelNotHalfLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.csv")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip(err)
	}
	// O_RDWR opens a FIFO on Linux without waiting for a reader.
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Skip(err)
	}
	defer w.Close()
	// Written before the reader opens: its first read takes it all.
	if _, err := w.Write([]byte("q\n1\nab\"")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Next(); err != nil {
		t.Fatalf("first row: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Next() // holds `ab"` and waits for the rest of the line
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
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
