package program_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The reproduction of issue 32: `rllm eval` (here this test binary re-run
// as rllm) killed by SIGKILL while a program runs: the program, its
// grandchild in its process group and one that left it (setsid) all go.
// Before, the program and both grandchildren ran on.
func TestKilledRllmLeavesNoProgramProcess(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), "PROGRAM_TEST_RLLM="+pidFile)
	var out bytes.Buffer
	parent.Stdout, parent.Stderr = &out, &out
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for i := 0; len(pids) < 3; i++ {
		if i == 1000 {
			parent.Process.Kill()
			t.Fatalf("the program never started: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
		b, _ := os.ReadFile(pidFile + ".ready")
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	parent.Wait()
	for _, pid := range pids {
		gone := false
		for range 500 {
			if err := syscall.Kill(pid, 0); err != nil || zombie(pid) {
				gone = true
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !gone {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("process %d of the program outlived the killed rllm", pid)
		}
	}
}
