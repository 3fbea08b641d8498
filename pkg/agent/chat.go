package agent

import (
	"encoding/json"
	"fmt"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

func init() {
	Register(Definition{
		Name:        "chat",
		Description: "for environments that speak text (exec, openenv): each observation becomes the next user message, each reply the next action",
		Params:      ChatParams{},
		New: func(v registry.Values) (Agent, error) {
			p := registry.As[ChatParams](v)
			return &Chat{System: p.SystemPrompt}, nil
		},
	})
}

// ChatParams are the chat agent's arguments.
type ChatParams struct {
	SystemPrompt string `arg:"system_prompt" doc:"system message sent first (empty: none)"`
}

// Chat is the generic multi-turn agent: observation in, reply out.
type Chat struct {
	Base
	System string
}

// UpdateFromEnv adds the observation as a user message; the observation
// that ends the episode is not shown (nothing will answer it).
func (c *Chat) UpdateFromEnv(obs any, _ float64, done bool, _ map[string]any) {
	if done {
		return
	}
	c.StartWithSystem(c.System)
	c.AddUser(ObservationMessage(obs))
}

// UpdateFromModel passes the whole reply on as the action.
func (c *Chat) UpdateFromModel(resp sampler.Response) episode.Action {
	act := episode.Action{Content: resp.Text}
	c.RecordModel(resp, act)
	return act
}

// ObservationMessage renders an observation from an outside environment
// as a user message: a string as it is; of an object its text, prompt or
// question field (the first that is a string); anything else as JSON.
func ObservationMessage(obs any) string {
	if s, ok := observationString(obs, "text", "prompt", "question"); ok {
		return s
	}
	b, err := json.Marshal(obs)
	if err != nil {
		return fmt.Sprint(obs)
	}
	return string(b)
}
