//go:build unix

package procgroup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/repotest"
)

// A wrapper shell whose real program is a grandchild that holds stdout
// open: cancelling the context kills both, and Wait returns.
func TestCancelKillsGrandchildAndWaitReturns(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := Command(ctx, "sh", "-c", "sleep 300 & echo $! > "+pidFile+"; wait")
	cmd.WaitDelay = 500 * time.Millisecond
	var out strings.Builder
	cmd.Stdout = &out // a pipe copied by a goroutine: the grandchild holds it
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	grandchild := waitPid(t, pidFile)
	cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not return after the context was cancelled")
	}
	repotest.WaitGone(t, grandchild)
}

func TestKillBeforeStartAndTwice(t *testing.T) {
	cmd := exec.Command("true")
	if err := Kill(cmd); err != nil {
		t.Fatal(err)
	}
	Configure(cmd, 0)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	_ = Kill(cmd)
	_ = Kill(cmd)
}

func TestTail(t *testing.T) {
	tests := []struct {
		name   string
		limit  int
		writes []string
		want   string
		last   string
	}{
		{"fits", 16, []string{"a\n", "b\n"}, "a\nb\n", "b"},
		{"keeps the end", 4, []string{"abc", "def"}, "cdef", "cdef"},
		{"one huge write", 3, []string{"0123456789"}, "789", "789"},
		{"carriage returns end lines", 64, []string{"10%\r50%\r100%\r"}, "10%\r50%\r100%\r", "100%"},
		{"empty", 8, nil, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tl := NewTail(tc.limit)
			var n int64
			for _, w := range tc.writes {
				k, err := tl.Write([]byte(w))
				if err != nil || k != len(w) {
					t.Fatalf("Write = %d, %v", k, err)
				}
				n += int64(len(w))
			}
			if got := tl.String(); got != tc.want {
				t.Errorf("String = %q, want %q", got, tc.want)
			}
			if got := tl.LastLine(); got != tc.last {
				t.Errorf("LastLine = %q, want %q", got, tc.last)
			}
			if tl.Total() != n {
				t.Errorf("Total = %d, want %d", tl.Total(), n)
			}
		})
	}
}

func waitPid(t *testing.T, file string) int {
	t.Helper()
	for range 200 {
		b, err := os.ReadFile(file)
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the grandchild never wrote its pid")
	return 0
}
