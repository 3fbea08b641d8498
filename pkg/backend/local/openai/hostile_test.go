package openai

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Requests that once crashed the server or were answered wrongly; each
// runs against a live server, which must still answer afterwards.
func TestHostileRequests(t *testing.T) {
	srv := newTestServer(t, Options{})
	manyStops := `["` + strings.Repeat(`a","`, MaxStopStrings) + `a"]`
	longStop := `["` + strings.Repeat("s", MaxStopBytes+1) + `"]`
	cases := []struct {
		name, path, body string
		status           int
		want             string // in the error message
		param            string
	}{
		{"prompt_logprobs 0", "/v1/completions", `{"prompt":"abc","max_tokens":2,"prompt_logprobs":0}`, 200, "", ""},
		{"echo with logprobs", "/v1/completions", `{"prompt":"abc","max_tokens":2,"echo":true,"logprobs":0}`, 200, "", ""},
		{"max_tokens max int64", "/v1/completions", `{"prompt":"abc","max_tokens":9223372036854775807}`, 400, "you requested 9223372036854775810 tokens (3 in the prompt, 9223372036854775807 in the completion)", "max_tokens"},
		{"chat max_tokens max int64", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"max_tokens":9223372036854775807}`, 400, "maximum context length is 40 tokens", "max_tokens"},
		{"too many stop strings", "/v1/completions", `{"prompt":"a","max_tokens":2,"stop":` + manyStops + `}`, 400, fmt.Sprintf("stop has %d strings; send at most %d", MaxStopStrings+1, MaxStopStrings), "stop"},
		{"stop string too long", "/v1/completions", `{"prompt":"a","max_tokens":2,"stop":` + longStop + `}`, 400, fmt.Sprintf("at most %d bytes", MaxStopBytes), "stop"},
		{"type error names the field", "/v1/completions", `{"prompt":"a","n":"2"}`, 400, "parameter n has the wrong type: string given where an integer is expected", "n"},
		{"nested type error", "/v1/completions", `{"prompt":"a","stream":true,"stream_options":{"include_usage":"yes"}}`, 400, "parameter stream_options.include_usage has the wrong type", "stream_options.include_usage"},
		{"tokenize continue_final_message with a prompt", "/tokenize", `{"prompt":"a","continue_final_message":true}`, 400, "continue_final_message applies to messages", "continue_final_message"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := post(t, srv.URL+c.path, c.body)
			if code != c.status {
				t.Fatalf("status %d, want %d: %v", code, c.status, out)
			}
			if c.status != 200 {
				e := out["error"].(map[string]any)
				if msg := e["message"].(string); !strings.Contains(msg, c.want) || strings.Contains(msg, "samplingFields") {
					t.Errorf("message %q, want it to contain %q", msg, c.want)
				}
				if e["param"] != c.param {
					t.Errorf("param %v, want %q", e["param"], c.param)
				}
			}
			// The server is still there.
			if code, out := post(t, srv.URL+"/v1/completions", `{"prompt":"a","max_tokens":1}`); code != 200 {
				t.Fatalf("the next request: %d %v", code, out)
			}
		})
	}
}

// echo with logprobs k lists k alternatives for the echoed prompt tokens,
// as for the completion's; prompt_logprobs appear only when asked for.
func TestEchoLogprobsAlternatives(t *testing.T) {
	srv := newTestServer(t, Options{})
	code, out := post(t, srv.URL+"/v1/completions", `{"prompt":"abcd","max_tokens":2,"echo":true,"logprobs":3}`)
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	if _, ok := ch["prompt_logprobs"]; ok {
		t.Errorf("prompt_logprobs in the answer though the request did not ask for them")
	}
	tops := ch["logprobs"].(map[string]any)["top_logprobs"].([]any)
	for i := 1; i < 4; i++ {
		m := tops[i].(map[string]any)
		if len(m) < 3 || len(m) > 4 {
			t.Errorf("prompt token %d has %d top_logprobs entries, want 3 alternatives (plus itself): %v", i, len(m), m)
		}
	}
	code, out = post(t, srv.URL+"/v1/completions", `{"prompt":"abcd","max_tokens":2,"echo":true,"logprobs":3,"prompt_logprobs":1}`)
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	ch = out["choices"].([]any)[0].(map[string]any)
	plp := ch["prompt_logprobs"].([]any)
	if m := plp[1].(map[string]any); len(m) > 2 {
		t.Errorf("prompt_logprobs 1 lists %d entries: %v", len(m), m)
	}
}

func TestTokenizeOptions(t *testing.T) {
	srv := newTestServer(t, Options{})
	code, out := post(t, srv.URL+"/tokenize", `{"prompt":"hi","return_token_strs":true}`)
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	strs, ok := out["token_strs"].([]any)
	if !ok || len(strs) != 2 || strs[0] != "h" || strs[1] != "i" {
		t.Fatalf("token_strs %v", out["token_strs"])
	}
	msgs := `"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]`
	_, closed := post(t, srv.URL+"/tokenize", `{`+msgs+`,"add_generation_prompt":false}`)
	code, open := post(t, srv.URL+"/tokenize", `{`+msgs+`,"continue_final_message":true,"add_generation_prompt":false}`)
	if code != 200 {
		t.Fatalf("%d %v", code, open)
	}
	if open["count"].(float64) >= closed["count"].(float64) {
		t.Fatalf("continue_final_message left the last message closed: %v vs %v tokens", open["count"], closed["count"])
	}
	code, _ = post(t, srv.URL+"/tokenize", `{`+msgs+`,"continue_final_message":true,"add_generation_prompt":true}`)
	if code != 400 {
		t.Fatalf("continue_final_message with add_generation_prompt: %d, want 400 as chat/completions", code)
	}
}

// With an API key every endpoint but /health and /metrics needs it, the
// admin endpoints included.
func TestAPIKey(t *testing.T) {
	srv := newTestServer(t, Options{APIKey: "sekret"})
	do := func(method, path, body, key string) int {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "sekret") {
			t.Fatalf("%s answered with the key: %s", path, b)
		}
		return resp.StatusCode
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/completions", `{"prompt":"a","max_tokens":1}`},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"max_tokens":1}`},
		{"GET", "/v1/models", ""},
		{"POST", "/tokenize", `{"prompt":"a"}`},
		{"POST", "/detokenize", `{"tokens":[97]}`},
		{"POST", "/update_weights_from_disk", `{"model_path":"/nowhere"}`},
		{"POST", "/pause_generation", `{"mode":"in_place"}`},
		{"POST", "/continue_generation", `{}`},
		{"GET", "/get_weight_version", ""},
	} {
		for _, key := range []string{"", "wrong"} {
			if code := do(c.method, c.path, c.body, key); code != 401 {
				t.Errorf("%s %s with key %q: %d, want 401", c.method, c.path, key, code)
			}
		}
		if code := do(c.method, c.path, c.body, "sekret"); code == 401 {
			t.Errorf("%s %s with the key: 401", c.method, c.path)
		}
	}
	for _, path := range []string{"/health", "/metrics"} {
		if code := do("GET", path, "", ""); code != 200 {
			t.Errorf("GET %s without a key: %d, want 200", path, code)
		}
	}
}
