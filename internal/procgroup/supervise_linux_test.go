package procgroup

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/repotest"
)

// leaver is a wrapper shell that leaves two grandchildren behind: one in
// its process group, one that left it (setsid), and writes their pids.
func leaver(pidFile, then string) string {
	return "sleep 300 & echo $! > " + pidFile + "; setsid sleep 300 & echo $! >> " + pidFile + "; " + then
}

// When the program ends by itself, Wait returns its status only once
// nothing it started remains, the setsid() grandchild included. Without
// the supervisor both grandchildren outlive it.
func TestSupervisedExitLeavesNothing(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	cmd := Command(context.Background(), "sh", "-c", leaver(pidFile, "while [ $(wc -l < "+pidFile+") -lt 2 ]; do sleep 0.01; done; exit 3"))
	Supervise(cmd)
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("Run = %v, want exit status 3", err)
	}
	for _, pid := range repotest.PIDs(t, pidFile, 2) {
		if repotest.Alive(pid) {
			t.Errorf("grandchild %d still runs after Wait returned", pid)
		}
	}
}

// A cancelled context kills the whole tree, setsid() grandchild included.
func TestSupervisedCancelKillsTree(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := Command(ctx, "sh", "-c", leaver(pidFile, "sleep 300"))
	Supervise(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pids := repotest.PIDs(t, pidFile, 2)
	cancel()
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("Wait = %v, want killed", err)
	}
	for _, pid := range pids {
		if repotest.Alive(pid) {
			t.Errorf("grandchild %d still runs after the kill", pid)
		}
	}
}

// The program sees what it would see unsupervised: its descriptors
// (stdin, stdout, stderr, ExtraFiles), directory and environment; a
// signal that kills it is reported as that signal; a missing program
// fails Start.
func TestSupervisedIsTransparent(t *testing.T) {
	dir := t.TempDir()
	extraR, extraW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer extraR.Close()
	cmd := Command(context.Background(), "sh", "-c", `read x; echo "out $x $FOO $(pwd)"; echo err >&2; echo extra >&3; [ -e /proc/self/fd/4 ] && echo "fd 4 open" >&2; exit 0`)
	cmd.Dir = dir
	cmd.Env = []string{"FOO=bar", "PATH=" + os.Getenv("PATH")}
	cmd.Stdin = strings.NewReader("in\n")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.ExtraFiles = []*os.File{extraW}
	Supervise(cmd)
	if err := cmd.Run(); err != nil {
		t.Fatalf("Run: %v (stderr %q)", err, errb.String())
	}
	extraW.Close()
	var extra bytes.Buffer
	extra.ReadFrom(extraR)
	if want := "out in bar " + dir + "\n"; out.String() != want {
		t.Errorf("stdout %q, want %q", out.String(), want)
	}
	if errb.String() != "err\n" || extra.String() != "extra\n" {
		t.Errorf("stderr %q, fd 3 %q (the lifeline must not reach the program)", errb.String(), extra.String())
	}

	cmd = Command(context.Background(), "sh", "-c", "kill -SEGV $$")
	Supervise(cmd)
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGSEGV {
		t.Fatalf("Run = %v, want killed by SIGSEGV", err)
	}

	cmd = Command(context.Background(), filepath.Join(dir, "missing"))
	Supervise(cmd)
	if err := cmd.Start(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Start of a missing program = %v, want not exist", err)
	}
}

// The supervisor keeps none of the program's descriptors: a program
// that closes its stdout is read to its end while it still runs.
func TestSupervisorHoldsNoDescriptor(t *testing.T) {
	cmd := Command(context.Background(), "sh", "-c", "exec >&-; cat >/dev/null")
	Supervise(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer Kill(cmd)
	eof := make(chan struct{})
	go func() { io.ReadAll(stdout); close(eof) }()
	select {
	case <-eof:
	case <-time.After(30 * time.Second):
		t.Fatal("stdout did not end when the program closed it: the supervisor holds it")
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// SIGTERM to the group reaches the program, which may act on it; the
// supervisor waits for it.
func TestSupervisedTerminate(t *testing.T) {
	cmd := Command(context.Background(), "sh", "-c", "trap 'exit 7' TERM; while :; do sleep 0.05; done")
	Supervise(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var werr error
	go func() { werr = cmd.Wait(); close(done) }()
	time.Sleep(100 * time.Millisecond) // let the trap be set; a kill is fine too
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		Kill(cmd)
		<-done
		t.Fatal("SIGTERM to the group did not end the program")
	}
	var ee *exec.ExitError
	if !errors.As(werr, &ee) {
		t.Fatalf("Wait = %v", werr)
	}
}

// The reproduction of issue 32: rllm (here this test binary re-run as a
// parent) killed by SIGKILL runs no code, yet every process of its
// program goes, the setsid() grandchild included.
func TestParentKilledLeavesNothing(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), "PROCGROUP_TEST_PARENT="+pidFile)
	var perr bytes.Buffer
	parent.Stderr = &perr
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	pids := repotest.PIDs(t, pidFile, 3) // the program and its two grandchildren
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	parent.Wait()
	for _, pid := range pids {
		repotest.WaitGone(t, pid)
	}
	if perr.Len() > 0 {
		t.Logf("parent stderr: %s", perr.String())
	}
}

func TestMain(m *testing.M) {
	if f := os.Getenv("PROCGROUP_TEST_PARENT"); f != "" {
		// The stand-in for rllm: start a supervised program that leaves
		// grandchildren, then wait to be killed.
		tmp := f + ".tmp"
		cmd := Command(context.Background(), "sh", "-c", "echo $$ > "+tmp+"; sleep 300 & echo $! >> "+tmp+"; setsid sleep 300 & echo $! >> "+tmp+"; mv "+tmp+" "+f+"; sleep 300")
		Supervise(cmd)
		if err := cmd.Start(); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(1)
		}
		cmd.Wait()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// BenchmarkStart measures what the supervisor adds to a program's start
// and end: `true` run plainly and supervised (this test binary is the
// supervisor, as rllm is for rllm's programs).
//
//	go test ./internal/procgroup -run '^$' -bench Start -benchtime 200x
func BenchmarkStart(b *testing.B) {
	for _, sup := range []bool{false, true} {
		b.Run("supervised="+strconv.FormatBool(sup), func(b *testing.B) {
			for range b.N {
				cmd := Command(context.Background(), "true")
				if sup {
					Supervise(cmd)
				}
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
