package policy

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/usererr"

	_ "github.com/rllm-org/rllm-go/pkg/backend/local" // registers backend.name=local
)

func loadConfig(t *testing.T, args ...string) *config.Config {
	t.Helper()
	ld, err := config.Load(config.Sources{Args: args})
	if err != nil {
		t.Fatal(err)
	}
	return ld.Config
}

func serverArgs(url string) []string {
	return []string{"rollout.engine=openai", "rollout.endpoints=[" + url + "]", "rollout.model=fake-model",
		"rollout.retry.backoff_base_s=0.001", "rollout.retry.backoff_max_s=0.01"}
}

func TestUsesServer(t *testing.T) {
	cases := []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"rollout.engine=openai", "rollout.endpoints=[http://127.0.0.1:1]", "rollout.model=m"}, true},
		{[]string{"rollout.endpoints=[http://127.0.0.1:1]", "rollout.model=m"}, true},
	}
	for _, tc := range cases {
		if got := UsesServer(loadConfig(t, tc.args...)); got != tc.want {
			t.Errorf("UsesServer(%v) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// warnings collects what Open warns about.
type warnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnings) add(s string) {
	w.mu.Lock()
	w.lines = append(w.lines, s)
	w.mu.Unlock()
}

func TestOpenServer(t *testing.T) {
	down := httptest.NewServer(nil)
	downURL := down.URL
	down.Close()
	up := fakevllm.New(fakevllm.Config{Reply: func(fakevllm.ReplyInput) *fakevllm.Reply { return &fakevllm.Reply{Content: "2"} }})
	defer up.Close()
	small := fakevllm.New(fakevllm.Config{MaxModelLen: 8})
	defer small.Close()
	other := fakevllm.New(fakevllm.Config{Model: "other-model"})
	defer other.Close()
	cases := []struct {
		name, url string
		err, warn string
	}{
		{"up", up.URL, "", ""},
		{"context too small", small.URL, "", small.URL + " serves a context of 8 tokens, less than data.max_prompt_length (2048) + data.max_response_length (512)"},
		{"down", downURL, downURL + " is down", ""},
		{"wrong model", other.URL, `serves "other-model", not "fake-model"`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var w warnings
			p, err := Open(context.Background(), loadConfig(t, serverArgs(tc.url)...), Options{Warn: w.add})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if p.Kind != "openai" || p.Model != "fake-model" || p.Where != tc.url || p.Client == nil {
				t.Errorf("policy %+v", p)
			}
			if got, want := p.Describe(), "fake-model (openai: "+tc.url+")"; got != want {
				t.Errorf("Describe() = %q, want %q", got, want)
			}
			if tc.warn != "" && (len(w.lines) != 1 || !strings.Contains(w.lines[0], tc.warn)) {
				t.Errorf("warnings %q, want one containing %q", w.lines, tc.warn)
			}
			if tc.warn == "" && len(w.lines) != 0 {
				t.Errorf("warnings %q, want none", w.lines)
			}
		})
	}
}

func TestOpenLocal(t *testing.T) {
	c := loadConfig(t, "backend.local.d_model=16", "backend.local.heads=2", "backend.local.layers=1", "backend.local.context=64")
	p, err := Open(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Kind != "local" || p.Model != "local" || p.Where != "a fresh model sized by backend.local" || p.Client != nil {
		t.Errorf("policy %+v", p)
	}
	resp, err := p.Sampler.Sample(context.Background(), sampler.Request{Messages: []episode.Message{{Role: "user", Content: "1+1="}},
		Params: sampler.Params{Temperature: 0, TopP: 1, TopK: -1, MaxTokens: 2}})
	if err != nil || len(resp.CompletionIDs) == 0 {
		t.Errorf("sample %+v, %v: want token ids", resp, err)
	}

	// --text-only is for servers; the backend's sampler returns ids.
	if _, err := Open(context.Background(), c, Options{TextOnly: true}); err == nil || !usererr.Is(err) ||
		!strings.Contains(err.Error(), "--text-only applies to OpenAI-compatible servers") {
		t.Errorf("text-only locally: %v, want a usage error", err)
	}
}
