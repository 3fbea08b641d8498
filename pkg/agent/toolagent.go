package agent

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/toolcall"
)

func init() {
	Register(Definition{
		Name:        "tool_agent",
		Description: "asks the task's question with tools (tools.builtin, tools.mcp) offered; runs the calls the model makes and hands its final answer to the env to score",
		Params:      ToolAgentParams{ParseText: true},
		New: func(v registry.Values) (Agent, error) {
			p := registry.As[ToolAgentParams](v)
			return &ToolAgent{Params: p}, nil
		},
	})
}

// ToolUser is an agent that takes tool results: the workflow runs the
// ToolCalls of its action and hands back one tool message per call
// instead of stepping the env.
type ToolUser interface {
	UpdateFromTools(results []episode.Message)
}

// ToolAgentParams are tool_agent's arguments.
type ToolAgentParams struct {
	SystemPrompt string `arg:"system_prompt" doc:"system message sent first (empty: none)"`
	Instruction  string `arg:"instruction" doc:"text appended to the question after a space (empty: none)"`
	ParseText    bool   `arg:"parse_text_tool_calls" doc:"when the server returns no tool_calls, read Hermes/Qwen <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> from the reply text"`
}

// ToolAgent is rLLM's ToolAgent: OpenAI tool calls in, tool messages
// back, the final reply (one without calls) is the answer.
type ToolAgent struct {
	Base
	Params ToolAgentParams
}

// UpdateFromEnv asks the question of the first observation; later
// observations (a multi-turn env's) become user messages too.
func (a *ToolAgent) UpdateFromEnv(obs any, _ float64, done bool, _ map[string]any) {
	text := ObservationText(obs)
	if done || text == "" {
		return
	}
	a.StartWithSystem(a.Params.SystemPrompt)
	if len(a.Traj.Steps) == 0 && a.Params.Instruction != "" {
		text = strings.TrimRight(text, " ") + " " + a.Params.Instruction
	}
	a.AddUser(text)
}

// UpdateFromModel reads the tool calls: the server's, else (when the
// server has no tool parser) those written as <tool_call> text. The
// reply's text is kept verbatim in the conversation, so the next prompt
// shows the model exactly what it wrote.
func (a *ToolAgent) UpdateFromModel(resp sampler.Response) episode.Action {
	calls := resp.ToolCalls
	if len(calls) == 0 && a.Params.ParseText {
		calls = ParseToolCallText(resp.Text, fmt.Sprintf("call_%d_", len(a.Traj.Steps)))
	}
	act := episode.Action{Content: resp.Text, ToolCalls: calls}
	a.RecordModel(resp, act)
	return act
}

// UpdateFromTools appends the tool results.
func (a *ToolAgent) UpdateFromTools(results []episode.Message) {
	a.Msgs = append(a.Msgs, results...)
}

// ParseToolCallText reads Hermes/Qwen tool calls from reply text:
// <tool_call>{"name": "f", "arguments": {...}}</tool_call>, any number of
// them. arguments may also be a JSON string. A block that does not parse
// becomes a call with an empty name and the block as its arguments, so
// the model is told its call was unreadable. Ids are prefix + index.
func ParseToolCallText(text, prefix string) []episode.ToolCall {
	if i := strings.LastIndex(text, "</think>"); i >= 0 {
		text = text[i+len("</think>"):]
	}
	var out []episode.ToolCall
	for i, b := range toolcall.Blocks(text) {
		call := episode.ToolCall{ID: fmt.Sprintf("%s%d", prefix, i), Type: "function"}
		if !b.OK {
			call.Function.Arguments = b.Body
			out = append(out, call)
			continue
		}
		call.Function.Name, call.Function.Arguments = b.Name, b.Arguments
		var s string
		if json.Unmarshal([]byte(b.Arguments), &s) == nil {
			call.Function.Arguments = s // arguments written as a JSON string
		}
		out = append(out, call)
	}
	return out
}
