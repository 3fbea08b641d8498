// Package sampler defines how a workflow asks a policy model for a reply
// without knowing which server is behind it: an OpenAI-compatible server
// (vLLM, SGLang), a Tinker sampler, or the embedded policy.
package sampler

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// ErrPromptTooLong is what a Sampler's error wraps (errors.Is) when the
// prompt leaves the model no room to reply. Workflows end such an episode
// with max_prompt_length_exceeded instead of an error, so it is neither
// retried nor counted as a failure.
var ErrPromptTooLong = errors.New("the prompt is longer than the model's context")

// Sampler produces one completion per call. Implementations are safe for
// concurrent use: the rollout engine calls them from many goroutines.
type Sampler interface {
	Sample(ctx context.Context, req Request) (Response, error)
}

// Request is either a chat (Messages, optionally Tools) or an exact
// token-id prompt (PromptIDs, used for multi-turn rollouts whose tokens
// must match what the model saw). Exactly one of Messages and PromptIDs is
// set.
type Request struct {
	Messages  []episode.Message `json:"messages,omitempty"`
	PromptIDs []int             `json:"prompt_ids,omitempty"`
	Tools     []Tool            `json:"tools,omitempty"`
	Params    Params            `json:"params"`
	// ChatTemplateKwargs are passed to the chat template, e.g.
	// {"enable_thinking": false}.
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs,omitempty"`
}

// Params are the sampling settings. Every field is always sent to the
// server (temperature 0 included) because omitted fields fall back to the
// model's generation config on vLLM.
type Params struct {
	Temperature  float64  `json:"temperature"`
	TopP         float64  `json:"top_p"`
	TopK         int      `json:"top_k"` // -1 disables
	MaxTokens    int      `json:"max_tokens"`
	Stop         []string `json:"stop,omitempty"`
	StopTokenIDs []int    `json:"stop_token_ids,omitempty"`
	Seed         *int64   `json:"seed,omitempty"`
}

// Tool is an OpenAI function tool: {"type":"function","function":{...}}.
type Tool struct {
	Type     string       `json:"type"`
	Function ToolFunction `json:"function"`
}

// ToolFunction describes a callable tool. Parameters is a JSON Schema kept
// as the raw JSON it came in (from a user file, an MCP server's
// inputSchema): chat templates print it with tojson, and a Go map would
// reorder its keys and so change the prompt's tokens.
type ToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Response is one completion with the exact tokens the model sampled.
type Response struct {
	Text      string             `json:"text"`
	Reasoning string             `json:"reasoning,omitempty"`
	ToolCalls []episode.ToolCall `json:"tool_calls,omitempty"`
	// PromptIDs are the token ids the server saw as the prompt (after
	// chat templating); CompletionIDs and Logprobs the sampled tokens and
	// their log-probabilities under the sampling policy, one per token.
	PromptIDs     []int     `json:"prompt_ids"`
	CompletionIDs []int     `json:"completion_ids"`
	Logprobs      []float64 `json:"logprobs"`
	// FinishReason is stop, length, tool_calls, abort or error.
	FinishReason string `json:"finish_reason"`
	// StopReason is the stop string or token id that matched, empty for
	// end-of-sequence.
	StopReason string `json:"stop_reason,omitempty"`
	// Model names the weights that produced the reply (e.g. "policy-v12"),
	// so a trainer can tell how stale a sample is; WeightVersion is the
	// server's weight version (SGLang's metadata.weight_version, the
	// trainer's step for the embedded policy).
	Model         string `json:"model,omitempty"`
	WeightVersion string `json:"weight_version,omitempty"`
}

// Counter is a Sampler that can count the tokens of a chat request's
// prompt without sampling: the prompt rendered and encoded exactly as
// Sample would (Anthropic's count_tokens).
type Counter interface {
	CountPromptTokens(ctx context.Context, req Request) (int, error)
}

// Wrapper is a Sampler that hands its calls on to another (a seeding or
// weight-swapping layer), so that what the inner sampler can do besides
// sampling stays reachable.
type Wrapper interface {
	Unwrap() Sampler
}

// ErrCannotCount is what CountPromptTokens returns when no sampler on the
// chain is a Counter.
var ErrCannotCount = errors.New("the sampler cannot count prompt tokens without sampling")

// CountPromptTokens counts req's prompt tokens with s, or with the first
// sampler s wraps that is a Counter.
func CountPromptTokens(ctx context.Context, s Sampler, req Request) (int, error) {
	for range 16 { // wrappers nest a few deep; a cycle must not spin
		if c, ok := s.(Counter); ok {
			return c.CountPromptTokens(ctx, req)
		}
		w, ok := s.(Wrapper)
		if !ok {
			break
		}
		s = w.Unwrap()
	}
	return 0, ErrCannotCount
}
