package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// trainArgs is a run small enough to repeat several times, checkpointing
// every step, validating every third.
var trainArgs = []string{"train", "-o", "json",
	"backend.local.d_model=32", "backend.local.heads=2", "backend.local.layers=1", "backend.local.context=64",
	"backend.local.warmup_steps=15", "rollout.max_tokens=6", "rollout.n=4", "data.train_batch_size=4",
	"data.generated_train_size=32", "data.generated_val_size=8", "trainer.total_training_steps=8",
	"trainer.save_freq=1", "trainer.test_freq=3", "trainer.val_before_train=false", "trainer.seed=3",
	"trainer.max_ckpt_to_keep=2", "workflow.n_parallel_tasks=4"}

func rllmCmd(dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append(trainArgs, "trainer.default_local_dir="+dir)...)
	cmd.Env = append(os.Environ(), "RLLM_TEST_AS_MAIN=1")
	return cmd
}

// metricLines reads metrics.jsonl without timings, one string per record.
func metricLines(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("metrics.jsonl line %q: %v", sc.Text(), err)
		}
		for k := range m {
			if strings.HasPrefix(k, "timing_s/") {
				delete(m, k)
			}
		}
		line, _ := json.Marshal(m)
		out = append(out, string(line))
	}
	return out
}

// waitForLines waits until metrics.jsonl has at least n lines.
func waitForLines(t *testing.T, dir string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl")); err == nil && bytes.Count(b, []byte("\n")) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("metrics.jsonl never reached %d lines", n)
}

// A real rllm train process killed (SIGKILL) and interrupted (SIGINT) at
// several points, resumed each time, ends with exactly the metrics and
// the weights of a run that was never interrupted: no batch skipped or
// repeated, no record lost or doubled, no temporary file left behind.
func TestResumeAfterKillMatchesUninterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rllm train five times")
	}
	root := t.TempDir()
	ref, got := filepath.Join(root, "ref"), filepath.Join(root, "killed")
	if out, err := rllmCmd(ref).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, out)
	}

	interrupt := func(lines int, sig syscall.Signal) {
		cmd := rllmCmd(got)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitForLines(t, got, lines)
		cmd.Process.Signal(sig)
		err := cmd.Wait()
		if sig == syscall.SIGINT {
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
				t.Fatalf("after SIGINT: %v (want exit 130)\n%s", err, stderr.String())
			}
		}
	}
	interrupt(2, syscall.SIGKILL)
	interrupt(4, syscall.SIGINT)
	interrupt(6, syscall.SIGKILL)
	if out, err := rllmCmd(got).CombinedOutput(); err != nil {
		t.Fatalf("final resumed run: %v\n%s", err, out)
	}

	want, have := metricLines(t, ref), metricLines(t, got)
	if strings.Join(want, "\n") != strings.Join(have, "\n") {
		t.Errorf("metrics differ from the uninterrupted run's:\nwant\n%s\ngot\n%s", strings.Join(want, "\n"), strings.Join(have, "\n"))
	}
	for _, f := range []string{"model.safetensors", "optimizer.safetensors"} {
		a, err := os.ReadFile(filepath.Join(ref, "global_step_8", "model", f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(got, "global_step_8", "model", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from the uninterrupted run's", f)
		}
	}
	filepath.WalkDir(got, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".rllm-tmp-") {
			t.Errorf("leftover temporary %s", p)
		}
		if err == nil && !d.IsDir() {
			if st, _ := d.Info(); st != nil && st.Mode().Perm()&0o002 != 0 {
				t.Errorf("%s is world-writable", p)
			}
		}
		return nil
	})
}
