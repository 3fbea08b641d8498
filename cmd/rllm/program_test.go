package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/evaluate"
)

// rllm eval runs an agent program (examples/programs/stdlib_agent.py) per
// episode: program → gateway session → the OpenAI-compatible client →
// a fake vLLM server, and scores its answers with env.name's reward.
func TestEvalAgentProgram(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: skipping the agent-program eval")
	}
	srv := fakevllm.New(fakevllm.Config{Reply: func(in fakevllm.ReplyInput) *fakevllm.Reply {
		switch userQuestion(in) {
		case "1+1=":
			return &fakevllm.Reply{Content: "2"}
		case "2+2=":
			return &fakevllm.Reply{Content: "4"}
		}
		return &fakevllm.Reply{Content: "9"}
	}})
	defer srv.Close()
	agent := filepath.Join(repotest.Root(t), "examples", "programs", "stdlib_agent.py")
	var stdout, stderr bytes.Buffer
	args := append(serverArgs(srv.URL), "env.args.reward_args.close_score=0", "workflow.name=program",
		"workflow.args.command=["+py+","+agent+"]")
	opts := &evalOptions{data: []string{writeEvalTasks(t)}, n: 2, output: "json", args: args}
	if err := runEval(context.Background(), testApp(&stdout, &stderr), opts); err != nil {
		t.Fatalf("runEval: %v\nstderr: %s", err, stderr.String())
	}
	var rep evaluate.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	// The two easy tasks are solved, the two hard ones are not.
	if rep.Failed != 0 || rep.PassAt1 != 0.5 {
		t.Fatalf("failed %d, pass@1 %v\n%s", rep.Failed, rep.PassAt1, stdout.String())
	}
}
