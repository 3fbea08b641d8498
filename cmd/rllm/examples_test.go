package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/internal/faketinker"
	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/harness"
)

// exampleEnv keeps the examples quick: a tiny model, small batches, two
// training steps unless an example asks for more. Examples' own flags and
// key=value arguments still win over these (they are RLLM_ variables).
var exampleEnv = []string{
	"RLLM_BACKEND__LOCAL__D_MODEL=16", "RLLM_BACKEND__LOCAL__HEADS=2", "RLLM_BACKEND__LOCAL__LAYERS=1",
	"RLLM_BACKEND__LOCAL__CONTEXT=48", "RLLM_BACKEND__LOCAL__WARMUP_STEPS=0", "RLLM_ROLLOUT__MAX_TOKENS=4",
	"RLLM_ROLLOUT__N=2", "RLLM_DATA__TRAIN_BATCH_SIZE=2", "RLLM_DATA__GENERATED_TRAIN_SIZE=16",
	"RLLM_DATA__GENERATED_VAL_SIZE=4", "RLLM_DATA__DATASETS_DIR=datasets", "RLLM_TRAINER__TOTAL_TRAINING_STEPS=2", "RLLM_TRAINER__TEST_FREQ=-1",
	"RLLM_TRAINER__VAL_BEFORE_TRAIN=false", "RLLM_ROLLOUT__VAL_KWARGS__N=1",
}

// setups prepares, per command, what its examples take for granted: the
// files they name and the runs they point at.
var setups = map[string][]string{
	"rllm eval":  {"train", "trainer.total_training_steps=1"},
	"rllm serve": {"train", "trainer.total_training_steps=2", "trainer.save_freq=1"},
	"rllm export": {"train", "backend.name=tinker", "backend.tinker.base_url=TINKER_FAKE_URL", "backend.tinker.base_model=rllm/embedded-tiny",
		"backend.tinker.lora_rank=2", "trainer.total_training_steps=20", "trainer.default_local_dir=checkpoints/rllm/run1"},
	"rllm plot": {"train", "trainer.total_training_steps=2",
		"&&", "train", "trainer.experiment_name=arith-rloo", "algorithm.adv_estimator=rloo"},
}

// examples returns a command's example command lines, continuation lines
// joined.
func examples(c *cobra.Command) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(c.Example, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if cur != "" {
			cur += " "
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSpace(strings.TrimSuffix(l, "\\"))
			continue
		}
		out = append(out, cur+l)
		cur = ""
	}
	return out
}

// shellWords splits a command line as sh would for the quoting the
// examples use ('...', "...") and pulls out a "< FILE" redirection.
func shellWords(line string) (words []string, stdin string) {
	var w strings.Builder
	in, quote, redirect := false, rune(0), false
	flush := func() {
		if !in {
			return
		}
		if redirect {
			stdin, redirect = w.String(), false
		} else {
			words = append(words, w.String())
		}
		w.Reset()
		in = false
	}
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			flush()
		case r == '<' && !in:
			redirect = true
		case r == '#' && !in: // a comment, as sh reads one
			flush()
			return words, stdin
		default:
			w.WriteRune(r)
			in = true
		}
	}
	flush()
	return words, stdin
}

func TestShellWords(t *testing.T) {
	words, stdin := shellWords(`rllm x --operators "+-*" --k '{"a": false}' --count - < prompt.txt`)
	want := []string{"rllm", "x", "--operators", "+-*", "--k", `{"a": false}`, "--count", "-"}
	if strings.Join(words, "|") != strings.Join(want, "|") || stdin != "prompt.txt" {
		t.Fatalf("%q < %q", words, stdin)
	}
}

// syncBuffer is a stderr that a serving command writes to while the test
// reads it; it calls onLine for every write.
type syncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	onLine func(string)
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.onLine != nil {
		b.onLine(string(p))
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestHelpExamplesRun runs every example of every command's --help as
// written, in a fresh directory per command holding the files the
// examples name. Two things are substituted, because this machine is not
// the reader's: a --port becomes 0 (a free port; rllm serve is stopped
// once it listens) and the example server http://gpu1:8000 is a fake
// vLLM server. Tokenizer examples need the real tokenizers
// (scripts/fetch-tokenizers.sh) and are skipped without them.
func TestHelpExamplesRun(t *testing.T) {
	root := newRootCmd(&App{})
	var cmds []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example != "" {
			cmds = append(cmds, c)
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	if len(cmds) < 8 {
		t.Fatalf("only %d commands with examples", len(cmds))
	}
	fake := fakevllm.New(fakevllm.Config{Model: "Qwen/Qwen3-4B"})
	defer fake.Close()
	const tinkerKey = "tml-examples-key"
	fakeTinker, err := faketinker.New(faketinker.Options{APIKey: tinkerKey, PollWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fakeTinker.Close()
	hub, err := newFakeHub(t.TempDir()) // rllm dataset pull gsm8k
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	repo, _ := filepath.Abs(filepath.Join("..", ".."))
	qwen3 := filepath.Join(repo, ".cache", "tokenizers", "qwen3")

	for _, c := range cmds {
		t.Run(strings.ReplaceAll(c.CommandPath(), " ", "_"), func(t *testing.T) {
			if c.Name() == "tokenize" && !fileExists(filepath.Join(qwen3, "tokenizer.json")) {
				t.Skip("the real tokenizers are not in .cache/tokenizers (scripts/fetch-tokenizers.sh)")
			}
			if c.CommandPath() == "rllm tasks check" && !dockerWorks(t) {
				t.Skip("rllm tasks check needs a Docker daemon with the local base image (scripts/docker-setup.sh)")
			}
			dir := t.TempDir()
			t.Chdir(dir)
			writeExampleFixtures(t, dir, qwen3)
			if c.CommandPath() == "rllm view" { // the folders its examples show
				for _, d := range []string{"checkpoints/rllm", "runs/a", "runs/b"} {
					if err := os.MkdirAll(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
			}
			env := func() []string { return exampleEnv }
			getenv := func(k string) string {
				if k == "HF_HUB_CACHE" {
					return filepath.Join(dir, "hub")
				}
				if k == "HOME" { // where rllm gateway writes its admin key
					return dir
				}
				if k == "TINKER_API_KEY" {
					return tinkerKey
				}
				if k == "HF_ENDPOINT" {
					return hub.URL()
				}
				if k == "XDG_CACHE_HOME" { // the harness cache (writeExampleFixtures)
					return filepath.Join(dir, "cache")
				}
				return ""
			}
			run := func(args []string, stdin string) {
				t.Helper()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				stdout, stderr := &syncBuffer{}, &syncBuffer{}
				if len(args) > 0 && args[0] == "view" { // stopped once it prints its URL
					stdout.onLine = func(s string) {
						if strings.Contains(s, "http://") {
							cancel()
						}
					}
				}
				if len(args) > 0 && (args[0] == "serve" || args[0] == "gateway") {
					stderr.onLine = func(s string) {
						if strings.Contains(s, "serving") {
							cancel()
						}
					}
				}
				a := &App{Stdout: stdout, Stderr: stderr, Environ: env, Getenv: getenv, ReadFile: os.ReadFile}
				if stdin != "" {
					f, err := os.Open(stdin)
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					a.Stdin = f
				}
				if code := a.Run(ctx, args); code != 0 {
					t.Fatalf("rllm %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
				}
			}
			if s, ok := setups[c.CommandPath()]; ok {
				for _, args := range splitOn(s, "&&") {
					for i := range args {
						args[i] = strings.ReplaceAll(args[i], "TINKER_FAKE_URL", fakeTinker.URL)
					}
					run(args, "")
				}
			}
			for _, line := range examples(c) {
				words, stdin := shellWords(line)
				if len(words) == 0 || words[0] != "rllm" {
					t.Fatalf("example %q does not start with rllm", line)
				}
				args := words[1:]
				for i := range args {
					if i > 0 && args[i-1] == "--port" {
						args[i] = "0"
					}
					args[i] = strings.ReplaceAll(args[i], "http://gpu1:8000", fake.URL)
				}
				if (args[0] == "serve" || args[0] == "view") && !slices.Contains(args, "--port") {
					args = append(args, "--port", "0") // never the user's port 8000
				}
				t.Logf("rllm %s", strings.Join(args, " "))
				run(args, stdin)
			}
		})
	}
}

func splitOn(args []string, sep string) [][]string {
	var out [][]string
	cur := []string{}
	for _, a := range args {
		if a == sep {
			out = append(out, cur)
			cur = []string{}
			continue
		}
		cur = append(cur, a)
	}
	return append(out, cur)
}

// writeExampleFixtures writes the files the examples name.
func writeExampleFixtures(t *testing.T, dir, qwen3 string) {
	t.Helper()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("my.yaml", "data:\n  train_batch_size: 2\nrollout:\n  n: 2\n")
	write("pairs.jsonl", "{\"prompt\": \"1+1=\", \"response\": \"2\"}\n{\"prompt\": \"2+2=\", \"response\": \"4\"}\n")
	write("conversation.json", `[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]`)
	write("prompt.txt", "How many r's in strawberry?\n")
	write("moves.txt", "Left\nDown\n")
	write("tools.yaml", "tools:\n  builtin: [calculator]\n")
	write("gsm8k_test.jsonl", "{\"question\": \"2+2?\", \"ground_truth\": \"4\"}\n")
	// The harnesses the examples install, as installed (downloading them
	// is TestHarnessesEndToEnd's business, not the help's).
	for _, h := range []struct{ root, name string }{{filepath.Join(dir, "cache", "rllm", "harnesses"), "pi"},
		{filepath.Join(dir, "cache", "rllm", "harnesses"), "qwen-code"}, {filepath.Join(dir, "harnesses"), "claude-code"}} {
		e, err := harness.Lookup(h.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(e.Dir(h.root), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.Dir(h.root), ".rllm-installed"), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	repo := filepath.Dir(filepath.Dir(filepath.Dir(qwen3))) // qwen3 is REPO/.cache/tokenizers/qwen3
	env, err := os.ReadFile(filepath.Join(repo, "examples", "exec_env", "guess_env.py"))
	if err != nil {
		t.Fatal(err)
	}
	write("guess_env.py", string(env))
	ctx := context.Background()
	for _, name := range []string{"train.parquet", "gsm8k_train.parquet"} {
		if err := dataset.Write(ctx, filepath.Join(dir, name), []episode.Task{
			{"question": "1+1=", "answer": "2"}, {"question": "2+3=", "answer": "5"},
		}, dataset.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := dataset.Write(ctx, filepath.Join(dir, "test.parquet"), []episode.Task{
		{"question": "What is 2+2?", "ground_truth": "4", "data_source": "math"},
		{"question": "What is 3*3?", "ground_truth": "9", "data_source": "math"},
	}, dataset.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if fileExists(filepath.Join(qwen3, "tokenizer.json")) {
		for _, target := range []string{
			filepath.Join(dir, "qwen3"),
			filepath.Join(dir, "hub", "models--Qwen--Qwen3-8B", "snapshots", "main"),
		} {
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
				b, err := os.ReadFile(filepath.Join(qwen3, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(target, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
