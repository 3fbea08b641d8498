package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/workflow/program"
)

// rllm train stops its serving programs on every exit path: a finished
// run, and Ctrl-C with episodes in flight (exit 130, the program's
// process group gone).
func TestTrainStopsServingPrograms(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	agent, err := filepath.Abs(filepath.Join("..", "..", "examples", "programs", "stdlib_agent.py"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// A serving program that notes its pid, starts a child and never
	// answers.
	pidFile := filepath.Join(dir, "pids")
	hang := filepath.Join(dir, "hang.py")
	if err := os.WriteFile(hang, []byte(`import os, subprocess, sys
child = subprocess.Popen(["sleep", "1000"])
open(`+strconv.Quote(pidFile)+`, "w").write("%d %d\n" % (os.getpid(), child.pid))
for line in sys.stdin:
    pass
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		command string
		code    int
	}{
		{"finished", py + " " + agent, 0},
		{"interrupted", py + " " + hang, exitInterrupted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.code == exitInterrupted {
				go func() {
					for ctx.Err() == nil {
						if b, _ := os.ReadFile(pidFile); bytes.HasSuffix(b, []byte("\n")) {
							time.Sleep(100 * time.Millisecond) // the episodes are in flight
							cancel()
							return
						}
						time.Sleep(20 * time.Millisecond)
					}
				}()
			}
			var stdout, stderr bytes.Buffer
			a := &App{Stdout: &stdout, Stderr: &stderr, Environ: smallTrainEnv(t.TempDir()), Getenv: func(string) string { return "" }}
			code := a.Run(ctx, []string{"train", "workflow.name=program", "workflow.args.mode=serve", "workflow.args.command=" + tc.command,
				"trainer.total_training_steps=1"})
			if code != tc.code {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if n := program.OpenServers(); n != 0 {
				t.Fatalf("%d serving programs left after rllm train returned", n)
			}
			if tc.code != exitInterrupted {
				return
			}
			b, _ := os.ReadFile(pidFile)
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				deadline := time.Now().Add(10 * time.Second)
				for syscall.Kill(pid, 0) == nil && !isZombie(pid) {
					if time.Now().After(deadline) {
						t.Fatalf("process %d of the serving program outlived rllm train", pid)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z"
}
