package agent

import (
	"fmt"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// Base does the bookkeeping most agents share: the message list and the
// trajectory. Embed it and implement the parts that differ (how an
// observation becomes a message, how a reply becomes an action).
type Base struct {
	Msgs []episode.Message
	Traj episode.Trajectory
}

// Reset clears messages and trajectory.
func (b *Base) Reset() {
	b.Msgs = nil
	b.Traj = episode.Trajectory{}
}

// Messages returns the messages so far.
func (b *Base) Messages() []episode.Message { return b.Msgs }

// Trajectory returns the trajectory so far.
func (b *Base) Trajectory() *episode.Trajectory { return &b.Traj }

// AddUser appends a user message.
func (b *Base) AddUser(content string) {
	b.Msgs = append(b.Msgs, episode.Message{Role: "user", Content: content})
}

// AddSystem appends a system message.
func (b *Base) AddSystem(content string) {
	b.Msgs = append(b.Msgs, episode.Message{Role: "system", Content: content})
}

// StartWithSystem opens the conversation with the system prompt: it adds
// content as the system message when nothing was said yet and content is
// not empty.
func (b *Base) StartWithSystem(content string) {
	if len(b.Msgs) == 0 && content != "" {
		b.AddSystem(content)
	}
}

// RecordModel appends the assistant reply to the messages and a Step
// holding it to the trajectory. It returns the new step so the caller can
// add Info.
func (b *Base) RecordModel(resp sampler.Response, action episode.Action) *episode.Step {
	b.Msgs = append(b.Msgs, episode.Message{
		Role: "assistant", Content: resp.Text, Reasoning: resp.Reasoning, ToolCalls: resp.ToolCalls,
	})
	b.Traj.Steps = append(b.Traj.Steps, episode.Step{
		ChatCompletions: append([]episode.Message(nil), b.Msgs...),
		Thought:         thought(resp),
		ModelResponse:   resp.Text,
		Action:          action,
	})
	return &b.Traj.Steps[len(b.Traj.Steps)-1]
}

// thought is the model's reasoning: the separate reasoning field when the
// server split it out, else the text before an inline </think>.
func thought(resp sampler.Response) string {
	if resp.Reasoning != "" {
		return resp.Reasoning
	}
	if i := strings.LastIndex(resp.Text, "</think>"); i >= 0 {
		return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(resp.Text[:i]), "<think>"))
	}
	return ""
}

// ObservationText renders an observation as message text: strings as
// they are; of an object its question, problem, prompt or observation
// field (the first that is a string); anything else with fmt.
func ObservationText(obs any) string {
	if s, ok := observationString(obs, "question", "problem", "prompt", "observation"); ok {
		return s
	}
	switch o := obs.(type) {
	case fmt.Stringer:
		return o.String()
	case map[string]any:
		if len(o) == 0 {
			return ""
		}
	}
	return fmt.Sprint(obs)
}

// observationString is what ObservationText and ObservationMessage share:
// obs itself when it is a string ("" for nil), or the first of fields
// that holds a string when it is an object; ok is false for anything else.
func observationString(obs any, fields ...string) (string, bool) {
	switch o := obs.(type) {
	case nil:
		return "", true
	case string:
		return o, true
	case map[string]any:
		for _, k := range fields {
			if s, ok := o[k].(string); ok {
				return s, true
			}
		}
	}
	return "", false
}
