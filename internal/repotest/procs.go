package repotest

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Alive reports a process that exists and is not a zombie: from
// /proc/PID/stat, or where there is no /proc (macOS) from signal 0, which
// counts a zombie as alive.
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if _, noProc := os.Stat("/proc/self"); noProc != nil {
			return exists(pid)
		}
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// WaitGone waits up to 10 s for pid to be gone (or a zombie) and fails
// the test if it is not: for tests that check nothing outlives what
// started it.
func WaitGone(t testing.TB, pid int) {
	t.Helper()
	for range 500 {
		if !Alive(pid) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d outlived what started it", pid)
}

// PIDs waits up to 20 s for file to hold n pids, whitespace-separated,
// as a test's helper programs write them, and returns them.
func PIDs(t testing.TB, file string, n int) []int {
	t.Helper()
	for range 1000 {
		if b, err := os.ReadFile(file); err == nil {
			var pids []int
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			if len(pids) >= n {
				return pids
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never held %d pids", file, n)
	return nil
}
