// Package openaiwire holds the wire shapes of the OpenAI-compatible routes
// of vLLM and SGLang that an RL rollout needs (completions, chat
// completions, logprobs, token ids, /v1/models, error bodies), shared by
// the client (pkg/rollout), the embedded server (pkg/backend/local/openai),
// the recording gateway (pkg/gateway) and the fake of the tests
// (internal/fakevllm), so that none of them can disagree with the others
// on a name. It imports only the episode and
// sampler vocabulary.
package openaiwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// The wire types below carry exactly the fields vLLM and SGLang define for
// their OpenAI-compatible routes (see the inference-servers reference).
// Sampling fields are never omitted: an omitted field falls back to the
// model's generation_config on vLLM, which silently changes the policy.

// Sampling is what a client sends to sample, on both routes. Sampling
// fields are never omitted (see above); max_tokens 0 is left out: up to
// the context on chat, 16 on completions (vLLM's defaults).
type Sampling struct {
	Temperature  float64  `json:"temperature"`
	TopP         float64  `json:"top_p"`
	TopK         int      `json:"top_k"`
	MaxTokens    int      `json:"max_tokens,omitempty"`
	Stop         []string `json:"stop,omitempty"`
	StopTokenIDs []int    `json:"stop_token_ids,omitempty"`
	Seed         *int64   `json:"seed,omitempty"`
	N            int      `json:"n"`
}

// ChatRequest is a POST /v1/chat/completions body.
type ChatRequest struct {
	Model    string            `json:"model"`
	Messages []episode.Message `json:"messages"`
	Sampling
	Logprobs               bool           `json:"logprobs"`
	TopLogprobs            int            `json:"top_logprobs,omitempty"`
	ReturnTokenIDs         bool           `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool           `json:"return_tokens_as_token_ids,omitempty"`
	ChatTemplateKwargs     map[string]any `json:"chat_template_kwargs,omitempty"`
	Tools                  []sampler.Tool `json:"tools,omitempty"`
	ToolChoice             any            `json:"tool_choice,omitempty"`
}

// CompletionRequest is a POST /v1/completions body.
type CompletionRequest struct {
	Model  string `json:"model"`
	Prompt Prompt `json:"prompt"`
	Sampling
	Logprobs               *int `json:"logprobs,omitempty"` // number of top logprobs; 0 still returns the sampled token's
	ReturnTokenIDs         bool `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids,omitempty"`
}

// StreamOptions are a streamed request's stream_options.
type StreamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// InputMessage is a chat message as a server reads it from a client:
// content stays raw (a string, null or a list of content parts) for the
// server to read as it can. ReasoningContent is older vLLM's and SGLang's
// name for reasoning. Shared by rllm serve and the gateway.
type InputMessage struct {
	Role             string             `json:"role"`
	Content          json.RawMessage    `json:"content"`
	Name             string             `json:"name"`
	ToolCalls        []episode.ToolCall `json:"tool_calls"`
	ToolCallID       string             `json:"tool_call_id"`
	Reasoning        string             `json:"reasoning"`
	ReasoningContent string             `json:"reasoning_content"`
}

// TokenizeRequest is vLLM's POST /tokenize body: a prompt or messages,
// each message read as an M by the server (rllm serve, the fake).
type TokenizeRequest[M any] struct {
	Model                string  `json:"model"`
	Prompt               *string `json:"prompt"`
	Messages             []M     `json:"messages"`
	AddGenerationPrompt  *bool   `json:"add_generation_prompt"`
	AddSpecialTokens     *bool   `json:"add_special_tokens"`
	ContinueFinalMessage bool    `json:"continue_final_message"`
	ReturnTokenStrs      bool    `json:"return_token_strs"`
}

// TokenizeChatRequest is what a client sends to vLLM's POST /tokenize to
// count a chat's prompt as the chat route would render it (the servers
// read TokenizeRequest).
type TokenizeChatRequest struct {
	Model               string            `json:"model"`
	Messages            []episode.Message `json:"messages"`
	Tools               []sampler.Tool    `json:"tools,omitempty"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	AddSpecialTokens    bool              `json:"add_special_tokens"`
	ChatTemplateKwargs  map[string]any    `json:"chat_template_kwargs,omitempty"`
}

// TokenizeResponse is vLLM's /tokenize answer.
type TokenizeResponse struct {
	Count       int   `json:"count"`
	MaxModelLen int   `json:"max_model_len"`
	Tokens      []int `json:"tokens"`
}

// SamplingFields are the parameters both generation routes take (OpenAI's
// and vLLM's extras) as a server decodes them: a pointer is nil when the
// field was left out, so the server can apply its own default. Shared by
// rllm serve (pkg/backend/local/openai) and the fake (internal/fakevllm);
// the client sends ChatRequest and CompletionRequest.
type SamplingFields struct {
	Model                  string             `json:"model"`
	MaxTokens              *int               `json:"max_tokens"`
	Temperature            *float64           `json:"temperature"`
	TopP                   *float64           `json:"top_p"`
	TopK                   *int               `json:"top_k"`
	MinP                   *float64           `json:"min_p"`
	N                      *int               `json:"n"`
	Seed                   *int64             `json:"seed"`
	Stop                   json.RawMessage    `json:"stop"`
	StopTokenIDs           []int              `json:"stop_token_ids"`
	Stream                 *bool              `json:"stream"`
	StreamOptions          *StreamOptions     `json:"stream_options"`
	LogitBias              map[string]float64 `json:"logit_bias"`
	MinTokens              *int               `json:"min_tokens"`
	IgnoreEOS              bool               `json:"ignore_eos"`
	SkipSpecialTokens      *bool              `json:"skip_special_tokens"`
	IncludeStopStrInOutput bool               `json:"include_stop_str_in_output"`
	ReturnTokenIDs         bool               `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool               `json:"return_tokens_as_token_ids"`
	TruncatePromptTokens   *int               `json:"truncate_prompt_tokens"`
	PromptLogprobs         *int               `json:"prompt_logprobs"`
	AllowedTokenIDs        []int              `json:"allowed_token_ids"`

	// Accepted by rllm serve only at their defaults.
	FrequencyPenalty  *float64 `json:"frequency_penalty"`
	PresencePenalty   *float64 `json:"presence_penalty"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	LengthPenalty     *float64 `json:"length_penalty"`
	BestOf            *int     `json:"best_of"`
	UseBeamSearch     bool     `json:"use_beam_search"`
	Priority          int      `json:"priority"`
	ResponseFormat    *struct {
		Type string `json:"type"`
	} `json:"response_format"`
}

// Prompt is a completions prompt: token ids when IDs is non-nil, else text.
type Prompt struct {
	Text string
	IDs  []int
}

// MarshalJSON writes the ids as a JSON list or the text as a string.
func (p Prompt) MarshalJSON() ([]byte, error) {
	if p.IDs != nil {
		return json.Marshal(p.IDs)
	}
	return json.Marshal(p.Text)
}

// UnmarshalJSON reads either form.
func (p *Prompt) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '[' {
		p.Text = ""
		return json.Unmarshal(b, &p.IDs)
	}
	p.IDs = nil
	return json.Unmarshal(b, &p.Text)
}

// Usage is the token accounting of a response.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ChatResponse is a /v1/chat/completions answer.
type ChatResponse struct {
	ID             string       `json:"id"`
	Object         string       `json:"object"`
	Created        int64        `json:"created"`
	Model          string       `json:"model"`
	Choices        []ChatChoice `json:"choices"`
	Usage          Usage        `json:"usage"`
	PromptTokenIDs []int        `json:"prompt_token_ids"`
	Metadata       *Metadata    `json:"metadata,omitempty"`
}

// Metadata is SGLang's response metadata (rllm serve sends it too):
// weight_version names the weights that answered.
type Metadata struct {
	WeightVersion string `json:"weight_version,omitempty"`
}

// Version is the weight version, "" when the server sent none.
func (m *Metadata) Version() string {
	if m == nil {
		return ""
	}
	return m.WeightVersion
}

// ChatChoice is one choice of a chat answer.
type ChatChoice struct {
	Index    int           `json:"index"`
	Message  *ChatMessage  `json:"message"`
	Logprobs *ChatLogprobs `json:"logprobs"`
	ChoiceEnd
}

// ChoiceEnd is how a choice of either route ended, and the token ids it
// sampled. StopReason is vLLM's stop_reason, MatchedStop SGLang's name for
// the same thing.
type ChoiceEnd struct {
	FinishReason string     `json:"finish_reason"`
	StopReason   StopReason `json:"stop_reason"`
	MatchedStop  StopReason `json:"matched_stop"`
	TokenIDs     []int      `json:"token_ids"`
}

// Stop is the stop string or token id that matched, whichever of the two
// names the server used ("" for end-of-sequence).
func (e *ChoiceEnd) Stop() string {
	if e.StopReason != "" {
		return string(e.StopReason)
	}
	return string(e.MatchedStop)
}

// ChatMessage is the assistant message of a choice. Reasoning is vLLM's
// field (2026), ReasoningContent older vLLM's and SGLang's.
type ChatMessage struct {
	Role             string             `json:"role"`
	Content          *string            `json:"content"`
	Reasoning        *string            `json:"reasoning"`
	ReasoningContent *string            `json:"reasoning_content"`
	ToolCalls        []episode.ToolCall `json:"tool_calls"`
}

// ChatLogprobs is the chat form of logprobs.
type ChatLogprobs struct {
	Content []TokenLogprob `json:"content"`
}

// TokenLogprob is one sampled token with its logprob and alternatives.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one alternative token.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// CompletionResponse is a /v1/completions answer.
type CompletionResponse struct {
	ID       string             `json:"id"`
	Object   string             `json:"object"`
	Created  int64              `json:"created"`
	Model    string             `json:"model"`
	Choices  []CompletionChoice `json:"choices"`
	Usage    Usage              `json:"usage"`
	Metadata *Metadata          `json:"metadata,omitempty"`
}

// CompletionChoice is one choice of a completions answer; vLLM puts the
// prompt ids on each choice here.
type CompletionChoice struct {
	Index    int                 `json:"index"`
	Text     *string             `json:"text"`
	Logprobs *CompletionLogprobs `json:"logprobs"`
	ChoiceEnd
	PromptTokenIDs []int `json:"prompt_token_ids"`
}

// CompletionLogprobs is the completions (legacy OpenAI) form of logprobs.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// StopReason is the stop string or token id that ended a choice, as text
// ("" for end-of-sequence). Servers send a string, a number or null.
type StopReason string

// UnmarshalJSON accepts a string, an integer or null.
func (s *StopReason) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*s = ""
	case b[0] == '"':
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = StopReason(v)
	default:
		var n json.Number
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("stop reason must be a string, a token id or null, got %.40s", b)
		}
		*s = StopReason(n.String())
	}
	return nil
}

// Error is the error object of vLLM's error body. Servers differ on
// param and code (null, a string, a number), so both are any.
type Error struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    any    `json:"code"`
}

// ErrorResponse is vLLM's error body: {"error": {message, type, param, code}}.
type ErrorResponse struct {
	Error Error `json:"error"`
}

// FlatErrorResponse is the older flat form: {"object": "error", message, ...}.
type FlatErrorResponse struct {
	Object string `json:"object"` // "error"
	Error
}

// ErrorMessage pulls the server's message out of an error body, whatever
// its shape (nested, flat, a bare string, FastAPI's detail); it falls back
// to the start of the body.
func ErrorMessage(body []byte) (msg, typ string) {
	var nested struct {
		Error json.RawMessage `json:"error"`
	}
	var flat Error
	if json.Unmarshal(body, &nested) == nil && len(nested.Error) > 0 {
		var e Error
		if json.Unmarshal(nested.Error, &e) == nil && e.Message != "" {
			return e.Message, e.Type
		}
		var s string
		if json.Unmarshal(nested.Error, &s) == nil && s != "" {
			return s, ""
		}
	}
	if json.Unmarshal(body, &flat) == nil && flat.Message != "" {
		return flat.Message, flat.Type
	}
	var detail struct {
		Detail string `json:"detail"` // FastAPI's default error shape
	}
	if json.Unmarshal(body, &detail) == nil && detail.Detail != "" {
		return detail.Detail, ""
	}
	t := strings.TrimSpace(string(body))
	if len(t) > 200 {
		t = t[:200] + "..."
	}
	return t, ""
}

// ModelList is a GET /v1/models answer.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}

// Model is one served model; MaxModelLen is its context in tokens.
type Model struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"` // "model"
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen int     `json:"max_model_len"`
	Permission  []any   `json:"permission"`
}

// NegInfLogprob is how vLLM sends a -inf logprob: JSON has no infinity.
const NegInfLogprob = -9999.0

// EncodeLogprob writes -inf (and anything below NegInfLogprob) as
// NegInfLogprob.
func EncodeLogprob(v float64) float64 {
	if v < NegInfLogprob {
		return NegInfLogprob
	}
	return v
}

// DecodeLogprob reads NegInfLogprob (or less) back as -inf.
func DecodeLogprob(v float64) float64 {
	if v <= NegInfLogprob {
		return math.Inf(-1)
	}
	return v
}

// TokenIDString is the "token_id:N" form of a logprob token that vLLM
// sends with return_tokens_as_token_ids (--return-tokens-as-token-ids).
func TokenIDString(id int) string { return "token_id:" + strconv.Itoa(id) }

// ParseTokenID reads the "token_id:N" form.
func ParseTokenID(tok string) (int, bool) {
	rest, ok := strings.CutPrefix(tok, "token_id:")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
