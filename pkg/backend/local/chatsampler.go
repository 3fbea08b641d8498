package local

import (
	"context"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/toolcall"
)

// ChatSampler lets workflows call the embedded policy through
// sampler.Sampler: chats are rendered with the ChatML template (tools
// and tool calls in the Hermes format: Tokenizer.RenderChat), prompt ids
// pass through, and the reply comes back as text plus the exact sampled
// ids and logprobs. When the request offers tools, the reply's
// <tool_call> blocks come back as ToolCalls, as vLLM's hermes parser
// returns them. A trainer swaps in each newly published snapshot; a
// call in flight keeps the snapshot it started with.
type ChatSampler struct {
	// Snapshot is the weights new calls sample from (Swap, Current).
	backend.Snapshot
}

var _ sampler.Sampler = (*ChatSampler)(nil)

// NewChatSampler samples from s until Swap replaces it.
func NewChatSampler(s backend.TokenSampler) *ChatSampler {
	c := &ChatSampler{}
	c.Swap(s)
	return c
}

// Sample produces one completion.
func (c *ChatSampler) Sample(ctx context.Context, req sampler.Request) (sampler.Response, error) {
	snap := c.Current()
	tok := Tokenizer{}
	var prompt []int
	switch {
	case len(req.Messages) > 0 && len(req.PromptIDs) > 0:
		return sampler.Response{}, inputErrorf("a sampler request sets both messages and prompt_ids; set exactly one")
	case len(req.Messages) > 0:
		prompt = tok.RenderChat(req.Messages, req.Tools, true)
	default:
		prompt = req.PromptIDs
	}
	res, err := snap.Sample(ctx, backend.SampleRequest{Prompt: prompt, NumSamples: 1, Params: TokenParams(req.Params)})
	if err != nil {
		return sampler.Response{}, err
	}
	seq := res.Sequences[0]
	text, err := ReplyText(seq)
	if err != nil {
		return sampler.Response{}, err
	}
	out := sampler.Response{
		Text:          text,
		PromptIDs:     prompt,
		CompletionIDs: seq.Tokens,
		Logprobs:      seq.Logprobs,
		FinishReason:  seq.StopReason,
		StopReason:    seq.MatchedStop,
		Model:         snap.Name(),
		WeightVersion: strconv.Itoa(snap.Version()),
	}
	if len(req.Tools) > 0 {
		out.Text, out.ToolCalls = toolcall.Strip(text, "call_")
		if len(out.ToolCalls) > 0 && out.FinishReason == backend.StopReasonStop {
			out.FinishReason = "tool_calls"
		}
	}
	return out, nil
}

// CountPromptTokens is the length of the prompt Sample would send
// (sampler.Counter).
func (c *ChatSampler) CountPromptTokens(_ context.Context, req sampler.Request) (int, error) {
	if len(req.Messages) > 0 {
		return len(Tokenizer{}.RenderChat(req.Messages, req.Tools, true)), nil
	}
	return len(req.PromptIDs), nil
}

// TokenParams maps OpenAI-style sampling settings onto the token sampler's
// (top_k -1 means off in both).
func TokenParams(p sampler.Params) backend.SamplingParams {
	return backend.SamplingParams{
		MaxTokens: p.MaxTokens, Temperature: p.Temperature, TopP: p.TopP, TopK: p.TopK,
		Stop: p.Stop, StopTokenIDs: p.StopTokenIDs, Seed: p.Seed,
	}
}

// ReplyText is the text of a sampled sequence as vLLM returns it: special
// tokens skipped and a matched stop string cut off.
func ReplyText(seq backend.SampledSequence) (string, error) {
	text, err := Tokenizer{}.Decode(seq.Tokens, true)
	if err != nil {
		return "", err
	}
	if seq.MatchedStop != "" {
		text = strings.TrimSuffix(text, seq.MatchedStop)
	}
	return text, nil
}

// ChatSampler samples from snap with the ChatML template and the byte
// tokenizer (backend.TrainingBackend).
func (b *Backend) ChatSampler(snap backend.TokenSampler) sampler.Sampler { return NewChatSampler(snap) }

// Codec is the byte tokenizer (backend.TrainingBackend).
func (b *Backend) Codec() backend.Codec { return Tokenizer{} }
