package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/openaiwire"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// chatRequest is the part of an OpenAI chat request the gateway reads.
// Sampling fields (temperature, top_p, max_tokens, stop, seed...) and
// model are pinned to the session's and so not read at all.
type chatRequest struct {
	Messages      []openaiwire.InputMessage `json:"messages"`
	Tools         []sampler.Tool            `json:"tools"`
	ToolChoice    json.RawMessage           `json:"tool_choice"`
	Stream        bool                      `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Logprobs       bool            `json:"logprobs"`
	ReturnTokenIDs bool            `json:"return_token_ids"`
	N              *int            `json:"n"`
	ResponseFormat json.RawMessage `json:"response_format"`
}

// textContent reads OpenAI message content: a string, null, or a list of
// {"type":"text","text":...} parts (joined). Other parts (images, audio)
// cannot be sampled from a text policy and are refused.
func textContent(raw json.RawMessage, where string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%s: %v", where, err)
		}
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("%s must be a string or a list of text parts", where)
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" && p.Type != "input_text" && p.Type != "output_text" {
			return "", fmt.Errorf("%s[%d] is a %q part; the gateway serves text models only", where, i, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func checkToolChoice(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == `"auto"` || string(raw) == `"none"` {
		return nil
	}
	return fmt.Errorf("tool_choice %s is not supported: the gateway cannot force a tool call (use \"auto\")", raw)
}

func decodeChat(body []byte) (call, error) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return call{}, fmt.Errorf("the request body is not a valid chat request: %v", err)
	}
	if len(req.Messages) == 0 {
		return call{}, errors.New("messages is empty; a chat request needs at least one message")
	}
	if req.N != nil && *req.N != 1 {
		return call{}, fmt.Errorf("n=%d: the gateway answers one choice per call (n=1); call again for more", *req.N)
	}
	if rf := bytes.TrimSpace(req.ResponseFormat); len(rf) > 0 && string(rf) != "null" {
		var f struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(rf, &f) != nil || f.Type != "text" {
			return call{}, fmt.Errorf("response_format %s is not supported: the gateway cannot constrain the model's output", rf)
		}
	}
	if err := checkToolChoice(req.ToolChoice); err != nil {
		return call{}, err
	}
	if req.StreamOptions != nil && !req.Stream {
		return call{}, errors.New("stream_options is only allowed with stream=true")
	}
	msgs := make([]episode.Message, 0, len(req.Messages))
	for i, m := range req.Messages {
		text, err := textContent(m.Content, fmt.Sprintf("messages[%d].content", i))
		if err != nil {
			return call{}, err
		}
		role := m.Role
		switch role {
		case "developer":
			role = "system"
		case "system", "user", "assistant", "tool":
		default:
			return call{}, fmt.Errorf("messages[%d].role %q: use system, developer, user, assistant or tool", i, m.Role)
		}
		msg := episode.Message{Role: role, Content: text, Name: m.Name, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Reasoning: m.Reasoning}
		if msg.Reasoning == "" {
			msg.Reasoning = m.ReasoningContent
		}
		for j := range msg.ToolCalls {
			if msg.ToolCalls[j].Type == "" {
				msg.ToolCalls[j].Type = "function"
			}
		}
		msgs = append(msgs, msg)
	}
	for i, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return call{}, fmt.Errorf("tools[%d]: only function tools with a name are supported", i)
		}
	}
	c := call{req: sampler.Request{Messages: msgs, Tools: req.Tools}, stream: req.Stream, reqMsgs: msgs,
		asked: askedFor{logprobs: req.Logprobs, tokenIDs: req.ReturnTokenIDs}}
	if req.StreamOptions != nil {
		c.asked.includeUsage = req.StreamOptions.IncludeUsage
	}
	return c, nil
}

type completionRequest struct {
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Logprobs       *int `json:"logprobs"`
	Echo           bool `json:"echo"`
	N              *int `json:"n"`
	ReturnTokenIDs bool `json:"return_token_ids"`
}

// decodeCompletion reads a /v1/completions request. The prompt must be
// token ids (a list, or a list holding one list): a text prompt would be
// tokenized here, and the point of the gateway is that nothing is
// tokenized twice.
func decodeCompletion(body []byte) (call, error) {
	var req completionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return call{}, fmt.Errorf("the request body is not a valid completion request: %v", err)
	}
	if req.N != nil && *req.N != 1 {
		return call{}, fmt.Errorf("n=%d: the gateway answers one choice per call (n=1)", *req.N)
	}
	if req.Echo {
		return call{}, errors.New("echo is not supported")
	}
	if req.StreamOptions != nil && !req.Stream {
		return call{}, errors.New("stream_options is only allowed with stream=true")
	}
	var ids []int
	if err := json.Unmarshal(req.Prompt, &ids); err != nil {
		var nested [][]int
		if err2 := json.Unmarshal(req.Prompt, &nested); err2 != nil || len(nested) != 1 {
			return call{}, errors.New("prompt must be a list of token ids (one prompt): the gateway does not tokenize text prompts; use /v1/chat/completions for text")
		}
		ids = nested[0]
	}
	if len(ids) == 0 {
		return call{}, errors.New("prompt is empty")
	}
	for i, id := range ids {
		if id < 0 {
			return call{}, fmt.Errorf("prompt[%d] = %d is not a token id", i, id)
		}
	}
	c := call{req: sampler.Request{PromptIDs: ids}, stream: req.Stream,
		asked: askedFor{logprobs: req.Logprobs != nil, tokenIDs: req.ReturnTokenIDs}}
	if req.StreamOptions != nil {
		c.asked.includeUsage = req.StreamOptions.IncludeUsage
	}
	return c, nil
}

func usage(t *Trace) openaiwire.Usage {
	return openaiwire.Usage{PromptTokens: len(t.PromptIDs), CompletionTokens: len(t.CompletionIDs),
		TotalTokens: len(t.PromptIDs) + len(t.CompletionIDs)}
}

// tokenStrings names sampled tokens as vLLM does with
// return_tokens_as_token_ids: "token_id:N" (the gateway has no tokenizer).
func tokenStrings(ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = openaiwire.TokenIDString(id)
	}
	return out
}

// chatLogprobs writes a trace's logprobs in the chat form, -inf as vLLM
// sends it (JSON has no infinity).
func chatLogprobs(t *Trace) openaiwire.ChatLogprobs {
	names := tokenStrings(t.CompletionIDs)
	content := make([]openaiwire.TokenLogprob, len(names))
	for i, n := range names {
		lp := 0.0
		if i < len(t.Logprobs) {
			lp = openaiwire.EncodeLogprob(t.Logprobs[i])
		}
		content[i] = openaiwire.TokenLogprob{Token: n, Logprob: lp, TopLogprobs: []openaiwire.TopLogprob{}}
	}
	return openaiwire.ChatLogprobs{Content: content}
}

func wireToolCalls(calls []episode.ToolCall) []episode.ToolCall {
	out := make([]episode.ToolCall, len(calls))
	for i, c := range calls {
		if c.Type == "" {
			c.Type = "function"
		}
		out[i] = c
	}
	return out
}

func writeChat(w http.ResponseWriter, model string, t *Trace, c call) {
	id, created := "chatcmpl-"+t.TraceID, t.Timestamp.Unix()
	if c.stream {
		writeChatStream(w, model, t, c, id, created)
		return
	}
	msg := map[string]any{"role": "assistant", "content": t.Response.Content}
	if t.Response.Content == "" && len(t.Response.ToolCalls) > 0 {
		msg["content"] = nil
	}
	if t.Response.Reasoning != "" {
		msg["reasoning"] = t.Response.Reasoning
	}
	if len(t.Response.ToolCalls) > 0 {
		msg["tool_calls"] = wireToolCalls(t.Response.ToolCalls)
	}
	choice := map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": t.FinishReason}
	if c.asked.logprobs {
		choice["logprobs"] = chatLogprobs(t)
	}
	out := map[string]any{"id": id, "object": "chat.completion", "created": created, "model": model,
		"choices": []any{choice}, "usage": usage(t)}
	if c.asked.tokenIDs {
		choice["token_ids"] = t.CompletionIDs
		out["prompt_token_ids"] = t.PromptIDs
	}
	writeJSON(w, http.StatusOK, out)
}

// sse writes server-sent events and flushes each.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

// data writes one "data:" frame (OpenAI); event, when set, first writes
// an "event:" line (Anthropic).
func (s *sse) send(event string, v any) {
	var b []byte
	if raw, ok := v.(string); ok {
		b = []byte(raw)
	} else {
		b, _ = json.Marshal(v)
	}
	if event != "" {
		_, _ = fmt.Fprintf(s.w, "event: %s\n", event)
	}
	_, _ = fmt.Fprintf(s.w, "data: %s\n\n", b)
	if s.f != nil {
		s.f.Flush()
	}
}

// streamPieces splits a reply into the chunks a stream sends: a few
// pieces, so that clients exercise their concatenation, never splitting
// a UTF-8 sequence.
func streamPieces(s string, n int) []string {
	if s == "" {
		return nil
	}
	rs := []rune(s)
	size := max((len(rs)+n-1)/n, 1)
	var out []string
	for i := 0; i < len(rs); i += size {
		out = append(out, string(rs[i:min(i+size, len(rs))]))
	}
	return out
}

func writeChatStream(w http.ResponseWriter, model string, t *Trace, c call, id string, created int64) {
	s := startSSE(w)
	chunk := func(delta map[string]any, finish any, extra map[string]any) map[string]any {
		ch := map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}
		for k, v := range extra {
			ch[k] = v
		}
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": []any{ch}}
	}
	first := chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	if c.asked.tokenIDs {
		first["prompt_token_ids"] = t.PromptIDs
	}
	s.send("", first)
	for _, piece := range streamPieces(t.Response.Reasoning, 4) {
		s.send("", chunk(map[string]any{"reasoning": piece}, nil, nil))
	}
	for _, piece := range streamPieces(t.Response.Content, 4) {
		s.send("", chunk(map[string]any{"content": piece}, nil, nil))
	}
	for i, tc := range t.Response.ToolCalls {
		s.send("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": tc.ID, "type": "function",
			"function": map[string]any{"name": tc.Function.Name, "arguments": ""}}}}, nil, nil))
		for _, piece := range streamPieces(tc.Function.Arguments, 3) {
			s.send("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": piece}}}}, nil, nil))
		}
	}
	// The ids and logprobs of the whole reply ride on the last chunk.
	extra := map[string]any{}
	if c.asked.tokenIDs {
		extra["token_ids"] = t.CompletionIDs
	}
	last := chunk(map[string]any{}, t.FinishReason, extra)
	if c.asked.logprobs {
		last["choices"].([]any)[0].(map[string]any)["logprobs"] = chatLogprobs(t)
	}
	s.send("", last)
	if c.asked.includeUsage {
		s.send("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": []any{}, "usage": usage(t)})
	}
	s.send("", "[DONE]")
}

func completionLogprobs(t *Trace) openaiwire.CompletionLogprobs {
	lps := make([]float64, len(t.CompletionIDs))
	for i := range min(len(lps), len(t.Logprobs)) {
		lps[i] = openaiwire.EncodeLogprob(t.Logprobs[i])
	}
	return openaiwire.CompletionLogprobs{Tokens: tokenStrings(t.CompletionIDs), TokenLogprobs: lps}
}

func writeCompletion(w http.ResponseWriter, model string, t *Trace, c call) {
	id, created := "cmpl-"+t.TraceID, t.Timestamp.Unix()
	choice := map[string]any{"index": 0, "text": t.Response.Content, "logprobs": nil, "finish_reason": t.FinishReason}
	if c.asked.logprobs {
		choice["logprobs"] = completionLogprobs(t)
	}
	if c.asked.tokenIDs {
		choice["token_ids"] = t.CompletionIDs
		choice["prompt_token_ids"] = t.PromptIDs
	}
	if !c.stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "text_completion", "created": created, "model": model,
			"choices": []any{choice}, "usage": usage(t)})
		return
	}
	s := startSSE(w)
	pieces := streamPieces(t.Response.Content, 4)
	for _, p := range pieces {
		s.send("", map[string]any{"id": id, "object": "text_completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "text": p, "logprobs": nil, "finish_reason": nil}}})
	}
	choice["text"] = ""
	s.send("", map[string]any{"id": id, "object": "text_completion", "created": created, "model": model, "choices": []any{choice}})
	if c.asked.includeUsage {
		s.send("", map[string]any{"id": id, "object": "text_completion", "created": created, "model": model, "choices": []any{}, "usage": usage(t)})
	}
	s.send("", "[DONE]")
}
