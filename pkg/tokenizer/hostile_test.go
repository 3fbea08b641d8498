package tokenizer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Tokenizer files come from downloaded repositories: an endless, huge or
// hostile one ends in an error naming the file, quickly and without
// large allocations.
func TestHostileTokenizerFiles(t *testing.T) {
	mk := func(setup func(dir string)) string {
		dir := t.TempDir()
		setup(dir)
		return dir
	}
	tests := []struct {
		name string
		dir  string
		want string
	}{
		{"oversized tokenizer.json", mk(func(dir string) {
			f, _ := os.Create(filepath.Join(dir, TokenizerFile))
			f.Truncate(MaxTokenizerBytes + 1) // sparse
			f.Close()
		}), "tokenizer.json is larger than the limit of 256 MiB"},
		{"tokenizer.json is /dev/zero", mk(func(dir string) {
			os.Symlink("/dev/zero", filepath.Join(dir, TokenizerFile))
		}), "tokenizer.json is not a JSON object (it starts with \"\\x00\\x00"},
		{"config is /dev/zero", mk(func(dir string) {
			os.WriteFile(filepath.Join(dir, TokenizerFile), tinyTokenizerJSON(t), 0o644)
			os.Symlink("/dev/zero", filepath.Join(dir, ConfigFile))
		}), "tokenizer_config.json is not a JSON object"},
		{"an endless JSON object", mk(func(dir string) {
			p := filepath.Join(dir, TokenizerFile)
			if syscall.Mkfifo(p, 0o600) == nil {
				go func() { // a writer that never ends the object
					w, err := os.OpenFile(p, os.O_WRONLY, 0)
					if err != nil {
						return
					}
					defer w.Close()
					w.Write([]byte("{\"a\": \""))
					chunk := bytes.Repeat([]byte("x"), 1<<20)
					for {
						if _, err := w.Write(chunk); err != nil {
							return
						}
					}
				}()
			}
		}), "tokenizer.json is larger than the limit of 256 MiB"},
		{"a huge token id", mk(func(dir string) {
			data := bytes.Replace(tinyTokenizerJSON(t), []byte(`"id":259`), []byte(`"id":9999999`), 1)
			os.WriteFile(filepath.Join(dir, TokenizerFile), data, 0o644)
		}), "token id 9999999 is implausibly large for 260 tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Contains(tt.name, "/dev/zero") {
				if _, err := os.Stat("/dev/zero"); err != nil {
					t.Skip(err)
				}
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := LoadContext(context.Background(), tt.dir)
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !usererr.Is(err) {
				t.Fatalf("err = %v, want a user error with %q", err, tt.want)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 600<<20 {
				t.Errorf("allocated %d MB", grew>>20)
			}
		})
	}
}

func TestTokenizerFIFOStopsOnCancel(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, TokenizerFile), 0o600); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := LoadContext(ctx, dir)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}
