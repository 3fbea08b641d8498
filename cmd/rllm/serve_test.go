package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
)

func testApp(stdout, stderr io.Writer) *App {
	return &App{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr,
		Getenv: func(string) string { return "" }, Environ: func() []string { return nil }, ReadFile: os.ReadFile}
}

// startServe runs rllm serve with opts until ctx ends and returns its
// address, its stderr and where its result arrives.
func startServe(t *testing.T, ctx context.Context, opts *serveOptions) (string, *syncBuffer, chan error) {
	t.Helper()
	stderr := &syncBuffer{}
	addrc := make(chan string, 1)
	opts.host, opts.port, opts.ready = "127.0.0.1", 0, func(a string) { addrc <- a }
	opts.maxSeqs, opts.maxWait, opts.maxN = 8, 8, 4
	if opts.version == "" {
		opts.version = "default"
	}
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, testApp(io.Discard, stderr), opts) }()
	select {
	case addr := <-addrc:
		return addr, stderr, done
	case err := <-done:
		t.Fatalf("serve ended early: %v (%s)", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start")
	}
	return "", nil, nil
}

func TestServeAnswersAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, _, done := startServe(t, ctx, &serveOptions{
		args: []string{"backend.local.d_model=16", "backend.local.heads=2", "backend.local.layers=1", "backend.local.context=32"}})
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

// rllm serve loads a training run's newest checkpoint and takes the next
// one through /update_weights_from_disk, as a trainer would publish it.
func TestServeWeightUpdateFromTrainerCheckpoint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := t.TempDir()
	save := func(step int, seed int64) string {
		b, err := local.New(local.Options{Config: local.Config{Layers: 1, DModel: 16, Heads: 2, Context: 32, Seed: seed}, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		dir := filepath.Join(run, fmt.Sprintf("global_step_%d", step))
		if _, err := b.SaveState(ctx, filepath.Join(dir, "model")).Result(ctx); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	save(1, 1)
	if err := os.WriteFile(filepath.Join(run, "latest_checkpointed_iteration.txt"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, stderr, done := startServe(t, ctx, &serveOptions{weights: run, version: "step-1"})
	get := func(path string) string {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b))
	}
	if v := get("/get_weight_version"); v != `{"weight_version":"step-1"}` {
		t.Fatalf("version %s", v)
	}
	next := save(2, 2)
	resp, err := http.Post("http://"+addr+"/update_weights_from_disk", "application/json",
		strings.NewReader(fmt.Sprintf(`{"model_path":%q,"weight_version":"step-2"}`, next)))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != 200 || out["success"] != true {
		t.Fatalf("update: %d %v", resp.StatusCode, out)
	}
	if v := get("/get_weight_version"); v != `{"weight_version":"step-2"}` {
		t.Fatalf("version %s after the update", v)
	}
	if !strings.Contains(stderr.String(), "weight version step-2") {
		t.Fatalf("the update was not logged: %s", stderr.String())
	}
	if m := get("/metrics"); !strings.Contains(m, `rllm:weight_updates_total{model_name="local",success="true"} 1`) {
		t.Fatalf("metrics: %s", m)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve returned %v after cancel", err)
	}
}
