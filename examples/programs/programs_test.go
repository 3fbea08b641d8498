// Package programs holds agent programs in Python and JavaScript that rllm
// trains through the recording gateway (workflow.name=program); this test
// runs each against a deterministic model with the real SDK packages
// (installed by scripts/fetch-openai-node.sh, scripts/fetch-openai-agents.sh
// and scripts/fetch-anthropic-node.sh).
package programs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway/gatewaytest"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	_ "github.com/rllm-org/rllm-go/pkg/tasks"
	"github.com/rllm-org/rllm-go/pkg/workflow"
	"github.com/rllm-org/rllm-go/pkg/workflow/program"
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
	dir := copyTo(t, script, "rllm_program.mjs")
	if err := os.Symlink(mods, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return []any{node, filepath.Join(dir, script)}
}

// copyTo copies example files into a fresh directory.
func copyTo(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
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

// play runs the program on a few arith tasks, per episode and served
// (the served episodes at once), and checks each episode: every step
// recorded from a call to endpoint.
func play(t *testing.T, command []any, endpoint string, turns int, passEnv ...any) {
	t.Helper()
	defer program.CloseServers()
	for _, mode := range []string{program.ModePerEpisode, program.ModeServe} {
		spec := workflow.Spec{Name: "program", Args: map[string]any{"command": command, "timeout_s": 120, "pass_env": passEnv, "mode": mode},
			Deps: workflow.Deps{Env: workflow.Component{Name: "arith"}}}
		w, err := spec.New(model, sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 16})
		if err != nil {
			t.Fatal(err)
		}
		questions := []string{"3+4=", "9-2=", "5+5="}
		if mode == program.ModeServe {
			questions = append(questions, "8-1=", "2+2=", "6+3=", "9-9=", "1+8=")
		}
		errs := make(chan error, len(questions))
		for i, q := range questions {
			one := func() error {
				task := episode.Task{"question": q, "ground_truth": solve(q), "data_source": "arith"}
				ep, err := w.Run(context.Background(), task, "arith-"+strconv.Itoa(i)+":0")
				if err != nil {
					return fmt.Errorf("%s %s: %v", mode, q, err)
				}
				if !ep.IsCorrect || len(ep.Trajectories) != 1 || len(ep.Trajectories[0].Steps) != turns {
					return fmt.Errorf("%s %s: correct %v, %d trajectories (%+v)", mode, q, ep.IsCorrect, len(ep.Trajectories), ep.Trajectories)
				}
				for _, st := range ep.Trajectories[0].Steps {
					if st.Info["endpoint"] != endpoint {
						return fmt.Errorf("%s %s: a step from %v, want %s", mode, q, st.Info["endpoint"], endpoint)
					}
				}
				seqs, st, err := rollout.Assemble([]*episode.Episode{ep}, rollout.AssembleOptions{FilterTokenMismatch: true})
				if err != nil || st.TokenMismatches != 0 || len(seqs) != 1 {
					return fmt.Errorf("%s %s: assemble %v %+v", mode, q, err, st)
				}
				return nil
			}
			if mode == program.ModeServe {
				go func() { errs <- one() }()
			} else {
				errs <- one()
			}
		}
		for range questions {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
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
	dir := copyTo(t, "openai_agent.py", "rllm_program.py")
	play(t, []any{py, filepath.Join(dir, "openai_agent.py")}, "chat.completions", 1)
}

func python(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		repotest.Missing(t, "python3 is not installed: skipping the Python agent programs")
	}
	return py
}

// The standard-library agent through rllm_program.py, per episode and
// served.
func TestStdlibPythonProgram(t *testing.T) {
	dir := copyTo(t, "stdlib_agent.py", "rllm_program.py")
	play(t, []any{python(t), filepath.Join(dir, "stdlib_agent.py")}, "chat.completions", 1)
}

// rllm_program.py served: an exception fails its episode with the
// exception's message and the process serves on; a cancelled episode's
// task is cancelled.
func TestPythonHelperErrorsAndCancel(t *testing.T) {
	defer program.CloseServers()
	dir := copyTo(t, "rllm_program.py")
	marks := filepath.Join(dir, "cancelled")
	agent := `import asyncio, rllm_program

async def solve(task, client):
    reply = await client.chat([{"role": "user", "content": task["question"]}])
    if task["question"] == "boom":
        raise ValueError("no answer to boom")
    if task["question"] == "slow":
        try:
            try:
                await client.chat([{"role": "user", "content": "again"}])  # over max_calls: 429
            except RuntimeError:
                pass
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            open(` + strconv.Quote(marks) + `, "a").write("cancelled\n")
            raise
    return reply["choices"][0]["message"]["content"]

rllm_program.run(solve)
`
	if err := os.WriteFile(filepath.Join(dir, "agent.py"), []byte(agent), 0o644); err != nil {
		t.Fatal(err)
	}
	helperCancels(t, []any{python(t), filepath.Join(dir, "agent.py")}, marks, "ValueError: no answer to boom")
}

// rllm_program.mjs served: a thrown error fails its episode with the
// error's message and the process serves on; a cancelled episode's
// signal aborts.
func TestNodeHelperErrorsAndCancel(t *testing.T) {
	defer program.CloseServers()
	command := stage(t, "rllm_program.mjs", "node")
	dir := filepath.Dir(command[1].(string))
	marks := filepath.Join(dir, "cancelled")
	agent := `import { appendFileSync } from "node:fs";
import { run } from "./rllm_program.mjs";

run(async (task, client, { signal }) => {
  const r = await client.chat.completions.create({ model: "policy", messages: [{ role: "user", content: task.question }] }, { signal });
  if (task.question === "boom") throw new RangeError("no answer to boom");
  if (task.question === "slow") {
    // Over max_calls: this call gets 429 and rllm cancels the episode.
    await client.chat.completions.create({ model: "policy", messages: [{ role: "user", content: "again" }] }, { signal }).catch(() => {});
    // The cancel may arrive while that call is retried, so the signal
    // can be aborted already: an abort listener added then never fires.
    await new Promise((resolve) => (signal.aborted ? resolve() : signal.addEventListener("abort", resolve)));
    appendFileSync(` + strconv.Quote(marks) + `, "cancelled\n");
    return "late";
  }
  return r.choices[0].message.content;
});
`
	if err := os.WriteFile(filepath.Join(dir, "agent.mjs"), []byte(agent), 0o644); err != nil {
		t.Fatal(err)
	}
	helperCancels(t, []any{command[0], filepath.Join(dir, "agent.mjs")}, marks, "RangeError: no answer to boom")
}

// helperCancels runs a served helper program that fails "boom", goes
// over max_calls on "slow" and then waits until cancelled (noting it in
// marks), and answers the rest.
func helperCancels(t *testing.T, command []any, marks, boom string) {
	t.Helper()
	spec := workflow.Spec{Name: "program", Args: map[string]any{"command": command, "mode": "serve", "max_calls": 1, "timeout_s": 120},
		Deps: workflow.Deps{Env: workflow.Component{Name: "arith"}}}
	w, err := spec.New(model, sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := w.Run(context.Background(), episode.Task{"question": "boom", "ground_truth": "1"}, "boom:0")
	if err == nil || !strings.Contains(ep.Error, boom) {
		t.Fatalf("%v %+v", err, ep)
	}
	ep, err = w.Run(context.Background(), episode.Task{"question": "slow", "ground_truth": "1"}, "slow:0")
	if err == nil || !strings.Contains(ep.Error, "max_calls=1") {
		t.Fatalf("%v %+v", err, ep)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, _ := os.ReadFile(marks); strings.Contains(string(b), "cancelled") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow episode was never cancelled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ep, err = w.Run(context.Background(), episode.Task{"question": "3+4=", "ground_truth": "7", "data_source": "arith"}, "ok:0")
	if err != nil || !ep.IsCorrect {
		t.Fatalf("after an error and a cancel: %v %+v", err, ep)
	}
	if st := program.ServersStats(); st.Started != 1 {
		t.Errorf("%d processes started, want 1", st.Started)
	}
}
