package fakevllm

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func post(t *testing.T, s *Server, path string, body any) (int, http.Header, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(s.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("POST %s: body is not JSON: %v: %s", path, err, raw)
	}
	return resp.StatusCode, resp.Header, m
}

func chatBody(extra map[string]any) map[string]any {
	b := map[string]any{
		"model":            "fake-model",
		"messages":         []map[string]any{{"role": "user", "content": "the cat sat on the mat"}},
		"temperature":      0,
		"top_p":            1,
		"top_k":            -1,
		"max_tokens":       64,
		"logprobs":         true,
		"return_token_ids": true,
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func ints(v any) []int {
	xs, _ := v.([]any)
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x.(float64))
	}
	return out
}

func TestChatFields(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		cfg                   Config
		reasoningKey, stopKey string
		eosStop               any // what a natural end reports as the stop
	}{
		{"vllm", Config{Reasoning: true}, "reasoning", "stop_reason", nil},
		{"vllm-legacy", Config{Reasoning: true, LegacyReasoningField: true}, "reasoning_content", "stop_reason", nil},
		{"sglang", Config{Reasoning: true, Flavor: SGLang}, "reasoning_content", "matched_stop", float64(TokenImEnd)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.cfg)
			defer s.Close()
			status, _, m := post(t, s, "/v1/chat/completions", chatBody(nil))
			if status != 200 {
				t.Fatalf("status %d: %v", status, m)
			}
			for _, k := range []string{"id", "object", "created", "model", "choices", "usage", "prompt_token_ids"} {
				if _, ok := m[k]; !ok {
					t.Errorf("response lacks %q", k)
				}
			}
			c := m["choices"].([]any)[0].(map[string]any)
			if _, ok := c[tc.stopKey]; !ok {
				t.Errorf("choice lacks %q: %v", tc.stopKey, c)
			}
			msg := c["message"].(map[string]any)
			if r, _ := msg[tc.reasoningKey].(string); r == "" {
				t.Errorf("message lacks %q: %v", tc.reasoningKey, msg)
			}
			ids := ints(c["token_ids"])
			lps := c["logprobs"].(map[string]any)["content"].([]any)
			if len(ids) == 0 || len(ids) != len(lps) {
				t.Fatalf("%d token ids, %d logprobs", len(ids), len(lps))
			}
			if ids[len(ids)-1] != TokenImEnd || c["finish_reason"] != "stop" || c[tc.stopKey] != tc.eosStop {
				t.Errorf("a natural end should finish with <|im_end|>, stop, %s %v: %v", tc.stopKey, tc.eosStop, c)
			}
			prompt := ints(m["prompt_token_ids"])
			want := s.Vocab().Encode(RenderChat([]Message{{Role: "user", Content: ptr("the cat sat on the mat")}}, true))
			if !equalInts(prompt, want) {
				t.Errorf("prompt ids %v, want %v", prompt, want)
			}
			u := m["usage"].(map[string]any)
			if int(u["prompt_tokens"].(float64)) != len(prompt) || int(u["completion_tokens"].(float64)) != len(ids) ||
				int(u["total_tokens"].(float64)) != len(prompt)+len(ids) {
				t.Errorf("usage %v disagrees with %d prompt and %d completion tokens", u, len(prompt), len(ids))
			}
			// the text is the tokens: reasoning + content decode back to them
			full := "<think>" + msg[tc.reasoningKey].(string) + "</think>" + msg["content"].(string)
			if got := stripSpecials(s.Vocab().Decode(ids)); got != full {
				t.Errorf("decoded ids %q, message %q", got, full)
			}
		})
	}
}

func ptr(s string) *string { return &s }

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

func TestDeterministic(t *testing.T) {
	s := New(Config{Seed: 3})
	defer s.Close()
	_, _, a := post(t, s, "/v1/chat/completions", chatBody(map[string]any{"n": 3}))
	_, _, b := post(t, s, "/v1/chat/completions", chatBody(map[string]any{"n": 3}))
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatalf("same request, different replies:\n%s\n%s", ja, jb)
	}
	cs := a["choices"].([]any)
	if len(cs) != 3 {
		t.Fatalf("n=3 gave %d choices", len(cs))
	}
	if equalInts(ints(cs[0].(map[string]any)["token_ids"]), ints(cs[1].(map[string]any)["token_ids"])) &&
		equalInts(ints(cs[1].(map[string]any)["token_ids"]), ints(cs[2].(map[string]any)["token_ids"])) {
		t.Errorf("all choices identical")
	}
}

func TestCompletions(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	v := s.Vocab()
	promptIDs := v.Encode("the dog sat")
	for _, tc := range []struct {
		name   string
		prompt any
		asIDs  bool
	}{
		{"string", "the dog sat", false},
		{"token ids", promptIDs, false},
		{"token_id form", promptIDs, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, m := post(t, s, "/v1/completions", map[string]any{
				"model": "fake-model", "prompt": tc.prompt, "temperature": 1, "top_p": 1, "top_k": -1,
				"max_tokens": 32, "logprobs": 0, "return_token_ids": true, "return_tokens_as_token_ids": tc.asIDs,
			})
			if status != 200 {
				t.Fatalf("status %d: %v", status, m)
			}
			c := m["choices"].([]any)[0].(map[string]any)
			if got := ints(c["prompt_token_ids"]); !equalInts(got, promptIDs) {
				t.Errorf("prompt_token_ids %v, want %v", got, promptIDs)
			}
			lp := c["logprobs"].(map[string]any)
			ids := ints(c["token_ids"])
			toks := lp["tokens"].([]any)
			if len(toks) != len(ids) || len(lp["token_logprobs"].([]any)) != len(ids) ||
				len(lp["top_logprobs"].([]any)) != len(ids) || len(lp["text_offset"].([]any)) != len(ids) {
				t.Fatalf("logprob arrays do not match %d ids: %v", len(ids), lp)
			}
			if tc.asIDs && !strings.HasPrefix(toks[0].(string), "token_id:") {
				t.Errorf("token %q is not in token_id:N form", toks[0])
			}
			if _, ok := c["text"].(string); !ok {
				t.Errorf("choice lacks text")
			}
		})
	}
}

func TestStopsAndLength(t *testing.T) {
	s := New(Config{Reply: func(in ReplyInput) *Reply {
		return &Reply{Content: " the cat sat on the mat"}
	}})
	defer s.Close()
	for _, tc := range []struct {
		name       string
		extra      map[string]any
		finish     string
		stopReason any
		nIDs       int
	}{
		{"eos", nil, "stop", nil, 7},
		{"max_tokens", map[string]any{"max_tokens": 3}, "length", nil, 3},
		{"stop string", map[string]any{"stop": " sat"}, "stop", " sat", 3},
		{"stop list", map[string]any{"stop": []string{"xyz", " on"}}, "stop", " on", 4},
		{"stop token id", map[string]any{"stop_token_ids": []int{s.Vocab().Encode(" mat")[0]}}, "stop", float64(s.Vocab().Encode(" mat")[0]), 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, m := post(t, s, "/v1/chat/completions", chatBody(tc.extra))
			c := m["choices"].([]any)[0].(map[string]any)
			if c["finish_reason"] != tc.finish || c["stop_reason"] != tc.stopReason || len(ints(c["token_ids"])) != tc.nIDs {
				t.Errorf("finish %v stop %v ids %d; want %v %v %d", c["finish_reason"], c["stop_reason"], len(ints(c["token_ids"])), tc.finish, tc.stopReason, tc.nIDs)
			}
		})
	}
}

func TestToolCalls(t *testing.T) {
	s := New(Config{Reply: func(in ReplyInput) *Reply {
		return &Reply{ToolCalls: []episode.ToolCall{{ID: "call_1", Type: "function", Function: episode.FunctionCall{Name: "calc", Arguments: `{"x": 1}`}}}}
	}})
	defer s.Close()
	_, _, m := post(t, s, "/v1/chat/completions", chatBody(map[string]any{"tools": []any{map[string]any{"type": "function"}}}))
	c := m["choices"].([]any)[0].(map[string]any)
	msg := c["message"].(map[string]any)
	tcs := msg["tool_calls"].([]any)
	if c["finish_reason"] != "tool_calls" || msg["content"] != nil || len(tcs) != 1 {
		t.Fatalf("choice %v", c)
	}
	fn := tcs[0].(map[string]any)["function"].(map[string]any)
	if fn["name"] != "calc" || fn["arguments"] != `{"x": 1}` {
		t.Errorf("function %v", fn)
	}
}

func TestRejectsLikeVLLM(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		extra  map[string]any
		status int
		flat   bool
	}{
		{"wrong model", Config{}, map[string]any{"model": "other"}, 404, false},
		{"top_p 0", Config{}, map[string]any{"top_p": 0}, 400, false},
		{"negative temperature", Config{}, map[string]any{"temperature": -1}, 400, false},
		{"flat error", Config{FlatErrors: true}, map[string]any{"model": "other"}, 404, true},
		{"context", Config{MaxModelLen: 5}, nil, 400, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.cfg)
			defer s.Close()
			status, _, m := post(t, s, "/v1/chat/completions", chatBody(tc.extra))
			if status != tc.status {
				t.Fatalf("status %d, want %d", status, tc.status)
			}
			e := m
			if !tc.flat {
				e = m["error"].(map[string]any)
			}
			if msg, _ := e["message"].(string); msg == "" || e["code"] != float64(tc.status) {
				t.Errorf("error body %v", m)
			}
		})
	}
}

func TestOtherEndpoints(t *testing.T) {
	s := New(Config{Model: "m1", MaxModelLen: 1234})
	defer s.Close()
	_, _, tok := post(t, s, "/tokenize", map[string]any{"prompt": "the cat é"})
	ids := ints(tok["tokens"])
	if int(tok["count"].(float64)) != len(ids) || tok["max_model_len"] != float64(1234) {
		t.Errorf("tokenize %v", tok)
	}
	_, _, de := post(t, s, "/detokenize", map[string]any{"tokens": ids})
	if de["prompt"] != "the cat é" {
		t.Errorf("detokenize gave %q", de["prompt"])
	}
	resp, err := http.Get(s.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Object string
		Data   []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		}
	}
	_ = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if models.Object != "list" || len(models.Data) != 1 || models.Data[0].ID != "m1" || models.Data[0].MaxModelLen != 1234 {
		t.Errorf("models %+v", models)
	}
	for _, healthy := range []bool{true, false, true} {
		s.SetHealthy(healthy)
		resp, err := http.Get(s.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 503}[healthy]; resp.StatusCode != want {
			t.Errorf("health %d, want %d", resp.StatusCode, want)
		}
	}
	resp, err = http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:generation_tokens_total"} {
		if !strings.Contains(string(body), name+"{") {
			t.Errorf("metrics lack %s", name)
		}
	}
}

func TestFaults(t *testing.T) {
	s := New(Config{RetryAfter: 2})
	defer s.Close()
	client := &http.Client{Timeout: 300 * time.Millisecond}
	for _, tc := range []struct {
		fault  Fault
		status int // 0: transport error
		check  func(t *testing.T, h http.Header, body []byte)
	}{
		{FaultServerError, 500, nil},
		{FaultUnavailable, 503, nil},
		{FaultRateLimit, 429, func(t *testing.T, h http.Header, _ []byte) {
			if h.Get("Retry-After") != "2" {
				t.Errorf("Retry-After %q", h.Get("Retry-After"))
			}
		}},
		{FaultTimeout, 0, nil},
		{FaultDrop, 0, nil},
		{FaultMalformed, 200, func(t *testing.T, _ http.Header, b []byte) {
			if json.Valid(b) {
				t.Errorf("malformed body is valid JSON")
			}
		}},
		{FaultWrongModel, 404, nil},
		{FaultBadRequest, 400, nil},
		{FaultUnauthorized, 401, nil},
		{FaultShortLogprobs, 200, func(t *testing.T, _ http.Header, b []byte) {
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			c := m["choices"].([]any)[0].(map[string]any)
			if len(c["logprobs"].(map[string]any)["content"].([]any)) != len(ints(c["token_ids"]))-1 {
				t.Errorf("logprobs not one short")
			}
		}},
		{FaultBadTokenID, 200, func(t *testing.T, _ http.Header, b []byte) {
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			if ints(m["choices"].([]any)[0].(map[string]any)["token_ids"])[0] < s.Vocab().Size() {
				t.Errorf("token id inside the vocabulary")
			}
		}},
		{FaultMissingFields, 200, func(t *testing.T, _ http.Header, b []byte) {
			if bytes.Contains(b, []byte("finish_reason")) {
				t.Errorf("finish_reason still present")
			}
		}},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			s.InjectNext(tc.fault)
			b, _ := json.Marshal(chatBody(nil))
			resp, err := client.Post(s.URL+"/v1/chat/completions", "application/json", bytes.NewReader(b))
			if tc.status == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("got status %d, want a transport error", resp.StatusCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.check != nil {
				tc.check(t, resp.Header, body)
			}
		})
	}
	if got := s.Stats().Faults[FaultDrop]; got != 1 {
		t.Errorf("drop counted %d times", got)
	}
}

func TestFaultRate(t *testing.T) {
	s := New(Config{FaultRate: 0.5, Faults: []Fault{FaultServerError}, Seed: 1})
	defer s.Close()
	var fails int
	for i := 0; i < 200; i++ {
		b, _ := json.Marshal(chatBody(nil))
		resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 500 {
			fails++
		}
	}
	// 200 draws at p=0.5: outside [60, 140] has probability < 1e-8.
	if fails < 60 || fails > 140 || int64(fails) != s.Stats().Faults[FaultServerError] {
		t.Errorf("%d of 200 failed at rate 0.5 (counted %d)", fails, s.Stats().Faults[FaultServerError])
	}
}

func TestCloseReleasesHangs(t *testing.T) {
	s := New(Config{})
	s.InjectNext(FaultTimeout)
	errc := make(chan error, 1)
	go func() {
		b, _ := json.Marshal(chatBody(nil))
		resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", bytes.NewReader(b))
		if err == nil {
			resp.Body.Close()
			errc <- nil // answered: the test fails below
			return
		}
		errc <- err
	}()
	for s.Stats().Requests == 0 {
		time.Sleep(time.Millisecond)
	}
	s.Close()
	if err := <-errc; err == nil {
		t.Fatal("hung request answered")
	}
}

func FuzzVocabRoundTrip(f *testing.F) {
	v := DefaultVocab()
	f.Add("the cat <|im_end|> é\n")
	f.Fuzz(func(t *testing.T, s string) {
		if got := v.Decode(v.Encode(s)); got != s {
			t.Fatalf("round trip %q -> %q", s, got)
		}
	})
}

// The context is enforced as vLLM's input validation does: a reply asked
// for past the context is refused with vLLM's message, never shortened.
func TestContextLikeVLLM(t *testing.T) {
	s := New(Config{MaxModelLen: 32, ReplyTokens: 40})
	defer s.Close()
	prompt := make([]int, 10)
	for i := range prompt {
		prompt[i] = TokenImStart + 5
	}
	for _, tc := range []struct {
		name   string
		path   string
		extra  map[string]any
		status int
		msg    string // in the error message
	}{
		{"completion fits", "/v1/completions", map[string]any{"max_tokens": 22}, 200, ""},
		{"completion over", "/v1/completions", map[string]any{"max_tokens": 23}, 400,
			"'max_tokens' or 'max_completion_tokens' is too large: 23. This model's maximum context length is 32 tokens and your request has 10 input tokens (23 > 32 - 10)."},
		{"prompt fills the context", "/v1/completions", map[string]any{"prompt": make([]int, 32)}, 400,
			"This model's maximum context length is 32 tokens. However, your request has 32 input tokens."},
		{"chat max_tokens over", "/v1/chat/completions", map[string]any{"max_tokens": 17}, 400, "'max_tokens' or 'max_completion_tokens' is too large: 17. This model's maximum context length is 32 tokens and your request has 16 input tokens (17 > 32 - 16)."},
		{"chat max_completion_tokens over", "/v1/chat/completions", map[string]any{"max_tokens": nil, "max_completion_tokens": 17}, 400, "is too large: 17."},
		{"chat without max_tokens", "/v1/chat/completions", map[string]any{"max_tokens": nil, "messages": []map[string]any{{"role": "user", "content": "a"}}}, 200, ""},
		{"completion without max_tokens: 16", "/v1/completions", map[string]any{"max_tokens": nil}, 200, ""},
		{"completion default 16 over", "/v1/completions", map[string]any{"max_tokens": nil, "prompt": make([]int, 20)}, 400,
			"'max_tokens' or 'max_completion_tokens' is too large: 16."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := chatBody(tc.extra)
			if tc.path == "/v1/completions" {
				delete(body, "messages")
				body["logprobs"] = 0
				if _, ok := tc.extra["prompt"]; !ok {
					body["prompt"] = prompt
				}
			}
			status, _, m := post(t, s, tc.path, body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %v", status, tc.status, m)
			}
			if tc.status != 200 {
				if msg, _ := m["error"].(map[string]any)["message"].(string); !strings.Contains(msg, tc.msg) {
					t.Errorf("message %q, want %q", msg, tc.msg)
				}
				return
			}
			u := m["usage"].(map[string]any)
			if tc.extra["max_tokens"] == nil && tc.path == "/v1/completions" && u["completion_tokens"].(float64) > 16 {
				t.Errorf("usage %v: over vLLM's default max_tokens 16 on completions", u)
			}
			if total := u["total_tokens"].(float64); total > 32 {
				t.Errorf("usage %v: over the context", u)
			}
		})
	}
}
