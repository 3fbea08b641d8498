package frozenlake

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// SystemPrompt explains the game and the answer format to the model.
const SystemPrompt = "You are walking on a frozen lake.\n" +
	"Goal: reach the goal G; you are P. Symbols: _ frozen ice, O hole, G goal, P you, X you fell in a hole, √ you reached the goal.\n" +
	"The ice may be slippery: you may move perpendicular to where you intended.\n" +
	"Each turn, think briefly, then give exactly one move, Left, Down, Right or Up, inside triple backticks, e.g. ```Up```."

func init() {
	agent.Register(agent.Definition{
		Name:        "frozenlake",
		Description: "shows the grid as text and reads a move from the reply's last ```...``` block",
		Params:      AgentParams{System: SystemPrompt, AccumulateHistory: true},
		New: func(args registry.Values) (agent.Agent, error) {
			p := registry.As[AgentParams](args)
			return &Agent{System: p.System, MaxSteps: p.MaxSteps, Forget: !p.AccumulateHistory}, nil
		},
	})
}

// AgentParams are the agent's arguments. max_steps and
// use_accumulate_history are rLLM's FrozenLakeAgent's
// (rllm/agents/frozenlake_agent.py at rllm-org/rllm 7982c508).
type AgentParams struct {
	System            string `arg:"system_prompt" doc:"system message"`
	MaxSteps          int    `arg:"max_steps" range:"[0,)" doc:"moves the agent is told it has: each prompt ends with how many remain (0: not said); the episode's length is agent.max_steps and the env's max_steps"`
	AccumulateHistory bool   `arg:"use_accumulate_history" doc:"send the whole conversation each turn; false sends the system message and the current observation only (then train with algorithm.stepwise_advantage.enable=true: each turn's prompt is new, not the last one extended)"`
}

// Agent plays FrozenLake through chat.
type Agent struct {
	agent.Base
	System string
	// MaxSteps > 0 ends each observation with the moves left of it
	// (rLLM's max_steps); it does not end the episode.
	MaxSteps int
	// Forget sends only the system message and the newest observation
	// (rLLM's use_accumulate_history=false).
	Forget bool
}

// UpdateFromEnv shows the new grid.
func (a *Agent) UpdateFromEnv(obs any, _ float64, done bool, info map[string]any) {
	if done {
		return
	}
	a.StartWithSystem(a.System)
	text := "Current observation:\n" + agent.ObservationText(obs)
	if reason, ok := info["format_error"].(string); ok {
		text = "Your last move was not understood: " + reason + ".\n" + text
	}
	text += "\nGive your next move."
	// As rLLM words it, counting the moves made so far; said while any
	// remain.
	if left := a.MaxSteps - len(a.Traj.Steps); a.MaxSteps > 0 && left > 0 {
		text += fmt.Sprintf("\nThe maximum number of steps remaining is %d.", left)
	}
	a.AddUser(text)
}

// Messages is the next prompt: the whole conversation, or without
// history the system message (if any) and the newest observation.
func (a *Agent) Messages() []episode.Message {
	if !a.Forget {
		return a.Msgs
	}
	return a.prompt()
}

// FreshPrompts says the prompts leave the history out (agent.FreshPrompter).
func (a *Agent) FreshPrompts() string {
	if a.Forget {
		return "agent.args.use_accumulate_history: false sends each turn the system message and the newest grid only"
	}
	return ""
}

// prompt is the system message and the last message, or what there is.
func (a *Agent) prompt() []episode.Message {
	var out []episode.Message
	if len(a.Msgs) > 0 && a.Msgs[0].Role == "system" {
		out = append(out, a.Msgs[0])
	}
	if n := len(a.Msgs); n > len(out) {
		out = append(out, a.Msgs[n-1])
	}
	return out
}

var reBlock = regexp.MustCompile("(?s)```(.*?)```")

// ParseReply finds the move in a reply: the last ```...``` block, else
// the reply itself when it is a bare move. ok is false when neither reads
// as a move.
func ParseReply(reply string) (string, bool) {
	reply = strings.TrimSpace(reply)
	if i := strings.LastIndex(reply, "</think>"); i >= 0 {
		reply = strings.TrimSpace(reply[i+len("</think>"):])
	}
	candidate := reply
	if m := reBlock.FindAllStringSubmatch(reply, -1); len(m) > 0 {
		candidate = m[len(m)-1][1]
	}
	if a, ok := ParseAction(candidate); ok {
		return ActionNames[a], true
	}
	return "", false
}

// UpdateFromModel parses the move. An unreadable reply is passed on
// verbatim: the env scores it as a format error and says why.
func (a *Agent) UpdateFromModel(resp sampler.Response) episode.Action {
	move, ok := ParseReply(resp.Text)
	act := episode.Action{Content: move}
	if !ok {
		act.Content = resp.Text
	}
	sent := a.Messages()
	st := a.RecordModel(resp, act)
	if a.Forget {
		// The step holds what the model saw and said.
		st.ChatCompletions = append(append([]episode.Message(nil), sent...), a.Msgs[len(a.Msgs)-1])
	}
	if !ok {
		st.Info = map[string]any{"parse_error": "no move in the reply"}
	}
	return act
}

// FormatExample is a random move in the format the agent reads (```Up```):
// the format, not the way to the goal.
func FormatExample(_ string, rng *rand.Rand) string {
	return "```" + ActionNames[rng.IntN(len(ActionNames))] + "```"
}
