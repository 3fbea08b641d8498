package openai

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// vLLM's default max_tokens for /v1/completions.
const defaultCompletionTokens = 16

type completionRequest struct {
	samplingFields
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
}

type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type completionChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   string              `json:"finish_reason"`
	StopReason     any                 `json:"stop_reason"`
	TokenIDs       []int               `json:"token_ids,omitempty"`
	PromptTokenIDs []int               `json:"prompt_token_ids,omitempty"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if !decode(w, r, &req) || !s.checkModel(w, req.Model) {
		return
	}
	params, n, param, msg := req.params(defaultCompletionTokens)
	if msg != "" {
		writeError(w, http.StatusBadRequest, param, "%s", msg)
		return
	}
	if req.Echo {
		writeError(w, http.StatusBadRequest, "echo", "echo is not supported by the embedded policy server")
		return
	}
	if len(req.Prompt) == 0 {
		writeError(w, http.StatusBadRequest, "prompt", "prompt is required")
		return
	}
	prompts, _, msg := parsePrompts(req.Prompt)
	if msg != "" {
		writeError(w, http.StatusBadRequest, "prompt", "%s", msg)
		return
	}
	snap := s.snapshot()
	resp := map[string]any{"id": s.nextID("cmpl-"), "object": "text_completion", "created": time.Now().Unix(), "model": s.opts.ModelName}
	var choices []completionChoice
	var use usage
	for pi, prompt := range prompts {
		prompt, msg := s.fitPrompt(prompt, snap.Config().Context, req.TruncatePromptTokens)
		if msg != "" {
			writeError(w, http.StatusBadRequest, "prompt", "%s", msg)
			return
		}
		res, ok := s.sample(w, r, snap, prompt, n, params)
		if !ok {
			return
		}
		use.PromptTokens += len(prompt)
		for j, seq := range res.Sequences {
			text, _ := local.ReplyText(seq)
			c := completionChoice{Index: pi*n + j, Text: text, FinishReason: seq.StopReason, StopReason: stopReason(seq)}
			if req.ReturnTokenIDs {
				c.TokenIDs, c.PromptTokenIDs = nonNil(seq.Tokens), prompt
			}
			if req.Logprobs != nil {
				c.Logprobs = completionLogprobsOf(seq)
			}
			use.CompletionTokens += len(seq.Tokens)
			choices = append(choices, c)
		}
	}
	use.TotalTokens = use.PromptTokens + use.CompletionTokens
	resp["choices"], resp["usage"] = choices, use
	writeJSON(w, http.StatusOK, resp)
}

func completionLogprobsOf(seq backend.SampledSequence) *completionLogprobs {
	tok := local.Tokenizer{}
	lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	off := 0
	for i, id := range seq.Tokens {
		t := tok.TokenText(id)
		lp.Tokens = append(lp.Tokens, t)
		lp.TokenLogprobs = append(lp.TokenLogprobs, finite(seq.Logprobs[i]))
		lp.TopLogprobs = append(lp.TopLogprobs, map[string]float64{t: finite(seq.Logprobs[i])})
		lp.TextOffset = append(lp.TextOffset, off)
		if !tok.IsSpecial(id) {
			off += len(t)
		}
	}
	return lp
}

// finite sends −inf as −9999.0, as vLLM does.
func finite(x float64) float64 {
	if x < -9999 {
		return -9999
	}
	return x
}

// sample runs the snapshot; false means an error was written.
func (s *Server) sample(w http.ResponseWriter, r *http.Request, snap *local.Snapshot, prompt []int, n int, p backend.SamplingParams) (backend.SampleResult, bool) {
	res, err := snap.Sample(r.Context(), backend.SampleRequest{Prompt: prompt, NumSamples: n, Params: p})
	if err != nil {
		var ie *backend.InputError
		if errors.As(err, &ie) {
			writeError(w, http.StatusBadRequest, "", "%s", ie.Msg)
		} else {
			writeError(w, http.StatusInternalServerError, "", "sampling failed: %v", err)
		}
		return res, false
	}
	return res, true
}

type chatRequest struct {
	samplingFields
	Messages            []episode.Message `json:"messages"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Logprobs            bool              `json:"logprobs"`
	TopLogprobs         int               `json:"top_logprobs"`
	Tools               []json.RawMessage `json:"tools"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt"`
}

type chatLogprob struct {
	Token       string        `json:"token"`
	Logprob     float64       `json:"logprob"`
	Bytes       []int         `json:"bytes"`
	TopLogprobs []chatLogprob `json:"top_logprobs"`
}

type chatMessage struct {
	Role      string             `json:"role"`
	Content   string             `json:"content"`
	Reasoning *string            `json:"reasoning"`
	ToolCalls []episode.ToolCall `json:"tool_calls"`
}

type chatChoice struct {
	Index        int                       `json:"index"`
	Message      chatMessage               `json:"message"`
	Logprobs     *map[string][]chatLogprob `json:"logprobs"`
	FinishReason string                    `json:"finish_reason"`
	StopReason   any                       `json:"stop_reason"`
	TokenIDs     []int                     `json:"token_ids,omitempty"`
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if !decode(w, r, &req) || !s.checkModel(w, req.Model) {
		return
	}
	if req.MaxTokens == nil {
		req.MaxTokens = req.MaxCompletionTokens
	}
	params, n, param, msg := req.params(0)
	if msg != "" {
		writeError(w, http.StatusBadRequest, param, "%s", msg)
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "messages", "messages is required and must not be empty")
		return
	}
	if len(req.Tools) > 0 {
		writeError(w, http.StatusBadRequest, "tools", "the embedded policy cannot call tools; send the request without tools")
		return
	}
	snap := s.snapshot()
	prompt := local.Tokenizer{}.ChatTemplate(req.Messages, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
	prompt, msg = s.fitPrompt(prompt, snap.Config().Context, req.TruncatePromptTokens)
	if msg != "" {
		writeError(w, http.StatusBadRequest, "messages", "%s", msg)
		return
	}
	res, ok := s.sample(w, r, snap, prompt, n, params)
	if !ok {
		return
	}
	tok := local.Tokenizer{}
	var choices []chatChoice
	use := usage{PromptTokens: len(prompt)}
	for j, seq := range res.Sequences {
		text, _ := local.ReplyText(seq)
		c := chatChoice{Index: j, Message: chatMessage{Role: "assistant", Content: text, ToolCalls: []episode.ToolCall{}},
			FinishReason: seq.StopReason, StopReason: stopReason(seq)}
		if req.ReturnTokenIDs {
			c.TokenIDs = nonNil(seq.Tokens)
		}
		if req.Logprobs {
			content := []chatLogprob{}
			for i, id := range seq.Tokens {
				t := tok.TokenText(id)
				b := []int{}
				for _, x := range []byte(t) {
					b = append(b, int(x))
				}
				e := chatLogprob{Token: t, Logprob: finite(seq.Logprobs[i]), Bytes: b, TopLogprobs: []chatLogprob{}}
				if req.TopLogprobs > 0 {
					e.TopLogprobs = append(e.TopLogprobs, chatLogprob{Token: t, Logprob: e.Logprob, Bytes: b, TopLogprobs: []chatLogprob{}})
				}
				content = append(content, e)
			}
			c.Logprobs = &map[string][]chatLogprob{"content": content}
		}
		use.CompletionTokens += len(seq.Tokens)
		choices = append(choices, c)
	}
	use.TotalTokens = use.PromptTokens + use.CompletionTokens
	resp := map[string]any{
		"id": s.nextID("chatcmpl-"), "object": "chat.completion", "created": time.Now().Unix(), "model": s.opts.ModelName,
		"choices": choices, "usage": use,
	}
	if req.ReturnTokenIDs {
		resp["prompt_token_ids"] = prompt
	}
	writeJSON(w, http.StatusOK, resp)
}
