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

// threadedProgram is a serving program written from docs/gateway.md's
// contract alone, as a user writes one: a thread per episode, urllib,
// and no handling of a failed call (the thread raises and the episode
// gets no answer line).
const threadedProgram = `import json, sys, threading, urllib.request
lock = threading.Lock()
def handle(msg):
    env = msg["env"]
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": msg["task"]["question"]}]}).encode()
    req = urllib.request.Request(env["OPENAI_BASE_URL"] + "/chat/completions", data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + env["OPENAI_API_KEY"]})
    with urllib.request.urlopen(req) as r:
        reply = json.load(r)
    with lock:
        print(json.dumps({"episode_id": msg["episode_id"], "answer": reply["choices"][0]["message"]["content"] or ""}), flush=True)
for line in sys.stdin:
    msg = json.loads(line)
    if not msg.get("cancel"):
        threading.Thread(target=handle, args=(msg,), daemon=True).start()
`

// TestTrainThreadedServingProgram: rllm train with such a program starts
// training. The prompt check before the first step used to fail the
// program's first call; the thread raised, no answer came, and the check
// waited workflow.args.timeout_s for each of its eight tasks, in silence.
// The check now ends each of its episodes at the first model call.
func TestTrainThreadedServingProgram(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	dir := t.TempDir()
	agent := filepath.Join(dir, "agent.py")
	if err := os.WriteFile(agent, []byte(threadedProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	// The bound is on a hang, not a speed: the run takes seconds; before
	// the fix the check alone waited 8 × 600 s.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	a := &App{Stdout: &stdout, Stderr: &stderr, Environ: smallTrainEnv(t.TempDir()), Getenv: func(string) string { return "" }}
	code := a.Run(ctx, []string{"train", "workflow.name=program", "workflow.args.mode=serve", "workflow.args.command=[" + py + ", " + agent + "]",
		"workflow.args.timeout_s=600", "trainer.total_training_steps=1"})
	if ctx.Err() != nil {
		t.Fatalf("rllm train with a threaded serving program did not finish in 4 minutes; stderr:\n%s", stderr.String())
	}
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "done: 1 steps") {
		t.Fatalf("no step done; stderr:\n%s", stderr.String())
	}
}
