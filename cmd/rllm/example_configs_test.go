package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// configHeaderCommands returns the rllm command lines a config's header
// comment gives ("#   rllm ..."), continuation lines joined, without the
// leading "rllm".
func configHeaderCommands(t *testing.T, file string) [][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	cur := ""
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			break // the header ends at the first key
		}
		l = strings.TrimSpace(strings.TrimPrefix(l, "#"))
		if cur == "" && !strings.HasPrefix(l, "rllm ") {
			continue
		}
		if cont, ok := strings.CutSuffix(l, "\\"); ok {
			cur += strings.TrimSpace(cont) + " "
			continue
		}
		words, _ := shellWords(cur + l)
		out = append(out, words[1:])
		cur = ""
	}
	return out
}

// TestCPUExampleConfigsRun runs the commands in the header of each
// embedded-policy example config (examples/configs/*-cpu.yaml) as written,
// in a fresh directory: the data they generate must load, its prompts must
// fit the config's context, and one training step must run. Only the
// model, batch and step count are shrunk, with key=value arguments.
func TestCPUExampleConfigsRun(t *testing.T) {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(repo, "examples", "configs", "*-cpu.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("want the countdown and frozenlake CPU configs, found %v (%v)", files, err)
	}
	shrink := []string{"backend.local.d_model=16", "backend.local.heads=2", "backend.local.layers=1",
		"backend.local.warmup_steps=1", "data.train_batch_size=2", "rollout.n=2", "rollout.val_kwargs.n=1",
		"trainer.total_training_steps=1", "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.save_freq=-1"}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			if err := os.MkdirAll(filepath.Join("examples", "configs"), 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join("examples", "configs", filepath.Base(f)), b, 0o644); err != nil {
				t.Fatal(err)
			}
			cmds := configHeaderCommands(t, f)
			if len(cmds) < 2 || cmds[len(cmds)-1][0] != "train" {
				t.Fatalf("header commands %q: want the data commands, then rllm train", cmds)
			}
			for _, args := range cmds {
				train := args[0] == "train"
				if train {
					args = append(append([]string{"-o", "text"}, args...), shrink...)
				}
				var stdout, stderr bytes.Buffer
				app := &App{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }, ReadFile: os.ReadFile}
				if code := app.Run(context.Background(), args); code != 0 {
					t.Fatalf("rllm %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
				}
				if train && !strings.Contains(stderr.String(), "done: 1 steps") {
					t.Fatalf("rllm %s did not train a step:\n%s", strings.Join(args, " "), stderr.String())
				}
			}
		})
	}
}
