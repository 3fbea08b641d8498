// Package gatewaytest is a deterministic chat model for tests of the
// gateway and of agent programs: a byte tokenizer and a fixed chat
// template under which a later turn's prompt extends an earlier turn's
// prompt plus reply token for token, as real templates do when they keep
// history verbatim.
package gatewaytest

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// Reply is what the model answers.
type Reply struct {
	Text         string
	Reasoning    string
	ToolCalls    []episode.ToolCall
	FinishReason string
	Err          error
}

// Sampler renders chats as "<|role|>body\n" and replies with Reply(req)
// (default: "ok"). Safe for concurrent use.
type Sampler struct {
	Reply func(req sampler.Request) Reply
	// Delay is waited before each reply (honours ctx).
	Delay   time.Duration
	Version string
	calls   atomic.Int64
}

// Calls is how many times Sample ran.
func (s *Sampler) Calls() int { return int(s.calls.Load()) }

// Body is an assistant turn's text as the template writes it: its
// reasoning, its text, then its tool calls.
func Body(reasoning, text string, calls []episode.ToolCall) string {
	var b strings.Builder
	if reasoning != "" {
		b.WriteString("<think>" + reasoning + "</think>")
	}
	b.WriteString(text)
	for _, c := range calls {
		b.WriteString("<tool_call>" + c.Function.Name + " " + c.Function.Arguments + "</tool_call>")
	}
	return b.String()
}

// Render is the prompt of a chat: every message, then the header of the
// assistant's reply.
func Render(msgs []episode.Message, tools []sampler.Tool) []int {
	var b strings.Builder
	if len(tools) > 0 {
		b.WriteString("<|tools|>")
		for _, t := range tools {
			b.WriteString(t.Function.Name + ";")
		}
		b.WriteString("\n")
	}
	for _, m := range msgs {
		body := m.Content
		if m.Role == "assistant" {
			body = Body(m.Reasoning, m.Content, m.ToolCalls)
		}
		b.WriteString("<|" + m.Role + "|>" + body + "\n")
	}
	b.WriteString("<|assistant|>")
	return Tokens(b.String())
}

// Tokens is the byte tokenizer.
func Tokens(s string) []int {
	ids := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = int(s[i])
	}
	return ids
}

// CountPromptTokens is the length of the prompt Sample would render
// (sampler.Counter).
func (s *Sampler) CountPromptTokens(_ context.Context, req sampler.Request) (int, error) {
	if req.PromptIDs != nil {
		return len(req.PromptIDs), nil
	}
	return len(Render(req.Messages, req.Tools)), nil
}

// Sample answers one call.
func (s *Sampler) Sample(ctx context.Context, req sampler.Request) (sampler.Response, error) {
	s.calls.Add(1)
	if s.Delay > 0 {
		select {
		case <-time.After(s.Delay):
		case <-ctx.Done():
			return sampler.Response{}, ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		return sampler.Response{}, err
	}
	r := Reply{Text: "ok"}
	if s.Reply != nil {
		r = s.Reply(req)
	}
	if r.Err != nil {
		return sampler.Response{}, r.Err
	}
	prompt := req.PromptIDs
	if prompt == nil {
		prompt = Render(req.Messages, req.Tools)
	}
	ids := Tokens(Body(r.Reasoning, r.Text, r.ToolCalls) + "\n")
	lps := make([]float64, len(ids))
	for i := range lps {
		lps[i] = -float64(i%7+1) / 8
	}
	finish := r.FinishReason
	if finish == "" {
		finish = "stop"
		if len(r.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	v := s.Version
	if v == "" {
		v = "7"
	}
	return sampler.Response{Text: r.Text, Reasoning: r.Reasoning, ToolCalls: r.ToolCalls, PromptIDs: prompt,
		CompletionIDs: ids, Logprobs: lps, FinishReason: finish, Model: "fake", WeightVersion: v}, nil
}
