package frozenlake

import (
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
		Params:      AgentParams{System: SystemPrompt},
		New: func(args registry.Values) (agent.Agent, error) {
			return &Agent{System: registry.As[AgentParams](args).System}, nil
		},
	})
}

// AgentParams are the agent's arguments.
type AgentParams struct {
	System string `arg:"system_prompt" doc:"system message"`
}

// Agent plays FrozenLake through chat.
type Agent struct {
	agent.Base
	System string
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
	a.AddUser(text + "\nGive your next move.")
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
	st := a.RecordModel(resp, act)
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
