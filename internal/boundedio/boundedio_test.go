package boundedio

import (
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
