package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/openaiwire"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// strictServer is an httptest fake as strict about the context as vLLM
// (serving_engine's input validation): a prompt of the context or more
// is refused, and so is prompt + max_tokens over the context, with
// vLLM's messages and error body; an absent max_tokens means up to the
// context on chat and 16 on completions. A chat prompt's tokens are its
// words plus 3 per message (a template's markers).
type strictServer struct {
	*httptest.Server
	ctxLen int
	models string // the /v1/models body; "" writes vLLM's
	mu     sync.Mutex
	asked  []*int // max_tokens of each generation request
	sent   int    // generation requests
}

func newStrictServer(t *testing.T, ctxLen int, models string) *strictServer {
	s := &strictServer{ctxLen: ctxLen, models: models}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		if s.models == "404" {
			http.NotFound(w, nil)
			return
		}
		if s.models != "" {
			fmt.Fprint(w, s.models)
			return
		}
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"m","object":"model","created":1,"owned_by":"vllm","root":"m","parent":null,"max_model_len":%d,"permission":[]}]}`, ctxLen)
	})
	gen := func(chat bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				Messages  []episode.Message `json:"messages"`
				Prompt    []int             `json:"prompt"`
				MaxTokens *int              `json:"max_tokens"`
			}
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			s.mu.Lock()
			s.asked = append(s.asked, req.MaxTokens)
			s.sent++
			s.mu.Unlock()
			n := len(req.Prompt)
			if chat {
				for _, m := range req.Messages {
					n += 3 + len(strings.Fields(m.Content))
				}
			}
			refuse := func(msg string) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(400)
				json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "BadRequestError", "param": nil, "code": 400}})
			}
			if n >= s.ctxLen {
				refuse(fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", s.ctxLen, n))
				return
			}
			if m := req.MaxTokens; m != nil && n+*m > s.ctxLen {
				refuse(fmt.Sprintf("'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).", *m, s.ctxLen, n, *m, s.ctxLen, n))
				return
			}
			out := s.ctxLen - n
			if !chat {
				out = 16
			}
			if req.MaxTokens != nil {
				out = *req.MaxTokens
			}
			// The answer in the package's own wire types.
			ids := make([]int, out)
			lps := make([]openaiwire.TokenLogprob, out)
			for i := range ids {
				ids[i] = 7
				lps[i] = openaiwire.TokenLogprob{Token: "a", Logprob: -0.5, Bytes: []int{97}, TopLogprobs: []openaiwire.TopLogprob{}}
			}
			text := strings.Repeat("a", out)
			usage := openaiwire.Usage{PromptTokens: n, CompletionTokens: out, TotalTokens: n + out}
			w.Header().Set("Content-Type", "application/json")
			if chat {
				json.NewEncoder(w).Encode(openaiwire.ChatResponse{ID: "c", Object: "chat.completion", Created: 1, Model: "m", Usage: usage, PromptTokenIDs: make([]int, n),
					Choices: []openaiwire.ChatChoice{{Message: &openaiwire.ChatMessage{Role: "assistant", Content: &text}, Logprobs: &openaiwire.ChatLogprobs{Content: lps},
						ChoiceEnd: openaiwire.ChoiceEnd{FinishReason: "length", TokenIDs: ids}}}})
				return
			}
			tl := make([]float64, out)
			toks := make([]string, out)
			for i := range tl {
				tl[i], toks[i] = -0.5, "a"
			}
			json.NewEncoder(w).Encode(openaiwire.CompletionResponse{ID: "c", Object: "text_completion", Created: 1, Model: "m", Usage: usage,
				Choices: []openaiwire.CompletionChoice{{Text: &text, Logprobs: &openaiwire.CompletionLogprobs{Tokens: toks, TokenLogprobs: tl},
					ChoiceEnd: openaiwire.ChoiceEnd{FinishReason: "length", TokenIDs: ids}, PromptTokenIDs: req.Prompt}}})
		}
	}
	mux.HandleFunc("POST /v1/chat/completions", gen(true))
	mux.HandleFunc("POST /v1/completions", gen(false))
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (s *strictServer) maxTokensSent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, m := range s.asked {
		if m == nil {
			out = append(out, "none")
		} else {
			out = append(out, fmt.Sprint(*m))
		}
	}
	return out
}

func words(n int) string { return strings.TrimSpace(strings.Repeat("w ", n)) }

// max_tokens is fitted to the context /v1/models reports: the reply takes
// what the prompt leaves and ends "length"; a prompt that cannot fit ends
// in sampler.ErrPromptTooLong.
func TestMaxTokensFitTheServersContext(t *testing.T) {
	cases := []struct {
		name      string
		req       sampler.Request
		maxTokens int
		wantReply int      // completion tokens; -1: ErrPromptTooLong
		wantSent  []string // max_tokens of each request
	}{
		{"chat, max_tokens fills the context alone", chatReq(words(20)), 512, 128 - 23, []string{"none"}},
		{"chat fits", chatReq(words(20)), 64, 64, []string{"64"}},
		{"chat, prompt + max_tokens too long", chatReq(words(80)), 64, 128 - 83, []string{"64", "none"}},
		{"chat prompt longer than the context", chatReq(words(200)), 512, -1, []string{"none"}},
		{"chat prompt too long after a refusal", chatReq(words(200)), 64, -1, []string{"64", "none"}},
		{"token prompt capped", sampler.Request{PromptIDs: make([]int, 100)}, 512, 28, []string{"28"}},
		{"token prompt fits", sampler.Request{PromptIDs: make([]int, 100)}, 16, 16, []string{"16"}},
		{"token prompt, up to the context", sampler.Request{PromptIDs: make([]int, 100)}, 0, 28, []string{"28"}},
		{"token prompt longer than the context", sampler.Request{PromptIDs: make([]int, 128)}, 16, -1, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStrictServer(t, 128, "")
			c := newTestClient(t, Options{Endpoints: []string{s.URL}, Model: "m"})
			if err := c.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			req := tc.req
			req.Params = greedy()
			req.Params.MaxTokens = tc.maxTokens
			resp, err := c.Sample(context.Background(), req)
			switch {
			case tc.wantReply < 0 && !errors.Is(err, sampler.ErrPromptTooLong):
				t.Fatalf("error %v, want one wrapping ErrPromptTooLong", err)
			case tc.wantReply >= 0 && err != nil:
				t.Fatal(err)
			case tc.wantReply >= 0 && (len(resp.CompletionIDs) != tc.wantReply || resp.FinishReason != "length"):
				t.Fatalf("%d tokens ending %q, want %d ending length", len(resp.CompletionIDs), resp.FinishReason, tc.wantReply)
			}
			if got := s.maxTokensSent(); strings.Join(got, ",") != strings.Join(tc.wantSent, ",") {
				t.Errorf("max_tokens sent %v, want %v", got, tc.wantSent)
			}
			st := c.Stats()
			if tc.wantReply < 0 && (st.Failures != 1 || st.Refused != 1) {
				t.Errorf("stats %+v: a prompt that cannot fit is one failed, refused call", st)
			}
			if tc.wantReply >= 0 && (st.Failures != 0 || st.Retries != 0) {
				t.Errorf("stats %+v: a fitted request is neither failed nor retried", st)
			}
		})
	}
}

// Without a context from /v1/models the client sends max_tokens as asked
// (today's behaviour) and says why in Contexts, whatever /v1/models held.
func TestUnknownContextFallsBack(t *testing.T) {
	for _, tc := range []struct{ name, models, why string }{
		{"missing", "404", "no /v1/models"},
		{"malformed", `{"data": [`, "not the list of models"},
		{"not a list", `{"object":"list"}`, "not the list of models"},
		{"no context", `{"object":"list","data":[{"id":"m","object":"model"}]}`, `no max_model_len for "m"`},
		{"context null", `{"object":"list","data":[{"id":"m","max_model_len":null}]}`, "no max_model_len"},
		{"context not a number", `{"object":"list","data":[{"id":"m","max_model_len":"128k"}]}`, "no max_model_len"},
		{"context negative", `{"object":"list","data":[{"id":"m","max_model_len":-5}]}`, "no max_model_len"},
		{"context fractional", `{"object":"list","data":[{"id":"m","max_model_len":1.5}]}`, "no max_model_len"},
		{"other entries odd", `{"object":"list","data":[7,{"id":"m","max_model_len":0}]}`, "no max_model_len"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStrictServer(t, 128, tc.models)
			c := newTestClient(t, Options{Endpoints: []string{s.URL}, Model: "m", APIKey: "sk-secret-key"})
			if err := c.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			ctxs := c.Contexts()
			if len(ctxs) != 1 || ctxs[0].MaxModelLen != 0 || !strings.Contains(ctxs[0].Unknown, tc.why) {
				t.Fatalf("contexts %+v, want unknown because %q", ctxs, tc.why)
			}
			notes := ContextNotes(ctxs, ContextBudget{MaxPrompt: 2048, MaxResponse: 64, PromptKey: "data.max_prompt_length", ResponseKey: "data.max_response_length"})
			if len(notes) != 1 || !strings.Contains(notes[0], "context of "+s.URL) || !strings.Contains(notes[0], "unknown") || strings.Contains(notes[0], "sk-secret") {
				t.Fatalf("notes %q, want one line saying the context is unknown", notes)
			}
			req := chatReq(words(10))
			req.Params.MaxTokens = 64
			if _, err := c.Sample(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if got := s.maxTokensSent(); len(got) != 1 || got[0] != "64" {
				t.Fatalf("max_tokens sent %v, want [64] as asked", got)
			}
		})
	}
}

func TestContextNotes(t *testing.T) {
	b := ContextBudget{MaxPrompt: 2048, MaxResponse: 512, PromptKey: "data.max_prompt_length", ResponseKey: "data.max_response_length"}
	notes := ContextNotes([]EndpointContext{{URL: "http://a:1", MaxModelLen: 128}, {URL: "http://b:2", MaxModelLen: 128}, {URL: "http://c:3", MaxModelLen: 32768}}, b)
	if len(notes) != 1 {
		t.Fatalf("notes %q, want one line for the two small endpoints", notes)
	}
	for _, want := range []string{"http://a:1, http://b:2 serve a context of 128 tokens", "data.max_prompt_length (2048)", "data.max_response_length (512)"} {
		if !strings.Contains(notes[0], want) {
			t.Errorf("note %q lacks %q", notes[0], want)
		}
	}
	if notes := ContextNotes([]EndpointContext{{URL: "http://c:3", MaxModelLen: 4096}}, b); len(notes) != 0 {
		t.Errorf("notes %q for a context that fits", notes)
	}
}

// FuzzReadModels: whatever /v1/models holds, reading it never panics and
// gives exactly one of a positive context, a reason it is unknown, or
// the model missing.
func FuzzReadModels(f *testing.F) {
	for _, s := range []string{`{"object":"list","data":[{"id":"m","max_model_len":128}]}`, `{"data":[{"id":"m"}]}`, `{"data":[]}`, `{"data":[1,{"id":"x"}]}`, `[`, `{"data":[{"id":"m","max_model_len":1e400}]}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n, why, ids := readModels(body, "m")
		switch {
		case n < 0, n > 0 && (why != "" || ids != nil), why != "" && ids != nil:
			t.Fatalf("readModels = %d, %q, %v", n, why, ids)
		}
	})
}

// Without a context, a token-id prompt asking for "up to the context"
// (max_tokens 0) is refused before it is sent: the completions API would
// read the absent max_tokens as 16.
func TestUnknownContextTokenPromptNeedsMaxTokens(t *testing.T) {
	s := newStrictServer(t, 128, "404")
	c := newTestClient(t, Options{Endpoints: []string{s.URL}, Model: "m"})
	if err := c.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := sampler.Request{PromptIDs: make([]int, 10), Params: greedy()}
	req.Params.MaxTokens = 0
	_, err := c.Sample(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "set max_tokens") || errors.Is(err, sampler.ErrPromptTooLong) {
		t.Fatalf("error %v, want one asking for max_tokens", err)
	}
	if got := s.maxTokensSent(); len(got) != 0 {
		t.Fatalf("sent %v, want nothing sent", got)
	}
	req.Params.MaxTokens = 8
	if _, err := c.Sample(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}
