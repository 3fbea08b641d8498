package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// The OpenAI Responses API (POST /v1/responses), as the OpenAI Agents
// SDK's default model and Codex call it. A request's instructions and
// input items become the same chat the chat route samples (messages and
// function tools, rendered by the sampler's template, tool calls parsed
// by its parser), so a Responses call records exactly what the same
// conversation over chat completions would.

// responsesRequest is the part of a Responses request the gateway reads.
// model and the sampling fields (temperature, top_p, max_output_tokens)
// are pinned to the session's; store, metadata, reasoning, text.verbosity,
// prompt_cache_key, parallel_tool_calls, service_tier, user... change
// nothing here and are accepted.
type responsesRequest struct {
	Instructions       json.RawMessage   `json:"instructions"`
	Input              json.RawMessage   `json:"input"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Stream             bool              `json:"stream"`
	Include            []string          `json:"include"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Background         *bool             `json:"background"`
	Conversation       json.RawMessage   `json:"conversation"`
	Prompt             json.RawMessage   `json:"prompt"`
	Truncation         *string           `json:"truncation"`
	TopLogprobs        *int              `json:"top_logprobs"`
	MaxToolCalls       *int              `json:"max_tool_calls"`
	ContextManagement  json.RawMessage   `json:"context_management"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Text               *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
}

// responsesTool is a tool of a Responses request: a flat function tool
// or a custom (freeform) tool.
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Format      *struct {
		Type       string `json:"type"`
		Syntax     string `json:"syntax"`
		Definition string `json:"definition"`
	} `json:"format"`
	// Tools are a namespace's.
	Tools []json.RawMessage `json:"tools"`
}

// inputItem is one item of a Responses request's input.
type inputItem struct {
	Type             string          `json:"type"`
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	CallID           string          `json:"call_id"`
	Name             string          `json:"name"`
	Arguments        *string         `json:"arguments"`
	Input            *string         `json:"input"`
	Output           json.RawMessage `json:"output"`
	EncryptedContent string          `json:"encrypted_content"`
}

// includeKnown are the include values the Responses API defines; the
// gateway honours message.output_text.logprobs and
// reasoning.encrypted_content (the reasoning text comes back in
// encrypted_content anyway) and the others name outputs of tools it
// refuses, so they change nothing.
var includeKnown = map[string]bool{
	"message.output_text.logprobs":          true,
	"reasoning.encrypted_content":           true,
	"file_search_call.results":              true,
	"web_search_call.results":               true,
	"web_search_call.action.sources":        true,
	"message.input_image.image_url":         true,
	"computer_call_output.output.image_url": true,
	"code_interpreter_call.outputs":         true,
}

// responsesCall is what a Responses call needs beyond the chat: which
// tools are custom (their calls come back as custom_tool_call items),
// and what the response object echoes.
type responsesCall struct {
	custom map[string]bool
	// namespace is the namespace of each tool offered ("" outside one).
	namespace    map[string]string
	instructions json.RawMessage
	tools        []json.RawMessage
	toolChoice   json.RawMessage
	parallel     bool
	prevID       string
	logprobs     bool
	// skip is how many leading messages the instructions became (0 or
	// 1): a later call naming this response as previous_response_id
	// continues from the messages after them.
	skip int
	// stream is a streamed call's event stream, begun before sampling.
	stream *responseStream
}

// responseMemory is what a session keeps of its Responses calls: the
// call behind each response id (for previous_response_id) and the exact
// arguments of each custom tool call it returned, so that a replayed
// custom_tool_call renders the tokens the model sampled.
type responseMemory interface {
	previous(id string) ([]episode.Message, bool)
	customArgs(callID string) (string, bool)
}

// reasoningPrefix marks reasoning text the gateway put in a reasoning
// item's encrypted_content: not encrypted, only carried, so that clients
// which replay encrypted_content alone (Codex with store=false) give the
// model's reasoning back.
const reasoningPrefix = "rllm-reasoning:"

func encodeReasoning(text string) string {
	return reasoningPrefix + base64.StdEncoding.EncodeToString([]byte(text))
}

func decodeReasoning(enc string) (string, bool) {
	rest, ok := strings.CutPrefix(enc, reasoningPrefix)
	if !ok {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	return string(b), err == nil
}

// hostedTools are the Responses tools that run on OpenAI's side.
const hostedTools = "web_search, file_search, code_interpreter, computer_use, image_generation, mcp, local_shell..."

func decodeResponses(body []byte, mem responseMemory) (call, error) {
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return call{}, fmt.Errorf("the request body is not a valid Responses request: %v", err)
	}
	if req.Background != nil && *req.Background {
		return call{}, errors.New("background: true is not supported: the gateway answers while the request is open (drop background)")
	}
	if isSet(req.Conversation) {
		return call{}, errors.New("conversation is not supported: the gateway keeps no server-side conversations; send the history in input")
	}
	if isSet(req.Prompt) {
		return call{}, errors.New("prompt (a stored prompt template) is not supported: send instructions and input")
	}
	if req.Truncation != nil && *req.Truncation != "disabled" {
		return call{}, fmt.Errorf("truncation %q is not supported: the gateway never drops input (use \"disabled\")", *req.Truncation)
	}
	if req.TopLogprobs != nil && *req.TopLogprobs > 0 {
		return call{}, fmt.Errorf("top_logprobs=%d is not supported: the gateway returns the sampled tokens' logprobs only (include message.output_text.logprobs)", *req.TopLogprobs)
	}
	if req.MaxToolCalls != nil {
		return call{}, errors.New("max_tool_calls is not supported: the gateway cannot bound the model's tool calls")
	}
	if isSet(req.ContextManagement) {
		return call{}, errors.New("context_management is not supported: the gateway does no server-side compaction")
	}
	if req.Text != nil && isSet(req.Text.Format) {
		var f struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(req.Text.Format, &f) != nil || f.Type != "text" {
			return call{}, fmt.Errorf("text.format %s is not supported: the gateway cannot constrain the model's output", req.Text.Format)
		}
	}
	if err := checkToolChoice(req.ToolChoice); err != nil {
		return call{}, err
	}
	rc := &responsesCall{custom: map[string]bool{}, namespace: map[string]string{}, instructions: req.Instructions, tools: req.Tools,
		toolChoice: req.ToolChoice, parallel: req.ParallelToolCalls == nil || *req.ParallelToolCalls}
	for i, inc := range req.Include {
		if !includeKnown[inc] {
			return call{}, fmt.Errorf("include[%d] %q is not an include value the gateway knows", i, inc)
		}
		rc.logprobs = rc.logprobs || inc == "message.output_text.logprobs"
	}
	tools, err := rc.readTools(req.Tools, "tools", "")
	if err != nil {
		return call{}, err
	}
	var msgs []episode.Message
	if isSet(req.Instructions) {
		var ins string
		if err := json.Unmarshal(req.Instructions, &ins); err != nil {
			return call{}, errors.New("instructions must be a string")
		}
		if ins != "" {
			msgs = append(msgs, episode.Message{Role: "system", Content: ins})
			rc.skip = 1
		}
	}
	if req.PreviousResponseID != nil && *req.PreviousResponseID != "" {
		rc.prevID = *req.PreviousResponseID
		var prev []episode.Message
		ok := false
		if mem != nil {
			prev, ok = mem.previous(rc.prevID)
		}
		if !ok {
			return call{}, fmt.Errorf("previous_response_id %q is not a response of this session: the gateway keeps each session's responses, not others' (send the history in input)", rc.prevID)
		}
		msgs = append(msgs, prev...)
	}
	items, err := inputItems(req.Input)
	if err != nil {
		return call{}, err
	}
	msgs, err = itemMessages(msgs, items, mem)
	if err != nil {
		return call{}, err
	}
	if len(msgs) == 0 {
		return call{}, errors.New("input is empty; a Responses request needs at least one input item or instructions")
	}
	return call{req: sampler.Request{Messages: msgs, Tools: tools}, stream: req.Stream, reqMsgs: msgs, responses: rc}, nil
}

// readTools reads the tools of a request (or of a namespace ns, at
// where) into the chat tools offered to the model. A namespace (Codex
// groups its sub-agent tools so) is a client-side grouping: its tools are
// offered as they are, and a call to one comes back with the namespace.
func (rc *responsesCall) readTools(raws []json.RawMessage, where, ns string) ([]sampler.Tool, error) {
	var tools []sampler.Tool
	for i, raw := range raws {
		at := fmt.Sprintf("%s[%d]", where, i)
		var t responsesTool
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, fmt.Errorf("%s: %v", at, err)
		}
		named := t.Type == "function" || t.Type == "custom" || t.Type == "namespace"
		if named && t.Name == "" {
			return nil, fmt.Errorf("%s: a %s tool needs a name", at, t.Type)
		}
		if t.Type == "function" || t.Type == "custom" {
			if _, dup := rc.namespace[t.Name]; dup {
				return nil, fmt.Errorf("%s: a tool named %q is offered twice (the model sees one list of tools)", at, t.Name)
			}
			rc.namespace[t.Name] = ns
		}
		switch t.Type {
		case "function":
			var params json.RawMessage
			if isSet(t.Parameters) {
				params = t.Parameters
			}
			tools = append(tools, sampler.Tool{Type: "function", Function: sampler.ToolFunction{Name: t.Name, Description: t.Description, Parameters: params}})
		case "custom":
			tool, err := customTool(t)
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %v", at, t.Name, err)
			}
			rc.custom[t.Name] = true
			tools = append(tools, tool)
		case "namespace":
			if ns != "" {
				return nil, fmt.Errorf("%s: a namespace inside a namespace", at)
			}
			inner, err := rc.readTools(t.Tools, at+".tools", t.Name)
			if err != nil {
				return nil, err
			}
			tools = append(tools, inner...)
		case "tool_search":
			return nil, fmt.Errorf("%s is a tool_search tool: the gateway cannot load tools in the middle of a conversation; offer every tool up front (Codex: supports_search_tool = false in the model's catalogue entry)", at)
		default:
			return nil, fmt.Errorf("%s is a %q tool: hosted tools (%s) run on OpenAI's side and the gateway has none; offer function or custom tools (Codex: web_search = \"disabled\")", at, t.Type, hostedTools)
		}
	}
	return tools, nil
}

func isSet(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && string(raw) != "null"
}

// inputItems reads input: a string (one user message) or a list of items.
func inputItems(raw json.RawMessage) ([]inputItem, error) {
	raw = bytes.TrimSpace(raw)
	if !isSet(raw) {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("input: %v", err)
		}
		text, _ := json.Marshal(s)
		return []inputItem{{Type: "message", Role: "user", Content: text}}, nil
	}
	var items []inputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("input must be a string or a list of input items: %v", err)
	}
	return items, nil
}

// itemMessages appends the chat messages of input items to msgs. An
// assistant turn's items (reasoning, its message, its tool calls) become
// one assistant message, as the chat route's reply is one message.
func itemMessages(msgs []episode.Message, items []inputItem, mem responseMemory) ([]episode.Message, error) {
	// open is the index in msgs of the assistant message the next
	// assistant item joins, -1 when a new one starts.
	open := -1
	assistant := func(startIf func(m *episode.Message) bool) *episode.Message {
		if open < 0 || startIf(&msgs[open]) {
			msgs = append(msgs, episode.Message{Role: "assistant"})
			open = len(msgs) - 1
		}
		return &msgs[open]
	}
	never := func(*episode.Message) bool { return false }
	for i, it := range items {
		where := fmt.Sprintf("input[%d]", i)
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			text, err := textContent(it.Content, where+".content")
			if err != nil {
				return nil, err
			}
			switch it.Role {
			case "assistant":
				m := assistant(func(m *episode.Message) bool { return m.Content != "" || len(m.ToolCalls) > 0 })
				m.Content = text
			case "user", "system", "developer":
				role := it.Role
				if role == "developer" {
					role = "system"
				}
				msgs = append(msgs, episode.Message{Role: role, Content: text})
				open = -1
			default:
				return nil, fmt.Errorf("%s.role %q: use user, system, developer or assistant", where, it.Role)
			}
		case "reasoning":
			text, err := reasoningText(it, where)
			if err != nil {
				return nil, err
			}
			m := assistant(func(m *episode.Message) bool { return m.Content != "" || len(m.ToolCalls) > 0 })
			m.Reasoning += text
		case "function_call", "custom_tool_call":
			if it.Name == "" || it.CallID == "" {
				return nil, fmt.Errorf("%s: a %s needs a name and a call_id", where, typ)
			}
			var args string
			if typ == "function_call" {
				if it.Arguments == nil {
					return nil, fmt.Errorf("%s: a function_call needs arguments (a JSON string)", where)
				}
				args = *it.Arguments
			} else {
				if it.Input == nil {
					return nil, fmt.Errorf("%s: a custom_tool_call needs input (a string)", where)
				}
				args = customArgs(*it.Input)
				if mem != nil {
					if raw, ok := mem.customArgs(it.CallID); ok && customInput(raw) == *it.Input {
						args = raw
					}
				}
			}
			m := assistant(never)
			m.ToolCalls = append(m.ToolCalls, episode.ToolCall{ID: it.CallID, Type: "function", Function: episode.FunctionCall{Name: it.Name, Arguments: args}})
		case "function_call_output", "custom_tool_call_output":
			if it.CallID == "" {
				return nil, fmt.Errorf("%s: a %s needs a call_id", where, typ)
			}
			out, err := textContent(it.Output, where+".output")
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, episode.Message{Role: "tool", ToolCallID: it.CallID, Content: out})
			open = -1
		case "item_reference":
			return nil, fmt.Errorf("%s is an item_reference: the gateway stores no items; send the item itself", where)
		default:
			return nil, fmt.Errorf("%s is a %q item: the gateway takes message, reasoning, function_call, function_call_output, custom_tool_call and custom_tool_call_output items", where, it.Type)
		}
	}
	return msgs, nil
}

// reasoningText is the model's reasoning a replayed reasoning item
// carries: its reasoning_text content, else what the gateway put in its
// encrypted_content. Summaries are not the model's tokens and are left
// out.
func reasoningText(it inputItem, where string) (string, error) {
	if isSet(it.Content) {
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(it.Content, &parts); err != nil {
			return "", fmt.Errorf("%s.content must be a list of reasoning_text parts", where)
		}
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "reasoning_text" || p.Type == "text" {
				b.WriteString(p.Text)
			}
		}
		if b.Len() > 0 {
			return b.String(), nil
		}
	}
	if text, ok := decodeReasoning(it.EncryptedContent); ok {
		return text, nil
	}
	return "", nil
}

// A custom (freeform) tool is offered to the model as a function tool
// with one string argument, input, its grammar in the description: chat
// templates and tool parsers know function tools only. The model's call
// comes back as a custom_tool_call whose input is that argument.
const customInputDoc = "The tool's whole input as plain text (not JSON)."

func customTool(t responsesTool) (sampler.Tool, error) {
	desc := t.Description
	if f := t.Format; f != nil && f.Type != "" && f.Type != "text" {
		if f.Type != "grammar" {
			return sampler.Tool{}, fmt.Errorf("format.type %q: use text or grammar", f.Type)
		}
		if desc != "" {
			desc += "\n\n"
		}
		desc += "Its input must match this " + f.Syntax + " grammar:\n" + f.Definition
	}
	params := `{"type":"object","properties":{"input":{"type":"string","description":"` + customInputDoc + `"}},"required":["input"],"additionalProperties":false}`
	return sampler.Tool{Type: "function", Function: sampler.ToolFunction{Name: t.Name, Description: desc, Parameters: json.RawMessage(params)}}, nil
}

// customInput is the input of a custom tool call whose arguments the
// model wrote: the input argument, else the arguments as they are.
func customInput(args string) string {
	var obj struct {
		Input *string `json:"input"`
	}
	if json.Unmarshal([]byte(args), &obj) == nil && obj.Input != nil {
		return *obj.Input
	}
	return args
}

// customArgs are the arguments of a custom tool call replayed by a client
// whose call the session does not know.
func customArgs(input string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"input": input})
	return strings.TrimSuffix(b.String(), "\n")
}

// outputItems are the Responses output items of a reply: its reasoning,
// its message (when it has text or calls nothing), its tool calls.
func outputItems(t *Trace, rc *responsesCall) []map[string]any {
	var out []map[string]any
	r := t.Response
	if r.Reasoning != "" {
		out = append(out, map[string]any{"type": "reasoning", "id": "rs_" + t.TraceID, "status": "completed", "summary": []any{},
			"content":           []any{map[string]any{"type": "reasoning_text", "text": r.Reasoning}},
			"encrypted_content": encodeReasoning(r.Reasoning)})
	}
	if r.Content != "" || len(r.ToolCalls) == 0 {
		part := map[string]any{"type": "output_text", "text": r.Content, "annotations": []any{}}
		if rc.logprobs {
			part["logprobs"] = chatLogprobs(t).Content
		}
		out = append(out, map[string]any{"type": "message", "id": "msg_" + t.TraceID, "status": "completed", "role": "assistant",
			"content": []any{part}})
	}
	for i, tc := range r.ToolCalls {
		suffix := t.TraceID + "_" + strconv.Itoa(i)
		if rc.custom[tc.Function.Name] {
			out = append(out, map[string]any{"type": "custom_tool_call", "id": "ctc_" + suffix, "status": "completed",
				"call_id": tc.ID, "name": tc.Function.Name, "input": customInput(tc.Function.Arguments)})
			continue
		}
		item := map[string]any{"type": "function_call", "id": "fc_" + suffix, "status": "completed",
			"call_id": tc.ID, "name": tc.Function.Name, "arguments": tc.Function.Arguments}
		if ns := rc.namespace[tc.Function.Name]; ns != "" {
			item["namespace"] = ns
		}
		out = append(out, item)
	}
	return out
}

// responseObject is a response as the API returns it. A reply cut at
// the session's max_tokens is still status completed (with
// incomplete_details saying so): Codex and the Agents SDK treat an
// incomplete response as a failure and retry the same prompt, which
// would sample and record it again.
func responseObject(id, model string, created int64, rc *responsesCall, status string, output []map[string]any, t *Trace) map[string]any {
	tools := rc.tools
	if tools == nil {
		tools = []json.RawMessage{}
	}
	toolChoice := any("auto")
	if isSet(rc.toolChoice) {
		toolChoice = rc.toolChoice
	}
	var instructions any
	if isSet(rc.instructions) {
		instructions = rc.instructions
	}
	var prev any
	if rc.prevID != "" {
		prev = rc.prevID
	}
	if output == nil {
		output = []map[string]any{}
	}
	obj := map[string]any{"id": id, "object": "response", "created_at": created, "status": status, "model": model,
		"output": output, "error": nil, "incomplete_details": nil, "instructions": instructions, "tools": tools,
		"tool_choice": toolChoice, "parallel_tool_calls": rc.parallel, "previous_response_id": prev,
		"background": false, "truncation": "disabled", "text": map[string]any{"format": map[string]any{"type": "text"}},
		"metadata": map[string]any{}, "usage": nil}
	if t != nil {
		obj["usage"] = map[string]any{"input_tokens": len(t.PromptIDs), "input_tokens_details": map[string]int{"cached_tokens": 0},
			"output_tokens": len(t.CompletionIDs), "output_tokens_details": map[string]int{"reasoning_tokens": 0},
			"total_tokens": len(t.PromptIDs) + len(t.CompletionIDs)}
		if t.FinishReason == "length" {
			obj["incomplete_details"] = map[string]string{"reason": "max_output_tokens"}
		}
	}
	return obj
}

func writeResponses(w http.ResponseWriter, model string, t *Trace, c call) {
	rc := c.responses
	items := outputItems(t, rc)
	if !c.stream || rc.stream == nil {
		writeJSON(w, http.StatusOK, responseObject("resp_"+t.TraceID, model, t.Timestamp.Unix(), rc, "completed", items, t))
		return
	}
	rs := rc.stream
	rs.quiet()
	ev := rs.ev
	for i, item := range items {
		itemID := item["id"]
		at := func(kv ...any) map[string]any {
			m := map[string]any{"item_id": itemID, "output_index": i}
			for k := 0; k+1 < len(kv); k += 2 {
				m[kv[k].(string)] = kv[k+1]
			}
			return m
		}
		added := map[string]any{}
		for k, v := range item {
			added[k] = v
		}
		added["status"] = "in_progress"
		switch item["type"] {
		case "reasoning":
			text := t.Response.Reasoning
			added["content"] = []any{}
			ev.send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			ev.send("response.content_part.added", at("content_index", 0, "part", map[string]any{"type": "reasoning_text", "text": ""}))
			for _, p := range streamPieces(text, 4) {
				ev.send("response.reasoning_text.delta", at("content_index", 0, "delta", p))
			}
			ev.send("response.reasoning_text.done", at("content_index", 0, "text", text))
			ev.send("response.content_part.done", at("content_index", 0, "part", map[string]any{"type": "reasoning_text", "text": text}))
		case "message":
			part := item["content"].([]any)[0].(map[string]any)
			added["content"] = []any{}
			ev.send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			ev.send("response.content_part.added", at("content_index", 0, "part", map[string]any{"type": "output_text", "text": "", "annotations": []any{}}))
			for _, p := range streamPieces(t.Response.Content, 4) {
				ev.send("response.output_text.delta", at("content_index", 0, "delta", p, "logprobs", []any{}))
			}
			done := at("content_index", 0, "text", t.Response.Content)
			if lp, ok := part["logprobs"]; ok {
				done["logprobs"] = lp
			}
			ev.send("response.output_text.done", done)
			ev.send("response.content_part.done", at("content_index", 0, "part", part))
		case "function_call", "custom_tool_call":
			// A call streams its arguments (a function's JSON, a custom
			// tool's input) in pieces.
			field, event := "arguments", "response.function_call_arguments"
			if item["type"] == "custom_tool_call" {
				field, event = "input", "response.custom_tool_call_input"
			}
			added[field] = ""
			ev.send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			val := item[field].(string)
			for _, p := range streamPieces(val, 3) {
				ev.send(event+".delta", at("delta", p))
			}
			done := at(field, val)
			if field == "arguments" {
				done["name"] = item["name"]
			}
			ev.send(event+".done", done)
		}
		ev.send("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	ev.send("response.completed", map[string]any{"response": responseObject(rs.id, model, rs.created, rc, "completed", items, t)})
}

// responseStream is a streamed Responses call. Its events begin before
// the sampler answers (response.created, response.in_progress), and
// response.in_progress repeats every keepAlive while it samples: a
// client's idle timeout (Codex's is 300 s between events) must not cut a
// slow sample off and send the prompt again, which would sample and
// record it twice.
type responseStream struct {
	ev          *responseEvents
	id, model   string
	created     int64
	rc          *responsesCall
	stop, ended chan struct{}
	once        sync.Once
}

func beginResponseStream(w http.ResponseWriter, model, id string, created int64, rc *responsesCall, keepAlive time.Duration) *responseStream {
	rs := &responseStream{ev: startResponseEvents(w), id: id, model: model, created: created, rc: rc,
		stop: make(chan struct{}), ended: make(chan struct{})}
	rs.ev.send("response.created", map[string]any{"response": responseObject(id, model, created, rc, "in_progress", nil, nil)})
	rs.ev.send("response.in_progress", map[string]any{"response": responseObject(id, model, created, rc, "in_progress", nil, nil)})
	go func() {
		defer close(rs.ended)
		tick := time.NewTicker(keepAlive)
		defer tick.Stop()
		for {
			select {
			case <-rs.stop:
				return
			case <-tick.C:
				rs.ev.send("response.in_progress", map[string]any{"response": responseObject(id, model, created, rc, "in_progress", nil, nil)})
			}
		}
	}()
	return rs
}

// quiet ends the keep-alive events; the stream is the caller's alone
// once it returns.
func (rs *responseStream) quiet() {
	rs.once.Do(func() { close(rs.stop) })
	<-rs.ended
}

// fail ends the stream with response.failed carrying error.code: Codex
// reads context_length_exceeded as "the prompt does not fit" and stops
// retrying.
func (rs *responseStream) fail(code, msg string) {
	rs.quiet()
	failed := responseObject(rs.id, rs.model, rs.created, rs.rc, "failed", nil, nil)
	failed["error"] = map[string]any{"code": code, "message": msg}
	rs.ev.send("response.failed", map[string]any{"response": failed})
}

// responseEvents writes a Responses event stream: each event an "event:"
// line and its data, with its type and a sequence number in the data.
type responseEvents struct {
	s   *sse
	seq int
}

func startResponseEvents(w http.ResponseWriter) *responseEvents {
	return &responseEvents{s: startSSE(w)}
}

func (e *responseEvents) send(typ string, data map[string]any) {
	data["type"] = typ
	data["sequence_number"] = e.seq
	e.seq++
	e.s.send(typ, data)
}

// writeResponsesFailure answers a Responses call the sampler could not
// serve. A streamed call, whose events have begun, ends with
// response.failed and error.code (context_length_exceeded when the prompt
// does not fit: what Codex and the Agents SDK read); an unstreamed one
// gets an error body with the same code. It returns the HTTP status
// written.
func writeResponsesFailure(w http.ResponseWriter, c call, status int, typ, code, msg string) int {
	if rs := c.responses.stream; rs != nil {
		rs.fail(code, msg)
		return http.StatusOK
	}
	w.Header().Set("X-Should-Retry", "false")
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
	return status
}

// failureCode is the Responses error code of a sampling failure.
func failureCode(err error, status int) string {
	switch {
	case errors.Is(err, sampler.ErrPromptTooLong):
		return "context_length_exceeded"
	case status == http.StatusBadRequest:
		return "invalid_prompt"
	}
	return "server_error"
}
