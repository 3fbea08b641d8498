package boundedio

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadFileLimits(t *testing.T) {
	dir := t.TempDir()
	exact := filepath.Join(dir, "exact")
	over := filepath.Join(dir, "over")
	os.WriteFile(exact, bytes.Repeat([]byte("a"), 100), 0o644)
	os.WriteFile(over, bytes.Repeat([]byte("a"), 101), 0o644)
	tests := []struct {
		name    string
		path    string
		limit   int64
		wantErr string
	}{
		{"exactly the limit", exact, 100, ""},
		{"one byte over", over, 100, "over: the file is larger than the limit of 100 bytes"},
		{"endless device", "/dev/zero", 1 << 20, "/dev/zero: the file is larger than the limit of 1 MiB"},
		{"missing", filepath.Join(dir, "nope"), 10, "no such file"},
		{"directory", dir, 10, "is a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := os.Stat(tt.path); tt.path == "/dev/zero" && err != nil {
				t.Skip("no /dev/zero here")
			}
			b, err := ReadFile(context.Background(), tt.path, tt.limit)
			if tt.wantErr == "" {
				if err != nil || int64(len(b)) != tt.limit {
					t.Fatalf("got %d bytes, %v", len(b), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestFIFOWithoutWriterStopsOnCancel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ReadFile(ctx, path, 1<<20)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("ReadFile returned before cancellation: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// An open cancelled while it waits for a writer leaves no reader on the
// FIFO: a reader left behind would take (and drop) the next writer's
// data, which the next open of the same FIFO then never sees. The
// cancel races the background open on purpose; whichever wins, no
// reader may remain once Open has returned.
func TestCancelledFIFOOpenLeavesNoReader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	for i := 0; i < 50; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		go cancel()
		f, err := Open(ctx, path)
		if err == nil {
			f.Close()
			t.Fatal("Open succeeded with no writer")
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		// With no reader, a non-blocking open for writing fails (ENXIO).
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
			t.Fatalf("try %d: a reader was left waiting on the FIFO", i)
		}
	}
}

func TestStalledWriterStopsOnCancel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ReadFile(ctx, path, 1<<20)
		done <- err
	}()
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Write([]byte("partial"))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestFIFOWithWriterIsRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	go func() {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			w.Write([]byte("a: 1\n"))
			w.Close()
		}
	}()
	b, err := ReadFile(context.Background(), path, 100)
	if err != nil || string(b) != "a: 1\n" {
		t.Fatalf("got %q, %v", b, err)
	}
}

func TestLimitReaderReset(t *testing.T) {
	l := NewLimitReader(strings.NewReader("abcdefgh"), "f", 3)
	l.What = "row"
	buf := make([]byte, 10)
	n, err := l.Read(buf)
	if n != 3 || err != nil {
		t.Fatalf("first read %d %v", n, err)
	}
	l.Reset()
	n, _ = l.Read(buf)
	if string(buf[:n]) != "def" {
		t.Fatalf("after reset read %q", buf[:n])
	}
	_, err = l.Read(buf)
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Error() != "f: the row is larger than the limit of 3 bytes" {
		t.Fatalf("err = %v", err)
	}
	l = NewLimitReader(strings.NewReader("abc"), "f", 3)
	if b, err := io.ReadAll(l); err != nil || string(b) != "abc" {
		t.Fatalf("exact fit: %q %v", b, err)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{1 << 30: "1 GiB", 64 << 20: "64 MiB", 2048: "2 KiB", 1000: "1000 bytes"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

// ReadLine returns each line with its break, a last line without one, and
// refuses a line over the bound, also when it spans bufio's buffer.
func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 40)
	for _, tc := range []struct {
		name, in string
		max      int64
		want     []string // lines, then "TOO LARGE" for the error
	}{
		{"lines", "a\nbc\n", 8, []string{"a\n", "bc\n"}},
		{"last line without a break", "a\nbc", 8, []string{"a\n", "bc"}},
		{"at the bound", "abcd\n", 4, []string{"abcd\n"}},
		{"over the bound", "ab\nabcde\n", 4, []string{"ab\n", "TOO LARGE"}},
		{"longer than the buffer", long + "\n", 64, []string{long + "\n"}},
		{"over the bound across the buffer", long + long + "\n", 64, []string{"TOO LARGE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLineReader(bufio.NewReaderSize(strings.NewReader(tc.in), 16), "f.jsonl", tc.max)
			var got []string
			for {
				b, err := l.ReadLine()
				var tl *TooLargeError
				if errors.As(err, &tl) {
					if tl.Path != "f.jsonl" || tl.What != "line" || tl.Limit != tc.max {
						t.Errorf("error %+v", tl)
					}
					got = append(got, "TOO LARGE")
					break
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, string(b))
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("lines %q, want %q", got, tc.want)
			}
		})
	}
}
