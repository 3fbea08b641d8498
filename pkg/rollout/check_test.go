package rollout

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// A plain OpenAI-compatible API has no /health: Check must accept its 404
// and still check /v1/models, while a 503 on /health stays "not ready".
func TestCheckWithoutHealthEndpoint(t *testing.T) {
	cases := []struct {
		name   string
		health int // 0: no /health route (404)
		model  string
		want   string // "" for success
	}{
		{"no /health", 0, "gpt-test", ""},
		{"no /health, wrong model", 0, "other", `serves "other", not "gpt-test"`},
		{"loading", http.StatusServiceUnavailable, "gpt-test", "/health answered 503"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			if tc.health != 0 {
				mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tc.health) })
			}
			mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
				w.Write([]byte(`{"object":"list","data":[{"id":"` + tc.model + `","object":"model"}]}`))
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			c, err := NewClient(Options{Endpoints: []string{srv.URL + "/v1"}, Model: "gpt-test"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = c.Check(context.Background())
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// Servers refuse prompts longer than their context with a 400 whose
// message says so; the client's error lets workflows recognise it.
func TestPromptTooLongIsRecognised(t *testing.T) {
	for _, tt := range []struct {
		status int
		msg    string
		want   bool
	}{
		{400, "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4990 in the messages, 10 in the completion).", true},
		{400, "The prompt (total length 9000) is too long to fit into the model (context length 8192).", true},
		{400, "The input (9000 tokens) is longer than the model's context length (8192 tokens).", true},
		{400, "temperature must be non-negative", false},
		{500, "maximum context length exceeded", false},
	} {
		err := error(&StatusError{Endpoint: "http://x", Path: "/v1/chat/completions", Status: tt.status, Message: tt.msg})
		wrapped := &RetriesExhaustedError{Attempts: 1, Err: err}
		if got := errors.Is(wrapped, sampler.ErrPromptTooLong); got != tt.want {
			t.Errorf("%d %q: errors.Is = %v, want %v", tt.status, tt.msg, got, tt.want)
		}
	}
}
