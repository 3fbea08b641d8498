package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	envexec "github.com/rllm-org/rllm-go/pkg/env/exec"
)

// rllm train closes the exec environment's pool (its process groups) on
// every exit path: a finished run and one stopped by an error.
func TestTrainClosesExecPools(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	env, err := filepath.Abs(filepath.Join("..", "..", "examples", "exec_env", "guess_env.py"))
	if err != nil {
		t.Fatal(err)
	}
	tasks := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(tasks, []byte("{\"lo\": 1, \"hi\": 4, \"secret\": 2}\n{\"lo\": 1, \"hi\": 4, \"secret\": 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		extra []string
		ok    bool
	}{
		{"finished", []string{"backend.local.context=320"}, true},
		// The env's first prompt does not fit the model: refused after the
		// pool started.
		{"failed", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			a := &App{Stdout: &stdout, Stderr: &stderr, Environ: smallTrainEnv(t.TempDir()), Getenv: func(string) string { return "" }}
			args := append([]string{"train", "agent.name=chat", "env.name=exec", "env.args.command=[python3," + env + "]",
				"data.train_files=[" + tasks + "]", "trainer.total_training_steps=1"}, tc.extra...)
			code := a.Run(context.Background(), args)
			if (code == 0) != tc.ok {
				t.Fatalf("exit code %d; stderr:\n%s", code, stderr.String())
			}
			if tc.ok && !bytes.Contains(stderr.Bytes(), []byte("done")) {
				t.Fatalf("the run did not finish:\n%s", stderr.String())
			}
			if n := envexec.OpenPools(); n != 0 {
				t.Fatalf("%d exec pools left open after rllm train returned", n)
			}
		})
	}
}
