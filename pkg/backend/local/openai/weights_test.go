package openai

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
)

// saveCheckpoint writes a checkpoint of a model of config c in the trainer
// layout dir/global_step_1/model and returns dir/global_step_1.
func saveCheckpoint(t *testing.T, c local.Config) string {
	t.Helper()
	b, err := local.New(local.Options{Config: c, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	step := filepath.Join(t.TempDir(), "global_step_1")
	ctx := context.Background()
	if _, err := b.SaveState(ctx, filepath.Join(step, "model")).Result(ctx); err != nil {
		t.Fatal(err)
	}
	return step
}

// answer is a deterministic fingerprint of the weights: a seeded chat
// reply's tokens and logprobs, and the version the response reports.
func answer(t *testing.T, url string) (string, string) {
	t.Helper()
	code, out := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"3+4="}],"max_tokens":6,"seed":3,"logprobs":true,"return_token_ids":true}`)
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	return fmt.Sprint(ch["token_ids"], ch["logprobs"]), out["metadata"].(map[string]any)["weight_version"].(string)
}

func TestUpdateWeightsFromDisk(t *testing.T) {
	srv := newTestServer(t, Options{})
	before, v := answer(t, srv.URL)
	if v != "v0" {
		t.Fatalf("version %q", v)
	}
	other := testConfig
	other.Seed = 99
	ckpt := saveCheckpoint(t, other)

	// Failed updates change nothing: a missing directory, a model of
	// another shape, a corrupt weights file, an unknown parameter.
	bigger := testConfig
	bigger.DModel = 32
	corrupt := saveCheckpoint(t, other)
	if err := os.WriteFile(filepath.Join(corrupt, "model", local.WeightsFile), []byte("not safetensors"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ body, want string }{
		{`{"model_path":"` + filepath.Join(t.TempDir(), "nowhere") + `","weight_version":"bad"}`, "nowhere does not exist"},
		{`{"model_path":"` + saveCheckpoint(t, bigger) + `","weight_version":"bad"}`, "shape"},
		{`{"model_path":"` + corrupt + `","weight_version":"bad"}`, "old weights are kept"},
		{`{"model_path":"` + ckpt + `","weight_version":"bad","lora":1}`, `parameter "lora"`},
		{`{"weight_version":"bad"}`, "model_path is required"},
	} {
		code, out := post(t, srv.URL+"/update_weights_from_disk", c.body)
		if code != 400 || out["success"] != false || !strings.Contains(out["message"].(string), c.want) {
			t.Fatalf("%s: %d %v, want 400 success false with %q", c.body, code, out, c.want)
		}
		if got, v := answer(t, srv.URL); got != before || v != "v0" {
			t.Fatalf("a failed update (%s) changed the answers or the version (%q)", c.body, v)
		}
	}

	// A good update (the trainer's global_step_N layout) changes them.
	code, out := post(t, srv.URL+"/update_weights_from_disk", `{"model_path":"`+ckpt+`","weight_version":"step-1"}`)
	if code != 200 || out["success"] != true || out["num_paused_requests"] == nil {
		t.Fatalf("update: %d %v", code, out)
	}
	after, v := answer(t, srv.URL)
	if after == before || v != "step-1" {
		t.Fatalf("after the update: same answer %v, version %q", after == before, v)
	}
	resp, err := http.Get(srv.URL + "/get_weight_version")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(b)) != `{"weight_version":"step-1"}` {
		t.Fatalf("get_weight_version: %s", b)
	}
	// Without weight_version the version stays (SGLang's behaviour).
	if code, out := post(t, srv.URL+"/update_weights_from_disk", `{"model_path":"`+ckpt+`"}`); code != 200 || out["success"] != true {
		t.Fatalf("update without a version: %d %v", code, out)
	}
	if _, v := answer(t, srv.URL); v != "step-1" {
		t.Fatalf("version %q after an update without weight_version", v)
	}
}

func TestPauseContinueGeneration(t *testing.T) {
	srv, eng := newTestServerEngine(t, Options{}, local.EngineOptions{Workers: 1})
	if code, out := post(t, srv.URL+"/pause_generation", `{"mode":"in_place"}`); code != 200 || out["status"] != "ok" {
		t.Fatalf("pause: %d %v", code, out)
	}
	res := make(chan map[string]any, 1)
	go func() {
		_, out := post(t, srv.URL+"/v1/completions", `{"prompt":"a","max_tokens":3}`)
		res <- out
	}()
	waitFor(t, "the request to queue", func() bool { return eng.Stats().Waiting == 1 })
	if code, _ := post(t, srv.URL+"/continue_generation", `{}`); code != 200 {
		t.Fatal(code)
	}
	if out := <-res; out["choices"] == nil {
		t.Fatalf("after continue: %v", out)
	}
	// Pausing with abort ends waiting requests with finish_reason abort.
	post(t, srv.URL+"/pause_generation", `{"mode":"in_place"}`)
	go func() {
		_, out := post(t, srv.URL+"/v1/completions", `{"prompt":"a","max_tokens":3}`)
		res <- out
	}()
	waitFor(t, "the request to queue", func() bool { return eng.Stats().Waiting == 1 })
	post(t, srv.URL+"/pause_generation", ``)
	out := <-res
	if fr := out["choices"].([]any)[0].(map[string]any)["finish_reason"]; fr != "abort" {
		t.Fatalf("finish_reason %v after pause with abort", fr)
	}
	post(t, srv.URL+"/continue_generation", ``)
	if code, out := post(t, srv.URL+"/pause_generation", `{"mode":"sideways"}`); code != 400 {
		t.Fatalf("bad mode: %d %v", code, out)
	}
}

// 64 concurrent HTTP requests share forward passes: with all 64 queued
// before decoding starts, each step is one forward carrying all of them.
func TestConcurrentRequestsShareForwards(t *testing.T) {
	srv, eng := newTestServerEngine(t, Options{}, local.EngineOptions{MaxNumSeqs: 64, Workers: 2})
	post(t, srv.URL+"/pause_generation", `{"mode":"in_place"}`)
	const n, tokens = 64, 8
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"%d+%d="}],"max_tokens":%d,"ignore_eos":true}`, i, i, tokens)
			code, out := post(t, srv.URL+"/v1/chat/completions", body)
			if code != 200 || out["usage"].(map[string]any)["completion_tokens"].(float64) != tokens {
				errs <- fmt.Sprintf("%d %v", code, out)
			}
		}()
	}
	waitFor(t, "64 requests to queue", func() bool { return eng.Stats().Waiting == n })
	post(t, srv.URL+"/continue_generation", ``)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	st := eng.Stats()
	if st.GenTokens != n*tokens || st.Forwards != tokens-1 || st.MaxBatch != n {
		t.Fatalf("%d tokens in %d forwards (max batch %d); want %d tokens in %d forwards of %d", st.GenTokens, st.Forwards, st.MaxBatch, n*tokens, tokens-1, n)
	}
}

func TestQueueFullIs429AndTimeoutIs504(t *testing.T) {
	srv, eng := newTestServerEngine(t, Options{RequestTimeout: 200 * time.Millisecond}, local.EngineOptions{MaxNumSeqs: 1, MaxWaiting: 1, Workers: 1})
	eng.Pause(false)
	res := make(chan int, 1)
	go func() {
		code, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"a","max_tokens":2}`)
		res <- code
	}()
	waitFor(t, "the request to queue", func() bool { return eng.Stats().Waiting == 1 })
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("full queue: status %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// The paused request outlives its timeout.
	if code := <-res; code != 504 {
		t.Fatalf("timed-out request: %d", code)
	}
	waitFor(t, "the timed-out request to leave the queue", func() bool { return eng.Stats().Waiting == 0 })
}

func TestMetrics(t *testing.T) {
	srv := newTestServer(t, Options{ModelName: "policy"})
	post(t, srv.URL+"/v1/completions", `{"prompt":"a","max_tokens":3,"ignore_eos":true}`)
	sseChunks(t, srv.URL+"/v1/completions", `{"prompt":"a","max_tokens":3,"ignore_eos":true,"stream":true}`)
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, want := range []string{
		`vllm:num_requests_running{model_name="policy"} 0`,
		`vllm:num_requests_waiting{model_name="policy"} 0`,
		`vllm:generation_tokens_total{model_name="policy"} 6`,
		`vllm:prompt_tokens_total{model_name="policy"} 2`,
		`vllm:time_to_first_token_seconds_count{model_name="policy"} 2`,
		`vllm:inter_token_latency_seconds_bucket{model_name="policy",le="+Inf"} 4`,
		`vllm:e2e_request_latency_seconds_count{model_name="policy"} 2`,
		`vllm:request_success_total{finished_reason="length",model_name="policy"} 2`,
		`rllm:batched_forwards_total{model_name="policy"}`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}
