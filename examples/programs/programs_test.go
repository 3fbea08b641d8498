// Package programs holds agent programs in Python and JavaScript that rllm
// trains through the recording gateway (workflow.name=program); this test
// runs each against a deterministic model with the real SDK packages
// (installed by scripts/fetch-openai-node.sh, scripts/fetch-openai-agents.sh
// and scripts/fetch-anthropic-node.sh).
package programs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway/gatewaytest"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	_ "github.com/rllm-org/rllm-go/pkg/tasks"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// stage copies an example next to a node_modules link, since Node's ES
// module resolution looks for packages beside the script, not on
// NODE_PATH.
func stage(t *testing.T, script, modules string) []any {
	t.Helper()
	node := repotest.Node(t)
	mods := filepath.Join(repotest.Root(t), "testdata", modules, "node_modules")
	if _, err := os.Stat(mods); err != nil {
		repotest.Missing(t, "testdata/"+modules+"/node_modules is missing; run scripts/fetch-openai-node.sh, scripts/fetch-openai-agents.sh and scripts/fetch-anthropic-node.sh")
	}
	dir := t.TempDir()
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, script), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mods, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return []any{node, filepath.Join(dir, script)}
}

var sum = regexp.MustCompile(`(\d+)\s*([+\-*/])\s*(\d+)`)

// solve answers "a op b" questions.
func solve(text string) string {
	m := sum.FindStringSubmatch(text)
	if m == nil {
		return "?"
	}
	a, _ := strconv.Atoi(m[1])
	b, _ := strconv.Atoi(m[3])
	switch m[2] {
	case "+":
		return strconv.Itoa(a + b)
	case "-":
		return strconv.Itoa(a - b)
	case "*":
		return strconv.Itoa(a * b)
	}
	return strconv.Itoa(a / max(b, 1))
}

// model answers arithmetic; offered tools, it calls calculator first and
// answers with the tool's result.
var model = &gatewaytest.Sampler{Reply: func(req sampler.Request) gatewaytest.Reply {
	last := req.Messages[len(req.Messages)-1]
	switch {
	case last.Role == "tool":
		return gatewaytest.Reply{Text: last.Content}
	case len(req.Tools) > 0:
		m := sum.FindStringSubmatch(last.Content)
		expr := "0"
		if m != nil {
			expr = m[1] + m[2] + m[3]
		}
		return gatewaytest.Reply{ToolCalls: []episode.ToolCall{{ID: "call_calc_1", Type: "function",
			Function: episode.FunctionCall{Name: req.Tools[0].Function.Name, Arguments: `{"expression":"` + expr + `"}`}}}}
	}
	return gatewaytest.Reply{Text: solve(last.Content)}
}}

// play runs the program on a few arith tasks and checks each episode:
// every step recorded from a call to endpoint.
func play(t *testing.T, command []any, endpoint string, turns int, passEnv ...any) {
	t.Helper()
	spec := workflow.Spec{Name: "program", Args: map[string]any{"command": command, "timeout_s": 120, "pass_env": passEnv},
		Deps: workflow.Deps{Env: workflow.Component{Name: "arith"}}}
	w, err := spec.New(model, sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range []string{"3+4=", "9-2=", "5+5="} {
		task := episode.Task{"question": q, "ground_truth": solve(q), "data_source": "arith"}
		ep, err := w.Run(context.Background(), task, "arith-"+strconv.Itoa(i)+":0")
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if !ep.IsCorrect || len(ep.Trajectories) != 1 || len(ep.Trajectories[0].Steps) != turns {
			t.Fatalf("%s: correct %v, %d trajectories (%+v)", q, ep.IsCorrect, len(ep.Trajectories), ep.Trajectories)
		}
		for _, st := range ep.Trajectories[0].Steps {
			if st.Info["endpoint"] != endpoint {
				t.Fatalf("%s: a step from %v, want %s", q, st.Info["endpoint"], endpoint)
			}
		}
		seqs, st, err := rollout.Assemble([]*episode.Episode{ep}, rollout.AssembleOptions{FilterTokenMismatch: true})
		if err != nil || st.TokenMismatches != 0 || len(seqs) != 1 {
			t.Fatalf("%s: assemble %v %+v", q, err, st)
		}
	}
}

func TestOpenAINodeProgram(t *testing.T) {
	play(t, stage(t, "openai_agent.mjs", "node"), "chat.completions", 1)
}

func TestAgentsSDKProgram(t *testing.T) {
	// The SDK's default model (OpenAIResponsesModel, /v1/responses): turn
	// 1 calls the calculator, turn 2 answers with its result.
	play(t, stage(t, "agents_tool.mjs", "node-agents"), "responses", 2)
}

func TestAgentsSDKProgramStreamed(t *testing.T) {
	// The same with every turn streamed: Responses events over SSE.
	t.Setenv("AGENT_STREAM", "1")
	play(t, stage(t, "agents_tool.mjs", "node-agents"), "responses", 2, "AGENT_STREAM")
}

func TestAgentsSDKProgramChatCompletions(t *testing.T) {
	// The SDK's chat completions model, streamed: tool-call fragments.
	t.Setenv("AGENT_API", "chat_completions")
	t.Setenv("AGENT_STREAM", "1")
	play(t, stage(t, "agents_tool.mjs", "node-agents"), "chat.completions", 2, "AGENT_API", "AGENT_STREAM")
}

func TestAnthropicNodeProgram(t *testing.T) {
	// /v1/messages, streamed: a tool_use turn, then the answer.
	play(t, stage(t, "anthropic_agent.mjs", "node-anthropic"), "messages", 2)
}

func TestPythonProgram(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: skipping the Python agent program")
	}
	if out, err := exec.Command(py, "-c", "import openai").CombinedOutput(); err != nil {
		t.Skipf("python3 cannot import openai (pip install openai to run this test): %s", strings.TrimSpace(string(out)))
	}
	play(t, []any{py, "openai_agent.py"}, "chat.completions", 1)
}
