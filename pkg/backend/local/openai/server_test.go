package openai

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
	wire "github.com/rllm-org/rllm-go/pkg/openaiwire"
)

var testConfig = local.Config{Layers: 1, DModel: 16, Heads: 2, Context: 40, Seed: 2}

func testSnapshot(t testing.TB, c local.Config) *local.Snapshot {
	t.Helper()
	b, err := local.New(local.Options{Config: c, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ts, err := b.PublishSampler(context.Background(), "").Result(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ts.(*local.Snapshot)
}

func newTestServer(t testing.TB, opts Options) *httptest.Server {
	srv, _ := newTestServerEngine(t, opts, local.EngineOptions{Workers: 2})
	return srv
}

func newTestServerEngine(t testing.TB, opts Options, eo local.EngineOptions) (*httptest.Server, *local.Engine) {
	t.Helper()
	eng := local.NewEngine(testSnapshot(t, testConfig), "v0", eo)
	srv := httptest.NewServer(New(eng, opts))
	t.Cleanup(func() {
		srv.Close()
		eng.Close()
	})
	return srv, eng
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("response %q is not JSON: %v", raw, err)
		}
	}
	return resp.StatusCode, out
}

func TestCompletionsTokenIDPrompt(t *testing.T) {
	srv := newTestServer(t, Options{ModelName: "policy"})
	code, out := post(t, srv.URL+"/v1/completions", `{"model":"policy","prompt":[259,51,43,52,61],"max_tokens":5,"temperature":1,"seed":3,"n":2,"logprobs":1,"return_token_ids":true}`)
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	if out["object"] != "text_completion" || out["model"] != "policy" {
		t.Fatalf("response %v", out)
	}
	choices := out["choices"].([]any)
	if len(choices) != 2 {
		t.Fatalf("%d choices for n=2", len(choices))
	}
	for _, c := range choices {
		ch := c.(map[string]any)
		for _, k := range []string{"index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids", "prompt_token_ids"} {
			if _, ok := ch[k]; !ok {
				t.Errorf("choice lacks %q: %v", k, ch)
			}
		}
		ids := ch["token_ids"].([]any)
		lps := ch["logprobs"].(map[string]any)["token_logprobs"].([]any)
		if len(ids) != len(lps) || len(ids) == 0 || len(ids) > 5 {
			t.Errorf("%d token ids, %d logprobs", len(ids), len(lps))
		}
		if fr := ch["finish_reason"]; fr != "stop" && fr != "length" {
			t.Errorf("finish_reason %v", fr)
		}
	}
	usage := out["usage"].(map[string]any)
	// One prompt of 5 tokens, counted once however many choices it has.
	if usage["prompt_tokens"].(float64) != 5 {
		t.Errorf("usage %v", usage)
	}
}

func TestChatCompletions(t *testing.T) {
	srv := newTestServer(t, Options{})
	code, out := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"3+4="}],"max_tokens":4,"logprobs":true,"return_token_ids":true,"stop":"\n","seed":1}`)
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	if out["object"] != "chat.completion" || out["prompt_token_ids"] == nil {
		t.Fatalf("response %v", out)
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	msg := ch["message"].(map[string]any)
	if msg["role"] != "assistant" {
		t.Errorf("message %v", msg)
	}
	content := ch["logprobs"].(map[string]any)["content"].([]any)
	if len(content) != len(ch["token_ids"].([]any)) {
		t.Errorf("%d logprob entries for %d tokens", len(content), len(ch["token_ids"].([]any)))
	}
	if _, ok := ch["stop_reason"]; !ok {
		t.Error("no stop_reason")
	}
}

func TestTokenizeDetokenizeModelsHealth(t *testing.T) {
	srv := newTestServer(t, Options{})
	code, out := post(t, srv.URL+"/tokenize", `{"prompt":"<|im_start|>hi"}`)
	if code != 200 || out["count"].(float64) != 3 || out["max_model_len"].(float64) != 40 {
		t.Fatalf("tokenize %d %v", code, out)
	}
	code, out = post(t, srv.URL+"/tokenize", `{"messages":[{"role":"user","content":"a"}]}`)
	want := local.Tokenizer{}.ChatTemplate(nil, true)
	if code != 200 || int(out["count"].(float64)) != 1+len("user\na")+2+len(want) {
		t.Fatalf("tokenize messages %d %v", code, out)
	}
	code, out = post(t, srv.URL+"/detokenize", `{"tokens":[259,104,105]}`)
	if code != 200 || out["prompt"] != "<|im_start|>hi" {
		t.Fatalf("detokenize %d %v", code, out)
	}
	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models map[string]any
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	data := models["data"].([]any)[0].(map[string]any)
	if models["object"] != "list" || data["id"] != "local-v1" || data["max_model_len"].(float64) != 40 {
		t.Fatalf("models %v", models)
	}
	resp, err = http.Get(srv.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestBadRequests(t *testing.T) {
	srv := newTestServer(t, Options{})
	long := strings.Repeat("x", 45)
	cases := []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"prompt too long", "/v1/completions", `{"prompt":"` + long + `"}`, 400, "maximum context length is 40 tokens"},
		{"chat too long", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "maximum context length"},
		{"token out of vocab", "/v1/completions", `{"prompt":[1,2,999]}`, 400, "prompt token 2 is 999, outside the vocabulary"},
		{"negative token", "/v1/completions", `{"prompt":[[1],[-4]]}`, 400, "prompt token 0 is -4"},
		{"detokenize out of vocab", "/detokenize", `{"tokens":[5000]}`, 400, "outside the vocabulary"},
		{"bad json", "/v1/completions", `{"prompt":`, 400, "not valid JSON"},
		{"bad prompt type", "/v1/completions", `{"prompt":{"a":1}}`, 400, "prompt must be"},
		{"empty prompt list", "/v1/completions", `{"prompt":[]}`, 400, "prompt must be"},
		{"missing prompt", "/v1/completions", `{}`, 400, "prompt is required"},
		{"unknown model", "/v1/completions", `{"model":"gpt-4","prompt":"a"}`, 404, "does not exist"},
		{"bad n", "/v1/completions", `{"prompt":"a","n":0}`, 400, "n is 0"},
		{"bad temperature", "/v1/completions", `{"prompt":"a","temperature":-2}`, 400, "temperature is -2"},
		{"bad stop", "/v1/completions", `{"prompt":"a","stop":5}`, 400, "stop must be"},
		{"penalty", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"frequency_penalty":0.5}`, 400, "frequency_penalty is not supported"},
		{"unknown parameter", "/v1/completions", `{"prompt":"a","guided_json":{}}`, 400, `parameter "guided_json" is not supported`},
		{"image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, `messages[0].content[0] has type "image_url"`},
		{"top_logprobs without logprobs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"top_logprobs":2}`, 400, "top_logprobs needs logprobs"},
		{"too many logprobs", "/v1/completions", `{"prompt":"a","logprobs":21}`, 400, "logprobs is 21"},
		{"logit_bias key", "/v1/completions", `{"prompt":"a","logit_bias":{"x":1}}`, 400, `logit_bias key "x"`},
		{"logit_bias value", "/v1/completions", `{"prompt":"a","logit_bias":{"5":101}}`, 400, "use a number in [-100, 100]"},
		{"max_tokens over context", "/v1/completions", `{"prompt":"abc","max_tokens":39}`, 400, "you requested 42 tokens (3 in the prompt, 39 in the completion)"},
		{"wrong type", "/v1/completions", `{"prompt":"a","max_tokens":"5"}`, 400, "max_tokens has the wrong type"},
		{"prompt_logprobs streamed", "/v1/completions", `{"prompt":"a","prompt_logprobs":1,"stream":true}`, 400, "not available with stream"},
		{"echo streamed", "/v1/completions", `{"prompt":"a","echo":true,"stream":true}`, 400, "echo is not supported with stream"},
		{"n too large", "/v1/completions", `{"prompt":"a","n":65}`, 400, "n is 65; use 1 to 64"},
		{"tools", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function"}]}`, 400, "tools[0] has no function.name"},
		{"no messages", "/v1/chat/completions", `{"messages":[]}`, 400, "messages is required"},
		{"continue and add generation prompt", "/v1/chat/completions", `{"messages":[{"role":"assistant","content":"a"}],"continue_final_message":true,"add_generation_prompt":true}`, 400, "cannot both be true"},
		{"tokenize continue and add generation prompt", "/tokenize", `{"messages":[{"role":"assistant","content":"a"}],"continue_final_message":true,"add_generation_prompt":true}`, 400, "cannot both be true"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := post(t, srv.URL+c.path, c.body)
			if code != c.status {
				t.Fatalf("status %d, want %d (%v)", code, c.status, out)
			}
			e, ok := out["error"].(map[string]any)
			if !ok {
				t.Fatalf("no error object: %v", out)
			}
			for _, k := range []string{"message", "type", "param", "code"} {
				if _, ok := e[k]; !ok {
					t.Errorf("error lacks %q", k)
				}
			}
			if !strings.Contains(e["message"].(string), c.want) || int(e["code"].(float64)) != c.status {
				t.Fatalf("error %v, want message containing %q", e, c.want)
			}
		})
	}
}

func TestTruncation(t *testing.T) {
	srv := newTestServer(t, Options{TruncateLongPrompts: true})
	code, out := post(t, srv.URL+"/v1/completions", `{"prompt":"`+strings.Repeat("x", 60)+`","max_tokens":1,"return_token_ids":true}`)
	if code != 200 {
		t.Fatalf("status %d %v", code, out)
	}
	if n := len(out["choices"].([]any)[0].(map[string]any)["prompt_token_ids"].([]any)); n != 39 {
		t.Fatalf("truncated prompt has %d tokens, want 39 (context 40 minus 1)", n)
	}
	srv2 := newTestServer(t, Options{})
	code, out = post(t, srv2.URL+"/v1/completions", `{"prompt":"`+strings.Repeat("x", 60)+`","max_tokens":1,"truncate_prompt_tokens":10,"return_token_ids":true}`)
	if code != 200 || len(out["choices"].([]any)[0].(map[string]any)["prompt_token_ids"].([]any)) != 10 {
		t.Fatalf("truncate_prompt_tokens: %d %v", code, out)
	}
}

func FuzzCompletionsBody(f *testing.F) {
	f.Add(`{"prompt":[1,2,3],"max_tokens":2}`)
	f.Add(`{"prompt":"hi","stop":["a"],"n":2,"max_tokens":2}`)
	f.Add(`{"prompt":[[1],[2]],"max_tokens":1}`)
	f.Add(`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2,"n":2,"max_tokens":3}`)
	f.Add(`{"prompt":"ab","echo":true,"logprobs":2,"prompt_logprobs":1,"logit_bias":{"97":5},"stop":["a"],"min_tokens":1,"max_tokens":3}`)
	f.Add(`{"model_path":"nowhere","weight_version":"x"}`)
	f.Add(`{"prompt":"ab","max_tokens":2,"prompt_logprobs":0}`)
	f.Add(`{"prompt":"ab","echo":true,"logprobs":0,"max_tokens":1}`)
	f.Add(`{"prompt":"ab","max_tokens":9223372036854775807}`)
	f.Add(`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"continue_final_message":true,"add_generation_prompt":false,"return_token_strs":true}`)
	f.Add(`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"1"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto","stream":true}`)
	f.Add(`{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function"}}`)
	b, err := local.New(local.Options{Config: local.Config{Layers: 1, DModel: 8, Heads: 2, Context: 16, Seed: 1}, Workers: 1})
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	ts, _ := b.PublishSampler(context.Background(), "").Result(context.Background())
	eng := local.NewEngine(ts.(*local.Snapshot), "v0", local.EngineOptions{Workers: 1})
	defer eng.Close()
	h := New(eng, Options{})
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize", "/update_weights_from_disk"} {
			req := httptest.NewRequest("POST", path, strings.NewReader(body))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("%s answered %d to %q: %s", path, rec.Code, body, rec.Body)
			}
		}
	})
}

func TestErrorTypes(t *testing.T) {
	for _, c := range []struct {
		status     int
		typ        string
		retryAfter string
	}{
		{400, "BadRequestError", ""},
		{401, "AuthenticationError", ""},
		{404, "NotFoundError", ""},
		{413, "RequestTooLargeError", ""},
		{422, "BadRequestError", ""},
		{429, "RateLimitError", "1"},
		{500, "InternalServerError", ""},
		{503, "ServiceUnavailableError", ""},
		{504, "TimeoutError", ""},
	} {
		rec := httptest.NewRecorder()
		writeError(rec, c.status, "p", "no %s", "way")
		var body wire.ErrorResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		e := body.Error
		if rec.Code != c.status || e.Code != float64(c.status) || e.Type != c.typ || e.Message != "no way" || e.Param != "p" {
			t.Errorf("status %d: got %d %+v, want type %s", c.status, rec.Code, e, c.typ)
		}
		if got := rec.Header().Get("Retry-After"); got != c.retryAfter {
			t.Errorf("status %d: Retry-After %q, want %q", c.status, got, c.retryAfter)
		}
	}
}
