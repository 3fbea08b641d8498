// Package samplertest provides a scripted Sampler for tests of workflows
// and engines: it replays fixed replies and records every request.
package samplertest

import (
	"context"
	"fmt"
	"sync"

	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// Reply is one scripted completion. FinishReason defaults to "stop"; Err,
// when set, is returned instead of a response.
type Reply struct {
	Text         string
	Reasoning    string
	FinishReason string
	Err          error
}

// Scripted returns its replies in order, one per Sample call, and fails
// once they run out. Token ids are the bytes of the text (prompt: of every
// message's content), logprobs a constant -0.5, so tests can check the
// bookkeeping without a tokenizer. Safe for concurrent use.
type Scripted struct {
	mu       sync.Mutex
	replies  []Reply
	next     int
	Requests []sampler.Request
}

// New returns a sampler that replays replies.
func New(replies ...Reply) *Scripted { return &Scripted{replies: replies} }

// Texts is New for replies that are plain text.
func Texts(texts ...string) *Scripted {
	r := make([]Reply, len(texts))
	for i, t := range texts {
		r[i] = Reply{Text: t}
	}
	return New(r...)
}

// Sample returns the next scripted reply.
func (s *Scripted) Sample(ctx context.Context, req sampler.Request) (sampler.Response, error) {
	if err := ctx.Err(); err != nil {
		return sampler.Response{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Requests = append(s.Requests, req)
	if s.next >= len(s.replies) {
		return sampler.Response{}, fmt.Errorf("scripted sampler: no reply left for call %d", s.next+1)
	}
	r := s.replies[s.next]
	s.next++
	if r.Err != nil {
		return sampler.Response{}, r.Err
	}
	finish := r.FinishReason
	if finish == "" {
		finish = "stop"
	}
	var prompt []int
	for _, m := range req.Messages {
		prompt = append(prompt, Tokens(m.Content)...)
	}
	ids := Tokens(r.Text)
	lp := make([]float64, len(ids))
	for i := range lp {
		lp[i] = -0.5
	}
	return sampler.Response{
		Text: r.Text, Reasoning: r.Reasoning, PromptIDs: prompt,
		CompletionIDs: ids, Logprobs: lp, FinishReason: finish, Model: "scripted",
	}, nil
}

// Calls is how many times Sample was called.
func (s *Scripted) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.Requests)
}

// Tokens is the fake tokenizer: one id per byte.
func Tokens(text string) []int {
	ids := make([]int, len(text))
	for i := 0; i < len(text); i++ {
		ids[i] = int(text[i])
	}
	return ids
}
