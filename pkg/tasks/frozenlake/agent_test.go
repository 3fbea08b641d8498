package frozenlake

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler/samplertest"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// playScripted plays the deterministic 4x4 lake (seed 3: Down, Down,
// Right, Down, Right, Right reach G) with the agent's args and returns
// the prompts the model was sent and the steps.
func playScripted(t *testing.T, args map[string]any, replies ...string) ([][]episode.Message, []episode.Step) {
	t.Helper()
	s := samplertest.Texts(replies...)
	w, err := workflow.New("multi_turn", nil, workflow.Deps{
		Sampler: s, MaxSteps: 10,
		Agent: workflow.Component{Name: "frozenlake", Args: args},
		Env:   workflow.Component{Name: "frozenlake", Args: map[string]any{"map_name": "4x4", "is_slippery": false}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := w.Run(context.Background(), episode.Task{"seed": 3}, "fl:0")
	if err != nil {
		t.Fatal(err)
	}
	var prompts [][]episode.Message
	for _, r := range s.Requests {
		prompts = append(prompts, r.Messages)
	}
	return prompts, ep.Trajectories[0].Steps
}

func roles(ms []episode.Message) string {
	var rs []string
	for _, m := range ms {
		rs = append(rs, m.Role)
	}
	return strings.Join(rs, ",")
}

const remaining = "The maximum number of steps remaining is "

// With the history (rLLM's default) each prompt is the whole
// conversation; without it, the system message and the newest grid.
func TestAgentHistory(t *testing.T) {
	replies := []string{"```Down```", "```Down```", "```Right```", "```Down```", "```Right```", "```Right```"}
	for _, tc := range []struct {
		name  string
		args  map[string]any
		roles []string
	}{
		{"default", nil, []string{"system,user", "system,user,assistant,user", "system,user,assistant,user,assistant,user"}},
		{"accumulate", map[string]any{"use_accumulate_history": true}, []string{"system,user", "system,user,assistant,user", "system,user,assistant,user,assistant,user"}},
		{"rLLM's spelling", map[string]any{"use_accumulate_history": "True"}, []string{"system,user", "system,user,assistant,user", "system,user,assistant,user,assistant,user"}},
		{"forget", map[string]any{"use_accumulate_history": false}, []string{"system,user", "system,user", "system,user"}},
		{"forget, no system prompt", map[string]any{"use_accumulate_history": false, "system_prompt": ""}, []string{"user", "user", "user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prompts, steps := playScripted(t, tc.args, replies...)
			if len(prompts) < len(tc.roles) {
				t.Fatalf("%d prompts, want at least %d", len(prompts), len(tc.roles))
			}
			for i, want := range tc.roles {
				p := prompts[i]
				if got := roles(p); got != want {
					t.Errorf("prompt %d: roles %s, want %s", i, got, want)
				}
				// The last message is always the grid after i moves.
				last := p[len(p)-1].Content
				if p[len(p)-1].Role != "user" || !strings.Contains(last, "Current observation:") {
					t.Errorf("prompt %d ends with %+v", i, p[len(p)-1])
				}
				// A step records what the model was sent and what it said.
				cc := steps[i].ChatCompletions
				if len(cc) != len(p)+1 || roles(cc[:len(p)]) != roles(p) || cc[len(cc)-1].Role != "assistant" || cc[len(cc)-1].Content != replies[i] {
					t.Errorf("step %d records %s, want the prompt (%s) and the reply", i, roles(cc), roles(p))
				}
				if strings.Contains(last, remaining) {
					t.Errorf("prompt %d counts moves without max_steps: %q", i, last)
				}
			}
			if tc.roles[1] == "system,user" && prompts[1][1].Content == prompts[0][1].Content {
				t.Error("without history the second prompt shows the first grid")
			}
		})
	}
}

// max_steps ends each observation with the moves left, counting those
// made, while any are left; it does not end the episode (agent.max_steps
// and the env's max_steps do).
func TestAgentMaxSteps(t *testing.T) {
	replies := []string{"```Down```", "```Down```", "```Right```", "```Down```", "```Right```", "```Right```"}
	prompts, steps := playScripted(t, map[string]any{"max_steps": 3}, replies...)
	if len(steps) != 6 {
		t.Fatalf("%d steps, want 6: max_steps does not stop the agent", len(steps))
	}
	for i, p := range prompts {
		last := p[len(p)-1].Content
		left := 3 - i
		switch {
		case left > 0 && !strings.HasSuffix(last, fmt.Sprintf("\n%s%d.", remaining, left)):
			t.Errorf("prompt %d: %q does not end with %d steps remaining", i, last, left)
		case left <= 0 && strings.Contains(last, remaining):
			t.Errorf("prompt %d: %q counts steps past max_steps", i, last)
		}
	}
}

func TestAgentArgsAreChecked(t *testing.T) {
	for _, args := range []map[string]any{
		{"max_steps": -1},
		{"max_steps": "ten"},
		{"use_accumulate_history": "sometimes"},
	} {
		if _, _, err := agent.Resolve("frozenlake", args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	d, v, err := agent.Resolve("frozenlake", map[string]any{"max_steps": 10, "use_accumulate_history": false})
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.New(v)
	if err != nil {
		t.Fatal(err)
	}
	if fa := a.(*Agent); fa.MaxSteps != 10 || !fa.Forget || fa.System != SystemPrompt {
		t.Errorf("agent %+v", fa)
	}
}
