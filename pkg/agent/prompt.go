package agent

import (
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// Prompt is the agent of single-turn tasks (rLLM's MathAgent and kin): it
// asks the task's question, optionally after a system prompt and with an
// instruction appended, and hands the whole reply to the env, which
// extracts and scores the answer.
type Prompt struct {
	Base
	System      string
	Instruction string
}

// PromptParams are the arguments of every Prompt-based agent. Register
// such an agent with the task's own defaults filled in:
//
//	agent.RegisterPrompt("math", description, agent.PromptParams{Instruction: MathInstruction})
type PromptParams struct {
	SystemPrompt string `arg:"system_prompt" doc:"system message sent first (empty: none)"`
	Instruction  string `arg:"instruction" doc:"text appended to the question after a space (empty: none)"`
}

// RegisterPrompt registers a Prompt agent, the agent of a single-turn
// task, under name; defaults are its arguments' defaults.
func RegisterPrompt(name, description string, defaults PromptParams) {
	Register(Definition{Name: name, Description: description, Params: defaults, New: NewPrompt})
}

// NewPrompt builds a Prompt agent from PromptParams values.
func NewPrompt(args registry.Values) (Agent, error) {
	p := registry.As[PromptParams](args)
	return &Prompt{System: p.SystemPrompt, Instruction: p.Instruction}, nil
}

// UpdateFromEnv turns the first observation (the task row) into the
// question; later observations of a single-turn env carry nothing to say.
func (p *Prompt) UpdateFromEnv(obs any, _ float64, done bool, _ map[string]any) {
	text := ObservationText(obs)
	if done || text == "" {
		return
	}
	p.StartWithSystem(p.System)
	if len(p.Traj.Steps) == 0 && p.Instruction != "" {
		text = strings.TrimRight(text, " ") + " " + p.Instruction
	}
	p.AddUser(text)
}

// UpdateFromModel passes the whole reply on as the answer.
func (p *Prompt) UpdateFromModel(resp sampler.Response) episode.Action {
	act := episode.Action{Content: resp.Text}
	p.RecordModel(resp, act)
	return act
}
