package exec

import (
	"bytes"
	"context"
	"os"
	osexec "os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// wrapped is testParams behind a wrapper shell that first leaves a
// process behind (before: what the wrapper runs first; pids are
// appended to pidFile, the child's own last).
func wrapped(t *testing.T, pidFile, before string) Params {
	p := testParams(t)
	p.Command = []string{"sh", "-c", before + " echo $! >> " + pidFile + "; echo $$ >> " + pidFile + "; exec " + p.Command[0] + " -test.run=^$"}
	return p
}

// A wrapper's grandchild that left the process group (setsid) dies with
// the child: Close returns when nothing of the env remains. Before, the
// group kill after the child's end missed it.
func TestWrapperLeftoversDieWithTheChild(t *testing.T) {
	quietLogs(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	pl := NewPool(wrapped(t, pidFile, "setsid sleep 120 &"))
	e := pl.newEpisode(episode.Task{"id": "t1"})
	if _, _, err := e.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.Close()
	pl.Close()
	for _, pid := range repotest.PIDs(t, pidFile, 2) {
		if repotest.Alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("process %d of the env outlived Pool.Close", pid)
		}
	}
}

// The reproduction of issue 32: an env started through a wrapper
// (`sh -c '(sleep 120 &); exec env'`) in a rllm (here this test binary
// re-run) that is killed by SIGKILL: the grandchild and the child go too.
func TestKilledRllmLeavesNoEnvProcess(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	parent := osexec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), "EXEC_TEST_RLLM="+pidFile)
	var out bytes.Buffer
	parent.Stdout, parent.Stderr = &out, &out
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	pids := repotest.PIDs(t, pidFile+".ready", 2)
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	parent.Wait()
	for _, pid := range pids {
		gone := false
		for range 500 {
			if !repotest.Alive(pid) {
				gone = true
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !gone {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("process %d of the env outlived the killed rllm (its output: %s)", pid, out.String())
		}
	}
}
