package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// cancelOn is a stderr that cancels the run when a line containing
// trigger is written: an interruption at a known point, without timing.
type cancelOn struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	trigger string
	cancel  context.CancelFunc
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.trigger != "" && bytes.Contains(p, []byte(w.trigger)) {
		w.cancel()
	}
	return w.buf.Write(p)
}

func smallTrainEnv(dir string) func() []string {
	return func() []string {
		return []string{
			"RLLM_DATA__TRAIN_BATCH_SIZE=2", "RLLM_ROLLOUT__N=2", "RLLM_DATA__GENERATED_TRAIN_SIZE=16",
			"RLLM_DATA__GENERATED_VAL_SIZE=4", "RLLM_BACKEND__LOCAL__D_MODEL=16", "RLLM_BACKEND__LOCAL__HEADS=2",
			"RLLM_BACKEND__LOCAL__LAYERS=1", "RLLM_BACKEND__LOCAL__CONTEXT=48", "RLLM_BACKEND__LOCAL__WARMUP_STEPS=0",
			"RLLM_ROLLOUT__MAX_TOKENS=4", "RLLM_TRAINER__TEST_FREQ=-1", "RLLM_TRAINER__VAL_BEFORE_TRAIN=false",
			"RLLM_TRAINER__DEFAULT_LOCAL_DIR=" + dir,
		}
	}
}

// TestInterruptedTrainJSON: with --output json, every line of an
// interrupted train on stderr is a JSON object, the last one the
// interruption (level INFO, not ERROR), and the exit code is 130.
func TestInterruptedTrainJSON(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		trigger string
	}{
		{"during training", []string{"train", "--output", "json", "trainer.total_training_steps=50"}, `"step":1`},
		{"before training", []string{"train", "-o", "json", "trainer.total_training_steps=50"}, `"event":"log"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stderr := &cancelOn{trigger: tc.trigger, cancel: cancel}
			var stdout bytes.Buffer
			a := &App{Stdout: &stdout, Stderr: stderr, Environ: smallTrainEnv(t.TempDir()), Getenv: func(string) string { return "" },
				StderrIsTerminal: true}
			code := a.Run(ctx, tc.args)
			if code != exitInterrupted {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitInterrupted, stderr.buf.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.buf.String(), "\n"), "\n")
			var last map[string]any
			for _, l := range lines {
				last = nil
				if err := json.Unmarshal([]byte(l), &last); err != nil {
					t.Fatalf("stderr line %q is not JSON: %v", l, err)
				}
			}
			// A Ctrl-C is a stop the user asked for, not an error.
			if last["event"] != "interrupted" || last["level"] != "INFO" || last["exit_code"] != 130.0 {
				t.Errorf("last line %v, want the interruption at level INFO with exit_code 130", last)
			}
			if m, _ := last["message"].(string); !strings.Contains(m, "interrupted") && !strings.Contains(m, "context canceled") {
				t.Errorf("last message %q", m)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout: %q", stdout.String())
			}
		})
	}
}

func TestScanOutput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "auto"},
		{[]string{"train"}, "auto"},
		{[]string{"--output", "json", "trian"}, "json"},
		{[]string{"x", "--output=text"}, "text"},
		{[]string{"x", "-o", "json"}, "json"},
		{[]string{"x", "-ojson"}, "json"},
		{[]string{"x", "-o=json"}, "json"},
		{[]string{"x", "--", "-o", "json"}, "auto"},
	}
	for _, tt := range tests {
		if got := scanOutput(tt.args); got != tt.want {
			t.Errorf("scanOutput(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

func TestTextLogger(t *testing.T) {
	var buf bytes.Buffer
	a := &App{Stderr: &buf, output: outputText}
	a.infof("serving %s", "m")
	a.warnf("%d failed", 2)
	a.notef("x")
	want := "rllm: serving m\nrllm: warning: 2 failed\nrllm: note: x\n"
	if buf.String() != want {
		t.Fatalf("got %q, want %q", buf.String(), want)
	}
}

func TestResultFormat(t *testing.T) {
	for _, tc := range []struct{ output, text, want string }{
		{outputJSON, outputText, outputJSON},
		{outputJSON, "yaml", outputJSON},
		{outputAuto, outputText, outputText},
		{outputText, "yaml", "yaml"},
	} {
		if got := (&App{output: tc.output}).resultFormat(tc.text); got != tc.want {
			t.Errorf("--output %s: resultFormat(%q) = %q, want %q", tc.output, tc.text, got, tc.want)
		}
	}
}
