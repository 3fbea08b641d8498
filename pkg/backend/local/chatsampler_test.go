package local

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

func TestChatSampler(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	s1 := publish(t, b)
	cs := NewChatSampler(s1)
	msgs := []episode.Message{{Role: "user", Content: "2+2="}}
	resp, err := cs.Sample(ctx, sampler.Request{Messages: msgs, Params: sampler.Params{Temperature: 1, TopK: -1, MaxTokens: 5, Seed: seed(1)}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.PromptIDs, Tokenizer{}.ChatTemplate(msgs, true)) {
		t.Error("prompt ids are not the chat template's")
	}
	if n, err := sampler.CountPromptTokens(ctx, cs, sampler.Request{Messages: msgs}); err != nil || n != len(resp.PromptIDs) {
		t.Errorf("counted %d (%v), sampled a prompt of %d", n, err, len(resp.PromptIDs))
	}
	if _, err := cs.CountPromptTokens(ctx, sampler.Request{Messages: msgs, Tools: []sampler.Tool{{Type: "function"}}}); err == nil {
		t.Error("tools counted by the embedded policy")
	}
	if len(resp.CompletionIDs) != len(resp.Logprobs) || len(resp.CompletionIDs) == 0 || resp.Model != "local-v1" {
		t.Fatalf("response %+v", resp)
	}
	if want, _ := (Tokenizer{}).Decode(resp.CompletionIDs, true); resp.Text != want {
		t.Errorf("text %q, decoded ids %q", resp.Text, want)
	}
	if resp.FinishReason != "stop" && resp.FinishReason != "length" {
		t.Errorf("finish reason %q", resp.FinishReason)
	}
	// The same request by prompt ids gives the same reply.
	again, err := cs.Sample(ctx, sampler.Request{PromptIDs: resp.PromptIDs, Params: sampler.Params{Temperature: 1, TopK: -1, MaxTokens: 5, Seed: seed(1)}})
	if err != nil || !slices.Equal(again.CompletionIDs, resp.CompletionIDs) {
		t.Fatalf("prompt-id request: %v, %v vs %v", err, again.CompletionIDs, resp.CompletionIDs)
	}
	cs.Swap(publish(t, b))
	if cs.Current().Name() != "local-v2" {
		t.Error("Swap did not take effect")
	}
	if _, err := cs.Sample(ctx, sampler.Request{Messages: msgs, Tools: []sampler.Tool{{Type: "function"}}}); err == nil || !strings.Contains(err.Error(), "cannot call tools") {
		t.Errorf("tools: %v", err)
	}
	if _, err := cs.Sample(ctx, sampler.Request{Messages: msgs, PromptIDs: []int{1}}); err == nil {
		t.Error("messages and prompt ids both accepted")
	}
}

func TestReplyTextCutsStopString(t *testing.T) {
	text, err := ReplyText(backendSeq([]int{'4', '2', '\n'}, "\n"))
	if err != nil || text != "42" {
		t.Fatalf("ReplyText = %q, %v", text, err)
	}
	text, _ = ReplyText(backendSeq([]int{'7', TokenImEnd}, ""))
	if text != "7" {
		t.Fatalf("ReplyText with im_end = %q", text)
	}
}

func backendSeq(tokens []int, stop string) backend.SampledSequence {
	return backend.SampledSequence{Tokens: tokens, MatchedStop: stop, StopReason: "stop"}
}
