package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// messagesRequest is the part of an Anthropic Messages request the
// gateway reads; model, max_tokens and the sampling fields are pinned to
// the session's.
type messagesRequest struct {
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	System json.RawMessage `json:"system"`
	Stream bool            `json:"stream"`
	Tools  []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
		Type        string          `json:"type"`
	} `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
	} `json:"tool_choice"`
}

// block is one Anthropic content block.
type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

func blocks(raw json.RawMessage, where string) ([]block, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		return []block{{Type: "text", Text: s}}, nil
	}
	var bs []block
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, fmt.Errorf("%s must be a string or a list of content blocks", where)
	}
	return bs, nil
}

func decodeMessages(body []byte) (call, error) {
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return call{}, fmt.Errorf("the request body is not a valid Messages request: %v", err)
	}
	if len(req.Messages) == 0 {
		return call{}, errors.New("messages is empty")
	}
	if tc := req.ToolChoice; tc != nil && tc.Type != "auto" && tc.Type != "none" {
		return call{}, fmt.Errorf("tool_choice %q is not supported: the gateway cannot force a tool call (use auto)", tc.Type)
	}
	var msgs []episode.Message
	sys, err := systemText(req.System, "system")
	if err != nil {
		return call{}, err
	}
	if sys != nil {
		msgs = append(msgs, episode.Message{Role: "system", Content: *sys})
	}
	for i, m := range req.Messages {
		where := fmt.Sprintf("messages[%d].content", i)
		bs, err := blocks(m.Content, where)
		if err != nil {
			return call{}, err
		}
		switch m.Role {
		case "user":
			var text strings.Builder
			for j, b := range bs {
				switch b.Type {
				case "text":
					text.WriteString(b.Text)
				case "tool_result":
					out, err := blocks(b.Content, fmt.Sprintf("%s[%d].content", where, j))
					if err != nil {
						return call{}, err
					}
					var r strings.Builder
					for k, o := range out {
						if o.Type != "text" {
							return call{}, fmt.Errorf("%s[%d].content[%d] is a %q block; the gateway serves text models only", where, j, k, o.Type)
						}
						r.WriteString(o.Text)
					}
					msgs = append(msgs, episode.Message{Role: "tool", ToolCallID: b.ToolUseID, Content: r.String()})
				default:
					return call{}, fmt.Errorf("%s[%d] is a %q block; user messages take text and tool_result blocks", where, j, b.Type)
				}
			}
			if text.Len() > 0 || len(bs) == 0 {
				msgs = append(msgs, episode.Message{Role: "user", Content: text.String()})
			}
		case "assistant":
			msg := episode.Message{Role: "assistant"}
			for j, b := range bs {
				switch b.Type {
				case "text":
					msg.Content += b.Text
				case "thinking":
					msg.Reasoning += b.Thinking
				case "redacted_thinking":
				case "tool_use":
					args := string(bytes.TrimSpace(b.Input))
					if args == "" || args == "null" {
						args = "{}"
					}
					msg.ToolCalls = append(msg.ToolCalls, episode.ToolCall{ID: b.ID, Type: "function", Function: episode.FunctionCall{Name: b.Name, Arguments: args}})
				default:
					return call{}, fmt.Errorf("%s[%d] is a %q block; assistant messages take text, thinking and tool_use blocks", where, j, b.Type)
				}
			}
			msgs = append(msgs, msg)
		case "system":
			// Claude Code sends system turns among the messages.
			text, err := systemText(m.Content, where)
			if err != nil {
				return call{}, err
			}
			if text != nil {
				msgs = append(msgs, episode.Message{Role: "system", Content: *text})
			}
		default:
			return call{}, fmt.Errorf("messages[%d].role %q: use user, assistant or system", i, m.Role)
		}
	}
	var tools []sampler.Tool
	for i, t := range req.Tools {
		if t.Name == "" || (t.Type != "" && t.Type != "custom") {
			return call{}, fmt.Errorf("tools[%d]: only custom tools with a name and input_schema are supported", i)
		}
		tools = append(tools, sampler.Tool{Type: "function", Function: sampler.ToolFunction{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}})
	}
	return call{req: sampler.Request{Messages: msgs, Tools: tools}, stream: req.Stream, reqMsgs: msgs}, nil
}

// systemText reads system content: a string or text blocks, joined; nil
// when there is none.
func systemText(raw json.RawMessage, where string) (*string, error) {
	bs, err := blocks(raw, where)
	if err != nil || len(bs) == 0 {
		return nil, err
	}
	var b strings.Builder
	for i, s := range bs {
		if s.Type != "text" {
			return nil, fmt.Errorf("%s[%d] is a %q block; system takes text blocks", where, i, s.Type)
		}
		b.WriteString(s.Text)
	}
	text := b.String()
	return &text, nil
}

// stopReason maps a finish reason onto Anthropic's stop_reason and
// stop_sequence. Servers report the stop match their own way: vLLM's
// stop_reason is null at the end of sequence, SGLang's matched_stop is
// the end-of-sequence token's id, and both give the id of a stop token.
// None of those is a stop sequence; only one of the request's stop
// strings is (agent loops test for end_turn).
func stopReason(t *Trace, stops []string) (string, any) {
	switch t.FinishReason {
	case "length":
		return "max_tokens", nil
	case "tool_calls":
		return "tool_use", nil
	}
	if t.FinishReason == "stop" && t.StopReason != "" && slices.Contains(stops, t.StopReason) {
		return "stop_sequence", t.StopReason
	}
	return "end_turn", nil
}

// toolInput is a tool call's arguments as the object Anthropic clients
// expect; arguments that are not a JSON object become {} (the trace keeps
// what the model wrote).
func toolInput(args string) json.RawMessage {
	raw := json.RawMessage(strings.TrimSpace(args))
	var obj map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &obj) != nil || obj == nil {
		return json.RawMessage("{}")
	}
	return raw
}

func anthropicBlocks(t *Trace) []map[string]any {
	var out []map[string]any
	if t.Response.Reasoning != "" {
		out = append(out, map[string]any{"type": "thinking", "thinking": t.Response.Reasoning, "signature": ""})
	}
	if t.Response.Content != "" || len(t.Response.ToolCalls) == 0 {
		out = append(out, map[string]any{"type": "text", "text": t.Response.Content})
	}
	for _, tc := range t.Response.ToolCalls {
		id := tc.ID
		if id == "" {
			id = "toolu_" + t.TraceID
		}
		out = append(out, map[string]any{"type": "tool_use", "id": id, "name": tc.Function.Name, "input": toolInput(tc.Function.Arguments)})
	}
	return out
}

func writeMessages(w http.ResponseWriter, model string, t *Trace, c call) {
	id := "msg_" + t.TraceID
	stop, seq := stopReason(t, c.req.Params.Stop)
	if !c.stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
			"content": anthropicBlocks(t), "stop_reason": stop, "stop_sequence": seq,
			"usage": map[string]int{"input_tokens": len(t.PromptIDs), "output_tokens": len(t.CompletionIDs)}})
		return
	}
	s := startSSE(w)
	s.send("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": id, "type": "message", "role": "assistant",
		"model": model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": len(t.PromptIDs), "output_tokens": 0}}})
	for i, b := range anthropicBlocks(t) {
		start := map[string]any{"type": b["type"]}
		var deltas []map[string]any
		switch b["type"] {
		case "thinking":
			start["thinking"], start["signature"] = "", ""
			for _, p := range streamPieces(b["thinking"].(string), 4) {
				deltas = append(deltas, map[string]any{"type": "thinking_delta", "thinking": p})
			}
			deltas = append(deltas, map[string]any{"type": "signature_delta", "signature": ""})
		case "text":
			start["text"] = ""
			for _, p := range streamPieces(b["text"].(string), 4) {
				deltas = append(deltas, map[string]any{"type": "text_delta", "text": p})
			}
		case "tool_use":
			start["id"], start["name"], start["input"] = b["id"], b["name"], map[string]any{}
			for _, p := range streamPieces(string(b["input"].(json.RawMessage)), 3) {
				deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": p})
			}
		}
		s.send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": start})
		for _, d := range deltas {
			s.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d})
		}
		s.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	s.send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": seq},
		"usage": map[string]int{"output_tokens": len(t.CompletionIDs)}})
	s.send("message_stop", map[string]any{"type": "message_stop"})
}

// countTokens answers POST /v1/messages/count_tokens (Claude Code asks
// it): the prompt tokens of a Messages request as the session's sampler
// renders and encodes it, without sampling. It leaves no trace and does
// not count against the session's max_calls; its body counts against the
// session's byte budget, and once the session's limit fired (max_calls,
// the byte budget) it is refused as every call is.
func (g *Gateway) countTokens(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	status := g.serveCountTokens(w, r)
	g.metrics.observe("messages.count_tokens", status, time.Since(began))
}

func (g *Gateway) serveCountTokens(w http.ResponseWriter, r *http.Request) int {
	s, status := g.callSession(w, r, writeAnthropicError)
	if s == nil {
		return status
	}
	if hit := s.limited.Load(); hit != nil {
		s.fail(func(st *SessionStats) { st.Refused++ }, hit.msg)
		writeAnthropicError(w, hit.status, hit.typ, hit.msg)
		return hit.status
	}
	body, status := g.sessionBody(w, r, s, writeAnthropicError)
	if body == nil {
		return status
	}
	// What a session may send in all is bounded, whether it samples or
	// only counts.
	s.counted.Add(int64(len(body)))
	c, err := decodeMessages(body)
	if err != nil {
		s.fail(func(st *SessionStats) { st.Refused++ }, err.Error())
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return http.StatusBadRequest
	}
	n, err := sampler.CountPromptTokens(r.Context(), s.cfg.Sampler, sampler.Request{Messages: c.req.Messages, Tools: c.req.Tools,
		Params: s.params, ChatTemplateKwargs: s.cfg.ChatTemplateKwargs})
	if err != nil {
		status, typ := http.StatusBadGateway, "api_error"
		var ue *usererr.Error
		switch {
		case errors.Is(err, sampler.ErrCannotCount):
			status = http.StatusNotImplemented
		case errors.As(err, &ue):
			status, typ = http.StatusBadRequest, "invalid_request_error"
		}
		s.fail(func(st *SessionStats) { st.Failed++ }, err.Error())
		writeAnthropicError(w, status, typ, "counting tokens failed: "+err.Error())
		return status
	}
	s.mu.Lock()
	s.stats.CountTokens++
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": n})
	return http.StatusOK
}
