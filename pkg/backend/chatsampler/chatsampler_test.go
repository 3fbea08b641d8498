package chatsampler

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/tokenizer"
)

// qwen3Dir is the real Qwen3 tokenizer that scripts/fetch-tokenizers.sh
// caches; missing files skip the test, except in CI.
func qwen3Dir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repotest.Root(t), ".cache", "tokenizers", "qwen3")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tokenizer files missing: run scripts/fetch-tokenizers.sh")
		}
		t.Skip("tokenizer files missing in .cache/tokenizers/qwen3: run scripts/fetch-tokenizers.sh")
	}
	return dir
}

var (
	qwenOnce sync.Once
	qwenTok  *tokenizer.Tokenizer
	qwenErr  error
)

func qwen3(t *testing.T) *tokenizer.Tokenizer {
	dir := qwen3Dir(t)
	qwenOnce.Do(func() { qwenTok, qwenErr = tokenizer.Load(dir) })
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenTok
}

// scripted is a TokenSampler that returns fixed tokens and records the
// requests.
type scripted struct {
	name   string
	tokens []int
	reason string
	mu     sync.Mutex
	reqs   []backend.SampleRequest
}

func (s *scripted) Name() string { return s.name }
func (s *scripted) Version() int { return 1 }
func (s *scripted) Sample(_ context.Context, req backend.SampleRequest) (backend.SampleResult, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	lps := make([]float64, len(s.tokens))
	for i := range lps {
		lps[i] = -0.25 * float64(i+1)
	}
	return backend.SampleResult{Sequences: []backend.SampledSequence{{Tokens: s.tokens, Logprobs: lps, StopReason: s.reason}}}, nil
}

const (
	imEnd   = 151645
	imStart = 151644
)

func reply(tok *tokenizer.Tokenizer, text string, stop bool) *scripted {
	ids := tok.Encode(text, false)
	reason := backend.StopReasonLength
	if stop {
		ids = append(ids, imEnd)
		reason = backend.StopReasonStop
	}
	return &scripted{name: "rllm-v3", tokens: ids, reason: reason}
}

var user = episode.Message{Role: "user", Content: "What is 2+2?"}

func TestChatPromptAndExactIDs(t *testing.T) {
	tok := qwen3(t)
	snap := reply(tok, "The answer is 4.", true)
	cs, err := New(snap, tok, Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.Sample(context.Background(), sampler.Request{Messages: []episode.Message{user}, Params: sampler.Params{MaxTokens: 32, Temperature: 1}})
	if err != nil {
		t.Fatal(err)
	}
	wantPrompt := tok.Encode("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", false)
	if !slices.Equal(res.PromptIDs, wantPrompt) || res.PromptIDs[0] != imStart {
		t.Errorf("prompt ids %v; want %v", res.PromptIDs, wantPrompt)
	}
	req := snap.reqs[0]
	if !slices.Equal(req.Prompt, wantPrompt) || !slices.Equal(req.Params.StopTokenIDs, []int{imEnd}) || len(req.Params.Stop) != 0 || req.Params.MaxTokens != 32 || req.NumSamples != 1 {
		t.Errorf("sent %+v", req)
	}
	if !slices.Equal(res.CompletionIDs, snap.tokens) || len(res.Logprobs) != len(snap.tokens) || res.Logprobs[1] != -0.5 {
		t.Errorf("completion ids %v logprobs %v; want the sampler's unchanged", res.CompletionIDs, res.Logprobs)
	}
	if res.Text != "The answer is 4." || res.FinishReason != "stop" || res.StopReason != "" || res.Model != "rllm-v3" {
		t.Errorf("response %+v", res)
	}
}

func TestTemplateKwargsAndTools(t *testing.T) {
	tok := qwen3(t)
	snap := reply(tok, "ok", true)
	cs, err := New(snap, tok, Options{ChatTemplateKwargs: map[string]any{"enable_thinking": true}})
	if err != nil {
		t.Fatal(err)
	}
	tool := sampler.Tool{Type: "function", Function: sampler.ToolFunction{Name: "get_weather", Description: "Get the weather",
		Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}}}`)}}
	_, err = cs.Sample(context.Background(), sampler.Request{Messages: []episode.Message{user}, Tools: []sampler.Tool{tool},
		ChatTemplateKwargs: map[string]any{"enable_thinking": false}, Params: sampler.Params{MaxTokens: 8}})
	if err != nil {
		t.Fatal(err)
	}
	text, err := tok.Decode(snap.reqs[0].Prompt)
	if err != nil {
		t.Fatal(err)
	}
	// Counting renders the same prompt (a gateway's count_tokens).
	n, err := sampler.CountPromptTokens(context.Background(), cs, sampler.Request{Messages: []episode.Message{user}, Tools: []sampler.Tool{tool},
		ChatTemplateKwargs: map[string]any{"enable_thinking": false}})
	if err != nil || n != len(snap.reqs[0].Prompt) {
		t.Errorf("counted %d (%v), sampled a prompt of %d", n, err, len(snap.reqs[0].Prompt))
	}
	for _, want := range []string{"# Tools", `"name": "get_weather"`, "<|im_start|>assistant\n<think>\n\n</think>\n\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("prompt lacks %q:\n%s", want, text)
		}
	}
}

func TestToolCallsStopStringsLengthAndSwap(t *testing.T) {
	tok := qwen3(t)
	ctx := context.Background()
	call := reply(tok, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", true)
	cs, err := New(call, tok, Options{ParseToolCalls: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.Sample(ctx, sampler.Request{PromptIDs: []int{1, 2, 3}, Params: sampler.Params{MaxTokens: 64}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.ToolCalls) != 1 || res.ToolCalls[0].Function.Name != "get_weather" || res.ToolCalls[0].Function.Arguments != `{"city": "Paris"}` ||
		res.Text != "Let me check." || res.FinishReason != "tool_calls" || !slices.Equal(res.PromptIDs, []int{1, 2, 3}) {
		t.Errorf("tool call response %+v", res)
	}

	stop := &scripted{name: "rllm-v4", tokens: tok.Encode("abc###", false), reason: backend.StopReasonStop}
	cs.Swap(stop)
	res, err = cs.Sample(ctx, sampler.Request{PromptIDs: []int{1}, Params: sampler.Params{MaxTokens: 8, Stop: []string{"#", "###"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "abc" || res.StopReason != "###" || res.Model != "rllm-v4" {
		t.Errorf("stop string response %+v", res)
	}
	if sent := stop.reqs[0].Params; len(sent.StopTokenIDs) != 0 || !slices.Contains(sent.Stop, "<|im_end|>") || !slices.Contains(sent.Stop, "###") {
		t.Errorf("stop strings sent as %+v; want strings only, the eos as its text", sent)
	}

	long := reply(tok, "and so on", false)
	cs.Swap(long)
	res, err = cs.Sample(ctx, sampler.Request{PromptIDs: []int{1}, Params: sampler.Params{MaxTokens: 3}})
	if err != nil || res.Text != "and so on" || res.FinishReason != "length" {
		t.Errorf("length response %+v, %v", res, err)
	}

	cs.Swap(&scripted{name: "bad", tokens: []int{1 << 30}, reason: backend.StopReasonLength})
	if _, err := cs.Sample(ctx, sampler.Request{PromptIDs: []int{1}}); err == nil || !strings.Contains(err.Error(), "rollout.tokenizer") {
		t.Errorf("unknown token id: %v", err)
	}
	if _, err := cs.Sample(ctx, sampler.Request{PromptIDs: []int{1}, Messages: []episode.Message{user}}); err == nil {
		t.Error("both messages and prompt ids accepted")
	}
}

func TestLoadTokenizerFromHFCache(t *testing.T) {
	src := qwen3Dir(t)
	hub := t.TempDir()
	snap := filepath.Join(hub, "models--Qwen--Qwen3-8B", "snapshots", "abc123")
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(snap, f)); err != nil {
			t.Fatal(err)
		}
	}
	env := func(k string) string {
		if k == "HF_HUB_CACHE" {
			return hub
		}
		return ""
	}
	tok, err := LoadTokenizer("Qwen/Qwen3-8B", env)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Special().EOS != imEnd {
		t.Errorf("eos %d", tok.Special().EOS)
	}
	if _, err := LoadTokenizer("Qwen/Qwen3-32B", env); err == nil || !strings.Contains(err.Error(), "rollout.tokenizer") {
		t.Errorf("a model not in the cache: %v", err)
	}
}
