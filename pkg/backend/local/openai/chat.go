package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/episode"
	wire "github.com/rllm-org/rllm-go/pkg/openaiwire"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/toolcall"
)

// messageText is the content of message i: a string, null, or a list of
// {"type": "text", "text": ...} parts, joined with newlines as vLLM does.
func messageText(m *wire.InputMessage, i int) (string, *paramError) {
	raw := bytes.TrimSpace(m.Content)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badParam(fmt.Sprintf("messages[%d].content", i), "messages[%d].content must be a string or a list of content parts", i)
	}
	var texts []string
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", badParam(fmt.Sprintf("messages[%d].content[%d].type", i, j), "messages[%d].content[%d] has type %q; the embedded policy reads only {\"type\": \"text\", \"text\": ...} parts", i, j, p.Type)
		}
		texts = append(texts, *p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// renderChat renders messages and tools with the embedded policy's
// template (local.Tokenizer.RenderChat: tool calls and tool results in
// the Hermes format). With continueFinal the last (assistant) message is
// left open for the model to continue. addGen is the request's
// add_generation_prompt: true when unset, and off (refused when set true)
// with continueFinal, as in vLLM.
func renderChat(msgs []wire.InputMessage, tools []sampler.Tool, addGen *bool, continueFinal bool) ([]int, *paramError) {
	addGenerationPrompt := addGen == nil || *addGen
	if continueFinal {
		if addGen != nil && *addGen {
			return nil, badParam("continue_final_message", "continue_final_message and add_generation_prompt cannot both be true")
		}
		addGenerationPrompt = false
	}
	if len(msgs) == 0 {
		return nil, badParam("messages", "messages is required and must not be empty")
	}
	chat := make([]episode.Message, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if m.Role == "" {
			return nil, badParam(fmt.Sprintf("messages[%d].role", i), "messages[%d] has no role", i)
		}
		for j, c := range m.ToolCalls {
			if c.Function.Name == "" {
				return nil, badParam(fmt.Sprintf("messages[%d].tool_calls[%d].function.name", i, j), "messages[%d].tool_calls[%d] names no function", i, j)
			}
		}
		text, perr := messageText(m, i)
		if perr != nil {
			return nil, perr
		}
		chat[i] = episode.Message{Role: m.Role, Content: text, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name}
	}
	tok := local.Tokenizer{}
	if !continueFinal {
		return tok.RenderChat(chat, tools, addGenerationPrompt), nil
	}
	last := chat[len(chat)-1]
	if last.Role != "assistant" || len(last.ToolCalls) > 0 {
		return nil, badParam("continue_final_message", "continue_final_message needs the last message to be the assistant's, without tool_calls; it is %q", last.Role)
	}
	ids := tok.RenderChat(chat[:len(chat)-1], tools, false)
	ids = append(ids, local.TokenImStart)
	return append(ids, tok.Encode(last.Role+"\n"+last.Content, false)...), nil
}

// chatTools reads the request's tools (function tools, as vLLM takes
// them) and tool_choice: "auto" (the default with tools) parses the
// reply's tool calls, "none" renders the tools and parses nothing; a
// forced choice ("required", a named function) is refused, since nothing
// constrains the embedded policy's sampling to a call.
func chatTools(req *chatRequest, o *genOptions) *paramError {
	choice := ""
	if len(req.ToolChoice) > 0 && string(req.ToolChoice) != "null" {
		if json.Unmarshal(req.ToolChoice, &choice) != nil || (choice != "none" && choice != "auto") {
			return badParam("tool_choice", "tool_choice %s is not supported by rllm serve (nothing makes the embedded policy call a tool); send \"auto\" or \"none\"", req.ToolChoice)
		}
	}
	for i, raw := range req.Tools {
		var t sampler.Tool
		if err := json.Unmarshal(raw, &t); err != nil {
			return badParam(fmt.Sprintf("tools[%d]", i), "tools[%d] is not a tool object: %v", i, err)
		}
		if t.Type != "function" {
			return badParam(fmt.Sprintf("tools[%d].type", i), "tools[%d] has type %q; rllm serve offers function tools ({\"type\": \"function\", \"function\": {\"name\": ...}})", i, t.Type)
		}
		if t.Function.Name == "" {
			return badParam(fmt.Sprintf("tools[%d].function.name", i), "tools[%d] has no function.name", i)
		}
		if len(t.Function.Parameters) > 0 && !json.Valid(t.Function.Parameters) {
			return badParam(fmt.Sprintf("tools[%d].function.parameters", i), "tools[%d].function.parameters is not JSON", i)
		}
		o.tools = append(o.tools, t)
	}
	o.parseTools = len(o.tools) > 0 && choice != "none"
	return nil
}

// toolReply splits a finished reply as vLLM's hermes parser does: the
// text without its readable <tool_call> blocks, and the calls, with ids
// unique to the response. ok is false when the reply has no call.
func toolReply(text, idPrefix string) (content string, calls []wireToolCall, ok bool) {
	content, parsed := toolcall.Strip(text, idPrefix)
	for i, c := range parsed {
		calls = append(calls, wireToolCall{Index: i, ID: c.ID, Type: "function", Function: c.Function})
	}
	return content, calls, len(calls) > 0
}

// wireToolCall is a tool call of a response message or stream delta
// (index is the OpenAI stream's; it is harmless in a message).
type wireToolCall struct {
	Index    int                  `json:"index"`
	ID       string               `json:"id"`
	Type     string               `json:"type"`
	Function episode.FunctionCall `json:"function"`
}

type chatRequest struct {
	wire.SamplingFields
	Messages             []wire.InputMessage `json:"messages"`
	MaxCompletionTokens  *int                `json:"max_completion_tokens"`
	Logprobs             bool                `json:"logprobs"`
	TopLogprobs          *int                `json:"top_logprobs"`
	Tools                []json.RawMessage   `json:"tools"`
	ToolChoice           json.RawMessage     `json:"tool_choice"`
	AddGenerationPrompt  *bool               `json:"add_generation_prompt"`
	ContinueFinalMessage bool                `json:"continue_final_message"`
	Echo                 bool                `json:"echo"`
	Store                bool                `json:"store"`
	ReasoningEffort      string              `json:"reasoning_effort"`
	Modalities           []string            `json:"modalities"`
}

// chatKeys also admit request metadata that changes no output:
// metadata, parallel_tool_calls (no tools run), chat_template_kwargs (the
// ChatML template takes none; Jinja ignores unknown ones too).
var chatKeys = union(samplingKeys, keySet("messages", "max_completion_tokens", "logprobs", "top_logprobs", "tools",
	"tool_choice", "parallel_tool_calls", "add_generation_prompt", "continue_final_message", "chat_template_kwargs",
	"echo", "metadata", "store", "reasoning_effort", "modalities"))

type chatMessage struct {
	Role      string  `json:"role"`
	Content   string  `json:"content"`
	Reasoning *string `json:"reasoning"`
	ToolCalls []any   `json:"tool_calls"`
}

type chatChoice struct {
	Index        int                `json:"index"`
	Message      chatMessage        `json:"message"`
	Logprobs     *wire.ChatLogprobs `json:"logprobs"`
	FinishReason any                `json:"finish_reason"`
	StopReason   any                `json:"stop_reason"`
	TokenIDs     []int              `json:"token_ids,omitempty"`
}

// chatChunk is a /v1/chat/completions stream chunk.
type chatChunk struct {
	chunkHead
	Choices        []chatStreamChoice `json:"choices"`
	Usage          *wire.Usage        `json:"usage,omitempty"`
	PromptTokenIDs []int              `json:"prompt_token_ids,omitempty"`
}

// chatResponse is a whole /v1/chat/completions response.
type chatResponse struct {
	chunkHead
	Choices        []chatChoice     `json:"choices"`
	Usage          *wire.Usage      `json:"usage"`
	PromptTokenIDs []int            `json:"prompt_token_ids,omitempty"`
	PromptLogprobs []map[string]any `json:"prompt_logprobs,omitempty"`
}

type chatDelta struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
}

type chatStreamChoice struct {
	Index        int                `json:"index"`
	Delta        chatDelta          `json:"delta"`
	Logprobs     *wire.ChatLogprobs `json:"logprobs"`
	FinishReason any                `json:"finish_reason"`
	StopReason   any                `json:"stop_reason,omitempty"`
	TokenIDs     []int              `json:"token_ids,omitempty"`
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req chatRequest
	if !s.decodeBody(w, r, chatKeys, &req) || !s.checkModel(w, req.Model) {
		return
	}
	if req.MaxTokens == nil {
		req.MaxTokens = req.MaxCompletionTokens
	}
	o, perr := options(&req.SamplingFields, s, 0)
	if perr == nil {
		perr = s.chatOptions(&req, &o)
	}
	if perr != nil {
		writeParamError(w, perr)
		return
	}
	prompt, perr := renderChat(req.Messages, o.tools, req.AddGenerationPrompt, req.ContinueFinalMessage)
	if perr != nil {
		writeParamError(w, perr)
		return
	}
	snap, _ := s.eng.Weights()
	if prompt, perr = s.fitPrompt(prompt, snap.Config().Context, req.TruncatePromptTokens, o.maxTokens, "messages"); perr != nil {
		writeParamError(w, perr)
		return
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	run := s.newRun(&o, [][]int{prompt}, start)
	if !run.begin(w, ctx) {
		return
	}
	defer run.finish()
	head := s.head("chatcmpl-", "chat.completion.chunk", run.version)
	// Tool call ids: the response's id, then the choice and the call.
	callID := func(c *choice) string {
		return "chatcmpl-tool-" + strings.TrimPrefix(head.ID, "chatcmpl-") + "-" + strconv.Itoa(c.index) + "-"
	}
	k := -1
	if req.Logprobs {
		k = 0
		if req.TopLogprobs != nil {
			k = *req.TopLogprobs
		}
	}
	if o.stream {
		sse := newSSE(w, s.opts.WriteTimeout, run.version)
		// The role comes first, for every choice, as vLLM sends it.
		for i, c := range run.choices {
			empty := ""
			chunk := chatChunk{chunkHead: head, Choices: []chatStreamChoice{{Index: c.index, Delta: chatDelta{Role: "assistant", Content: &empty}}}}
			if o.returnIDs && i == 0 {
				chunk.PromptTokenIDs = prompt
			}
			chunk.Usage = run.runningUsage()
			sse.send(chunk)
		}
		if !sse.flush() {
			run.close()
			return
		}
		usageChunk := func(u wire.Usage) any { return chatChunk{chunkHead: head, Choices: []chatStreamChoice{}, Usage: &u} }
		run.streamChoices(ctx, sse, usageChunk, func(c *choice, delta string) any {
			ch := chatStreamChoice{Index: c.index, Delta: chatDelta{Content: &delta}, FinishReason: c.finishReason()}
			if o.parseTools && c.finish != "" {
				// The text held back from the first <tool_call> is sent
				// now: the calls, and what content the stream lacks.
				full := string(c.visible(&o))
				content, calls, ok := toolReply(full, callID(c))
				rest := ""
				if sent := full[:min(c.sentText, len(full))]; strings.HasPrefix(content, sent) {
					rest = content[len(sent):]
				}
				ch.Delta.Content, ch.Delta.ToolCalls = &rest, calls
				if ok && c.finish == "stop" {
					ch.FinishReason = "tool_calls"
				}
			}
			if c.finish != "" {
				ch.StopReason = c.stopReason()
			}
			if k >= 0 {
				ch.Logprobs = chatLogprobsOf(c, c.sentTok, k, o.tokensAsIDs)
			}
			if o.returnIDs {
				ch.TokenIDs = nonNil(c.ids[c.sentTok:])
			}
			return chatChunk{chunkHead: head, Choices: []chatStreamChoice{ch}, Usage: run.runningUsage()}
		})
		return
	}
	choices, ok := answers(ctx, w, run, func(_ int, c *choice) chatChoice {
		ch := chatChoice{Index: c.index, Message: chatMessage{Role: "assistant", Content: string(c.visible(&o)), ToolCalls: []any{}},
			FinishReason: c.finishReason(), StopReason: c.stopReason()}
		if o.parseTools {
			if content, calls, ok := toolReply(ch.Message.Content, callID(c)); ok {
				ch.Message.Content = content
				for _, tc := range calls {
					ch.Message.ToolCalls = append(ch.Message.ToolCalls, tc)
				}
				if c.finish == "stop" {
					ch.FinishReason = "tool_calls"
				}
			}
		}
		if k >= 0 {
			ch.Logprobs = chatLogprobsOf(c, 0, k, o.tokensAsIDs)
		}
		if o.returnIDs {
			ch.TokenIDs = nonNil(c.ids)
		}
		return ch
	})
	if !ok {
		return
	}
	head.Object = "chat.completion"
	u := run.usage()
	resp := chatResponse{chunkHead: head, Choices: choices, Usage: &u}
	if o.returnIDs {
		resp.PromptTokenIDs = prompt
	}
	if o.req.PromptLogprobs >= 0 {
		resp.PromptLogprobs = vllmPromptLogprobs(run.streams[0].PromptLogprobs(), prompt, o.req.PromptLogprobs, o.tokensAsIDs)
	}
	s.writeResult(w, run.version, resp)
}

// chatOptions checks the chat-only fields.
func (s *Server) chatOptions(req *chatRequest, o *genOptions) *paramError {
	if req.TopLogprobs != nil {
		k := *req.TopLogprobs
		if k < 0 || k > s.opts.MaxLogprobs {
			return badParam("top_logprobs", "top_logprobs is %d; use 0 to %d", k, s.opts.MaxLogprobs)
		}
		if k > 0 && !req.Logprobs {
			return badParam("top_logprobs", "top_logprobs needs logprobs: true")
		}
		if req.Logprobs {
			o.req.TopLogprobs = k
		}
	}
	if perr := chatTools(req, o); perr != nil {
		return perr
	}
	switch {
	case req.Echo:
		return badParam("echo", "echo is not supported on chat completions by rllm serve")
	case req.Store:
		return badParam("store", "store is not supported by rllm serve (nothing is stored); send false")
	case req.ReasoningEffort != "":
		return badParam("reasoning_effort", "reasoning_effort is not supported by rllm serve (the embedded policy does not reason)")
	}
	for _, m := range req.Modalities {
		if m != "text" {
			return badParam("modalities", "modality %q is not supported by rllm serve; the embedded policy writes text only", m)
		}
	}
	return nil
}

func chatLogprobsOf(c *choice, from, k int, asIDs bool) *wire.ChatLogprobs {
	lp := &wire.ChatLogprobs{Content: []wire.TokenLogprob{}}
	for i := from; i < len(c.ids); i++ {
		id := c.ids[i]
		e := wire.TokenLogprob{Token: tokenString(id, asIDs), Logprob: wire.EncodeLogprob(c.lps[i]), Bytes: tokenBytes(id), TopLogprobs: []wire.TopLogprob{}}
		for _, alt := range c.tops[i][:min(k, len(c.tops[i]))] {
			e.TopLogprobs = append(e.TopLogprobs, wire.TopLogprob{Token: tokenString(alt.Token, asIDs), Logprob: wire.EncodeLogprob(alt.Logprob), Bytes: tokenBytes(alt.Token)})
		}
		lp.Content = append(lp.Content, e)
	}
	return lp
}
