package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
)

// sseChunks posts body and returns the JSON chunks of the event stream,
// checking that it ends with data: [DONE].
func sseChunks(t *testing.T, url, body string) []map[string]any {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var chunks []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not a data line", line)
		}
		if done {
			t.Fatalf("data after [DONE]: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		chunks = append(chunks, m)
	}
	if !done {
		t.Fatal("the stream did not end with data: [DONE]")
	}
	return chunks
}

func ints(v any) []int {
	var out []int
	for _, x := range v.([]any) {
		out = append(out, int(x.(float64)))
	}
	return out
}

func TestCompletionsStreamShapes(t *testing.T) {
	srv := newTestServer(t, Options{ModelName: "policy"})
	req := `"prompt":[259,51,43,52,61],"max_tokens":8,"seed":11,"n":2,"logprobs":2,"return_token_ids":true`
	_, whole := post(t, srv.URL+"/v1/completions", "{"+req+"}")
	chunks := sseChunks(t, srv.URL+"/v1/completions", "{"+req+`,"stream":true,"stream_options":{"include_usage":true}}`)
	texts, ids, lps := map[int]string{}, map[int][]int{}, map[int]int{}
	finished := map[int]bool{}
	id := chunks[0]["id"]
	for i, c := range chunks[:len(chunks)-1] {
		if c["object"] != "text_completion" || c["id"] != id || c["model"] != "policy" {
			t.Fatalf("chunk %d: %v", i, c)
		}
		if _, ok := c["usage"]; ok {
			t.Fatalf("chunk %d carries usage without continuous_usage_stats", i)
		}
		choices := c["choices"].([]any)
		if len(choices) != 1 {
			t.Fatalf("chunk %d has %d choices", i, len(choices))
		}
		ch := choices[0].(map[string]any)
		k := int(ch["index"].(float64))
		if finished[k] {
			t.Fatalf("chunk %d for choice %d after its finish_reason", i, k)
		}
		texts[k] += ch["text"].(string)
		ids[k] = append(ids[k], ints(ch["token_ids"])...)
		lp := ch["logprobs"].(map[string]any)
		lps[k] += len(lp["tokens"].([]any))
		for _, top := range lp["top_logprobs"].([]any) {
			if n := len(top.(map[string]any)); n < 2 || n > 3 {
				t.Fatalf("top_logprobs %v: want the token and its 2 alternatives", top)
			}
		}
		if ch["finish_reason"] != nil {
			finished[k] = true
		}
	}
	last := chunks[len(chunks)-1]
	if len(last["choices"].([]any)) != 0 || last["usage"] == nil {
		t.Fatalf("last chunk %v: want choices [] and usage", last)
	}
	wantTokens := 0
	for _, c := range whole["choices"].([]any) {
		ch := c.(map[string]any)
		k := int(ch["index"].(float64))
		if !finished[k] || texts[k] != ch["text"] || !equalInts(ids[k], ints(ch["token_ids"])) || lps[k] != len(ids[k]) {
			t.Errorf("choice %d streamed %q %v, whole %q %v", k, texts[k], ids[k], ch["text"], ch["token_ids"])
		}
		wantTokens += len(ch["token_ids"].([]any))
	}
	if u := last["usage"].(map[string]any); int(u["completion_tokens"].(float64)) != wantTokens || u["prompt_tokens"].(float64) != 5 {
		t.Errorf("usage %v, want %d completion tokens", u, wantTokens)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestChatStreamShapes(t *testing.T) {
	srv := newTestServer(t, Options{ModelName: "policy"})
	req := `"messages":[{"role":"user","content":"3+4="}],"max_tokens":10,"seed":5,"n":2,"logprobs":true,"top_logprobs":3`
	_, whole := post(t, srv.URL+"/v1/chat/completions", "{"+req+"}")
	chunks := sseChunks(t, srv.URL+"/v1/chat/completions", "{"+req+`,"stream":true,"stream_options":{"include_usage":true}}`)
	// vLLM sends the role first, for every choice.
	for k := range 2 {
		ch := chunks[k]["choices"].([]any)[0].(map[string]any)
		d := ch["delta"].(map[string]any)
		if int(ch["index"].(float64)) != k || d["role"] != "assistant" || d["content"] != "" || ch["finish_reason"] != nil {
			t.Fatalf("chunk %d is not choice %d's role chunk: %v", k, k, chunks[k])
		}
	}
	content := map[int]string{}
	finish := map[int]any{}
	entries := map[int]int{}
	for _, c := range chunks[2 : len(chunks)-1] {
		if c["object"] != "chat.completion.chunk" {
			t.Fatalf("chunk %v", c)
		}
		ch := c["choices"].([]any)[0].(map[string]any)
		k := int(ch["index"].(float64))
		d := ch["delta"].(map[string]any)
		if _, ok := d["role"]; ok {
			t.Fatalf("role repeated: %v", c)
		}
		content[k] += d["content"].(string)
		for _, e := range ch["logprobs"].(map[string]any)["content"].([]any) {
			entries[k]++
			top := e.(map[string]any)["top_logprobs"].([]any)
			if len(top) != 3 {
				t.Fatalf("%d top_logprobs, want 3: %v", len(top), e)
			}
			prev := 1.0
			for _, alt := range top {
				lp := alt.(map[string]any)["logprob"].(float64)
				if lp > prev {
					t.Fatalf("top_logprobs not in descending order: %v", top)
				}
				prev = lp
			}
		}
		if ch["finish_reason"] != nil {
			finish[k] = ch["finish_reason"]
		}
	}
	last := chunks[len(chunks)-1]
	if len(last["choices"].([]any)) != 0 || last["usage"] == nil {
		t.Fatalf("last chunk %v", last)
	}
	for _, c := range whole["choices"].([]any) {
		ch := c.(map[string]any)
		k := int(ch["index"].(float64))
		msg := ch["message"].(map[string]any)
		if content[k] != msg["content"] || finish[k] != ch["finish_reason"] || entries[k] != len(ch["logprobs"].(map[string]any)["content"].([]any)) {
			t.Errorf("choice %d streamed %q (%v, %d logprobs), whole %v", k, content[k], finish[k], entries[k], ch)
		}
	}
}

// A stop string is never streamed, even in part; include_stop_str_in_output
// keeps it. The bias makes greedy decoding write "aaa…".
func TestStopStringHeldBack(t *testing.T) {
	srv := newTestServer(t, Options{})
	// Greedy with a dominant bias writes "aaaa…": the stop "aa" ends it at
	// the second token.
	for _, include := range []bool{false, true} {
		inc := map[bool]string{false: "false", true: "true"}[include]
		want := map[bool]string{false: "", true: "aa"}[include]
		body := `"prompt":"q","max_tokens":10,"temperature":0,"logit_bias":{"97":100},"stop":["aa"],"include_stop_str_in_output":` + inc
		_, whole := post(t, srv.URL+"/v1/completions", "{"+body+"}")
		ch := whole["choices"].([]any)[0].(map[string]any)
		if ch["text"] != want || ch["stop_reason"] != "aa" || ch["finish_reason"] != "stop" {
			t.Fatalf("include %v: %v", include, ch)
		}
		streamed := ""
		for _, c := range sseChunks(t, srv.URL+"/v1/completions", "{"+body+`,"stream":true}`) {
			streamed += c["choices"].([]any)[0].(map[string]any)["text"].(string)
		}
		if streamed != want {
			t.Fatalf("include %v: streamed %q, want %q", include, streamed, want)
		}
	}
}

func TestLogitBiasContentPartsTopLogprobs(t *testing.T) {
	srv := newTestServer(t, Options{})
	code, out := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"temperature":0,"logit_bias":{"113":100},"ignore_eos":true}`)
	if code != 200 || out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"] != "qqqq" {
		t.Fatalf("logit_bias not honoured: %d %v", code, out)
	}
	_, parts := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"system","content":[{"type":"text","text":"be"},{"type":"text","text":"brief"}]},{"role":"user","content":"hi"}],"max_tokens":1,"return_token_ids":true}`)
	_, joined := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"system","content":"be\nbrief"},{"role":"user","content":"hi"}],"max_tokens":1,"return_token_ids":true}`)
	if !equalInts(ints(parts["prompt_token_ids"]), ints(joined["prompt_token_ids"])) {
		t.Fatalf("text parts render %v, the joined string %v", parts["prompt_token_ids"], joined["prompt_token_ids"])
	}
	_, out = post(t, srv.URL+"/v1/completions", `{"prompt":"ab","max_tokens":3,"logprobs":3,"seed":1}`)
	for _, top := range out["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["top_logprobs"].([]any) {
		if n := len(top.(map[string]any)); n != 3 && n != 4 {
			t.Fatalf("logprobs 3 gave %d alternatives: %v", n, top)
		}
	}
	// prompt_logprobs and echo.
	code, out = post(t, srv.URL+"/v1/completions", `{"prompt":"abc","max_tokens":2,"prompt_logprobs":1,"echo":true,"logprobs":0}`)
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	pl := ch["prompt_logprobs"].([]any)
	if len(pl) != 3 || pl[0] != nil || len(pl[1].(map[string]any)) < 1 || !strings.HasPrefix(ch["text"].(string), "abc") {
		t.Fatalf("prompt_logprobs/echo: %v", ch)
	}
	if tl := ch["logprobs"].(map[string]any)["token_logprobs"].([]any); tl[0] != nil || len(tl) < 4 {
		t.Fatalf("echoed logprobs %v", tl)
	}
}

// A client that goes away frees its place: here a request waiting in a
// paused engine, whose stream the client closes after the role chunk.
func TestStreamCancelFreesSlot(t *testing.T) {
	srv, eng := newTestServerEngine(t, Options{}, local.EngineOptions{Workers: 1})
	eng.Pause(false)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"a"}],"max_tokens":10,"stream":true}`))
	// A queued request answers once it starts (it takes the weights
	// current then), so the client waits for the headers.
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, "the request to queue", func() bool { return eng.Stats().Waiting == 1 })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled request was answered")
	}
	waitFor(t, "the cancelled request to leave the queue", func() bool { return eng.Stats().Waiting == 0 })
}

// waitFor polls cond (bounded, so a broken server fails instead of hanging).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
