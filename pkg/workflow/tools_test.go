package workflow_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/sampler/samplertest"
	_ "github.com/rllm-org/rllm-go/pkg/tasks" // math env, tool_agent
	"github.com/rllm-org/rllm-go/pkg/tool"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// toolSampler replays replies that may carry server-parsed tool calls
// (as vLLM with a tool parser returns them), with byte tokens.
type toolSampler struct {
	mu       sync.Mutex
	replies  []sampler.Response
	requests []sampler.Request
}

func (s *toolSampler) Sample(_ context.Context, req sampler.Request) (sampler.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
	r := s.replies[len(s.requests)-1]
	r.CompletionIDs = samplertest.Tokens(r.Text + r.FinishReason)
	r.Logprobs = make([]float64, len(r.CompletionIDs))
	r.PromptIDs = []int{1, 2, 3}
	return r, nil
}

func call(id, name, args string) episode.ToolCall {
	return episode.ToolCall{ID: id, Type: "function", Function: episode.FunctionCall{Name: name, Arguments: args}}
}

func TestToolAgent(t *testing.T) {
	box, err := tool.Open(context.Background(), tool.Config{Builtin: []string{"calculator"}})
	if err != nil {
		t.Fatal(err)
	}
	s := &toolSampler{replies: []sampler.Response{
		// OpenAI tool_calls from a server with a tool parser.
		{Text: "", ToolCalls: []episode.ToolCall{call("c1", "calculator", `{"expression": "123456789 * 1000"}`), call("c2", "calculater", `{}`)}, FinishReason: "tool_calls"},
		// Hermes/Qwen text from a server without one; one call is not JSON.
		{Text: `Let me check. <tool_call>{"name": "calculator", "arguments": {"expression": "2/4"}}</tool_call><tool_call>{"name": calculator}</tool_call>`, FinishReason: "stop"},
		// Arguments that do not match the schema.
		{Text: "", ToolCalls: []episode.ToolCall{call("c3", "calculator", `{"expression": 5}`)}, FinishReason: "tool_calls"},
		{Text: `The answer is \boxed{1/2}.`, FinishReason: "stop"},
	}}
	w, err := workflow.New("single_turn", nil, workflow.Deps{
		Sampler: s, Toolbox: box, MaxSteps: 10,
		Agent: workflow.Component{Name: "tool_agent"}, Env: workflow.Component{Name: "math"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := w.Run(context.Background(), episode.Task{"question": "What is 2/4?", "ground_truth": "1/2"}, "q:0")
	if err != nil {
		t.Fatal(err)
	}
	steps := ep.Trajectories[0].Steps
	if ep.TerminationReason != episode.TerminationEnvDone || !ep.IsCorrect || len(steps) != 4 || ep.Trajectories[0].Reward != 1 {
		t.Fatalf("%s correct=%v steps=%d reward=%v %s", ep.TerminationReason, ep.IsCorrect, len(steps), ep.Trajectories[0].Reward, ep.Error)
	}
	// Every model call is a step with its exact tokens, tool calls included.
	for i, st := range steps {
		want := samplertest.Tokens(s.replies[i].Text + s.replies[i].FinishReason)
		if len(st.ResponseIDs) != len(want) || len(st.LossMask) != len(want) || st.LossMask[0] != 1 {
			t.Errorf("step %d: %d tokens, mask %d; want %d", i, len(st.ResponseIDs), len(st.LossMask), len(want))
		}
	}
	if steps[0].Info["tool_calls"] != 2 || steps[0].Info["tool_errors"] != 1 || steps[3].Reward != 1 || steps[0].Reward != 0 {
		t.Errorf("infos %v %v rewards %v %v", steps[0].Info, steps[3].Info, steps[0].Reward, steps[3].Reward)
	}
	// Tools offered on every call; results came back as tool messages.
	if len(s.requests[0].Tools) != 1 || s.requests[0].Tools[0].Function.Name != "calculator" {
		t.Fatalf("tools %+v", s.requests[0].Tools)
	}
	var tools []string
	for _, m := range s.requests[3].Messages {
		if m.Role == "tool" {
			tools = append(tools, m.ToolCallID+"="+m.Content)
		}
	}
	got := strings.Join(tools, "\n")
	for _, want := range []string{
		"c1=123456789000",
		`c2=error: there is no tool named "calculater"; did you mean "calculator"?`,
		"call_1_0=1/2",
		"call_1_1=error: the tool call could not be read",
		"c3=error: the arguments of calculator do not match its schema",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("tool messages lack %q:\n%s", want, got)
		}
	}
	// The text of a Hermes reply stays verbatim in the conversation.
	if m := s.requests[2].Messages; m[len(m)-3].Content != s.replies[1].Text {
		t.Errorf("assistant message %q", m[len(m)-3].Content)
	}
}

func TestToolRoundsBounded(t *testing.T) {
	box, _ := tool.Open(context.Background(), tool.Config{Builtin: []string{"calculator"}})
	loop := sampler.Response{Text: `<tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call>`, FinishReason: "stop"}
	s := &toolSampler{replies: []sampler.Response{loop, loop, loop, loop}}
	w, err := workflow.New("single_turn", nil, workflow.Deps{Sampler: s, Toolbox: box, MaxSteps: 3,
		Agent: workflow.Component{Name: "tool_agent"}, Env: workflow.Component{Name: "math"}})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := w.Run(context.Background(), episode.Task{"question": "q", "ground_truth": "1"}, "q:0")
	if err != nil || ep.TerminationReason != episode.TerminationMaxTurns || len(ep.Trajectories[0].Steps) != 3 {
		t.Fatalf("%v %s %d", err, ep.TerminationReason, len(ep.Trajectories[0].Steps))
	}
}

// TestWorkspaceToolsNeedAWorkspaceEnv: the bash tool runs in an episode's
// workspace; with an env that has none, the workflow is refused before
// any episode, naming tools.builtin and the fix.
func TestWorkspaceToolsNeedAWorkspaceEnv(t *testing.T) {
	deps := workflow.Deps{Sampler: &toolSampler{}, ToolConfig: tool.Config{Builtin: []string{"calculator", "bash"}},
		Agent: workflow.Component{Name: "tool_agent"}, Env: workflow.Component{Name: "math"}}
	_, err := workflow.New("multi_turn", nil, deps)
	if err == nil || !strings.Contains(err.Error(), `tools.builtin: bash runs in the episode's workspace, and env "math" has none; use env.name=task`) {
		t.Fatalf("%v", err)
	}
	if err := workflow.CheckWorkspaceTools(deps); err == nil {
		t.Fatal("CheckWorkspaceTools let bash through with env math")
	}
	deps.Env.Name = "task"
	if err := workflow.CheckWorkspaceTools(deps); err != nil {
		t.Fatal(err)
	}
}

// TestSpecWorkspaces: the spec hands workflows that run their own agent
// the env's workspace hook when the env has one (env.name=task), and
// none otherwise.
func TestSpecWorkspaces(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want bool
	}{{"task", true}, {"math", false}} {
		if _, _, err := env.Resolve(tc.env, nil); err != nil && os.Getenv("RLLM_REQUIRE_DOCKER") == "" {
			// env task resolves only where a Docker daemon answers;
			// elsewhere the env's own error is what a run reports.
			t.Logf("env %s does not resolve here (%v); not checked", tc.env, err)
			continue
		}
		ld, err := config.Load(config.Sources{Args: []string{"env.name=" + tc.env}})
		if err != nil {
			t.Fatal(err)
		}
		if got := workflow.SpecFromConfig(ld.Config).Deps.Workspaces != nil; got != tc.want {
			t.Errorf("env %s: Workspaces set %v, want %v", tc.env, got, tc.want)
		}
	}
}
