package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rllm-org/rllm-go/internal/faketinker"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

func TestSFTExamplesBadInput(t *testing.T) {
	cases := []struct {
		name string
		rows []episode.Task
		want string
	}{
		{"missing key", []episode.Task{{"prompt": "a", "response": "b"}, {"prompt": "a"}}, `pairs.jsonl: row 1: lacks a "prompt" or "response" string`},
		{"not a string", []episode.Task{{"prompt": "a", "response": int64(2)}}, `pairs.jsonl: row 0: lacks a "prompt" or "response" string`},
		{"empty", nil, "pairs.jsonl has no rows"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := sftExamples("pairs.jsonl", c.rows, "prompt", "response")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if exitCode(context.Background(), err) != exitUsage {
				t.Fatalf("exit code %d, want %d", exitCode(context.Background(), err), exitUsage)
			}
		})
	}
	ex, err := sftExamples("pairs.jsonl", []episode.Task{{"q": "3+4=", "a": "7"}}, "q", "a")
	if err != nil || len(ex) != 1 || ex[0].Reply != "7" || ex[0].Messages[0].Role != "user" || ex[0].Messages[0].Content != "3+4=" {
		t.Fatalf("examples %+v, %v", ex, err)
	}
}

func TestSparkline(t *testing.T) {
	ramp := func(n int) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(n - i)
		}
		return xs
	}
	for _, tc := range []struct {
		name string
		xs   []float64
		want string
	}{
		{"flat", []float64{2, 2, 2}, "▁▁▁"},
		{"falling", []float64{8, 4, 1}, "█▄▁"},
		{"one bar a step up to the width", ramp(sparklineWidth), ""},
		{"a long run averaged into the width", ramp(625), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sparkline(tc.xs)
			if n := utf8.RuneCountInString(got); n != min(len(tc.xs), sparklineWidth) {
				t.Fatalf("%d bars for %d losses, want %d", n, len(tc.xs), min(len(tc.xs), sparklineWidth))
			}
			if tc.want != "" && got != tc.want {
				t.Fatalf("sparkline(%v) = %q, want %q", tc.xs, got, tc.want)
			}
			r := []rune(got)
			if len(tc.xs) > 3 && (r[0] != '█' || r[len(r)-1] != '▁') {
				t.Fatalf("a falling loss should run from █ to ▁, got %q", got)
			}
		})
	}
}

// rllm sft on the Tinker backend, as a user types it: the same loop on a
// service, a checkpoint directory holding tinker.json, and a later rllm
// train that starts from it (backend.tinker.weights) and trains on.
func TestSFTOnTinkerThenTrain(t *testing.T) {
	const key = "tml-sft-cli-key"
	srv, err := faketinker.New(faketinker.Options{APIKey: key, PollWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("pairs.jsonl", []byte("{\"prompt\": \"1+1=\", \"response\": \"2\"}\n{\"prompt\": \"2+2=\", \"response\": \"4\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tinkerArgs := []string{"backend.name=tinker", "backend.tinker.base_url=" + srv.URL, "backend.tinker.base_model=rllm/embedded-tiny", "backend.tinker.lora_rank=2"}
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		a := &App{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string {
			if k == "TINKER_API_KEY" {
				return key
			}
			return ""
		}, Environ: func() []string { return nil }, ReadFile: os.ReadFile}
		if code := a.Run(context.Background(), args); code != 0 {
			t.Fatalf("rllm %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	out := run(append([]string{"sft", "-o", "text", "--data", "pairs.jsonl", "--epochs", "3", "--batch-size", "2", "--out", "ckpt"}, tinkerArgs...)...)
	if !strings.Contains(out, "step 3/3  epoch 3  loss ") || !strings.Contains(out, "saved checkpoint to ckpt (tinker://") {
		t.Fatalf("sft output:\n%s", out)
	}
	ck, err := tinker.ReadCheckpoint("ckpt")
	if err != nil {
		t.Fatal(err)
	}
	loads := func() int {
		n := 0
		for _, e := range srv.Executions() {
			if e.Path == wire.PathLoadWeights {
				n++
			}
		}
		return n
	}
	if loads() != 0 {
		t.Fatalf("sft loaded weights it was not given")
	}
	run(append([]string{"train", "-o", "text", "backend.tinker.weights=ckpt", "trainer.total_training_steps=1", "data.train_batch_size=2",
		"rollout.n=2", "rollout.max_tokens=4", "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.default_local_dir=run"}, tinkerArgs...)...)
	if loads() != 1 {
		t.Fatalf("train ran %d load_weights, want 1 (the sft checkpoint %s)", loads(), ck.WeightsPath)
	}
	// sft goes on from the same checkpoint.
	run(append([]string{"sft", "-o", "text", "--data", "pairs.jsonl", "--epochs", "1", "--weights", "ckpt"}, tinkerArgs...)...)
	if loads() != 2 {
		t.Fatalf("sft --weights ckpt ran %d load_weights in all, want 2", loads())
	}
	// With the base model's own tokenizer files (rollout.tokenizer), the
	// prompts are rendered by their chat template.
	if err := writeTinyTokenizer("tiny"); err != nil {
		t.Fatal(err)
	}
	out = run(append([]string{"sft", "-o", "text", "--data", "pairs.jsonl", "--epochs", "2", "--batch-size", "2", "rollout.tokenizer=tiny"}, tinkerArgs...)...)
	if !strings.Contains(out, "step 2/2  epoch 2  loss ") {
		t.Fatalf("sft with the tokenizer's template:\n%s", out)
	}
}
