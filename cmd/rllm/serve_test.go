package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func testApp(stdout, stderr io.Writer) *App {
	return &App{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr,
		Getenv: func(string) string { return "" }, Environ: func() []string { return nil }, ReadFile: os.ReadFile}
}

func TestServeAnswersAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	addrc := make(chan string, 1)
	opts := &serveOptions{host: "127.0.0.1", port: 0, ready: func(a string) { addrc <- a },
		args: []string{"backend.local.d_model=16", "backend.local.heads=2", "backend.local.layers=1", "backend.local.context=32"}}
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, testApp(io.Discard, &stderr), opts) }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("serve ended early: %v (%s)", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start")
	}
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":[259,51],"max_tokens":3,"return_token_ids":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(out["choices"].([]any)) != 1 {
		t.Fatalf("status %d: %v", resp.StatusCode, out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve returned %v after cancel", err)
	}
}

func TestSFTDatumsBadInput(t *testing.T) {
	cases := []struct {
		name string
		rows []episode.Task
		want string
	}{
		{"missing key", []episode.Task{{"prompt": "a", "response": "b"}, {"prompt": "a"}}, `pairs.jsonl: row 1: lacks a "prompt" or "response" string`},
		{"not a string", []episode.Task{{"prompt": "a", "response": int64(2)}}, `pairs.jsonl: row 0: lacks a "prompt" or "response" string`},
		{"too long", []episode.Task{{"prompt": "a", "response": strings.Repeat("x", 200)}}, "pairs.jsonl: row 0: is 221 tokens after the chat template, more than the 129 a model of context 128 trains on"},
		{"empty", nil, "pairs.jsonl has no rows"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := sftDatums("pairs.jsonl", c.rows, "prompt", "response", localTokenizer(), 128)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if exitCode(context.Background(), err) != exitUsage {
				t.Fatalf("exit code %d, want %d", exitCode(context.Background(), err), exitUsage)
			}
		})
	}
	data, err := sftDatums("pairs.jsonl", []episode.Task{{"prompt": "3+4=", "response": "7"}}, "prompt", "response", localTokenizer(), 128)
	if err != nil {
		t.Fatal(err)
	}
	w := data[0].LossFnInputs.Weights
	// Only the targets "7" and <|im_end|> (the last two) carry weight.
	var sum float64
	for _, x := range w {
		sum += x
	}
	if sum != 2 || w[len(w)-1] != 1 || w[len(w)-2] != 1 {
		t.Fatalf("weights %v", w)
	}
}
