package program_test

import (
	"context"
	"os"

	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// rllmStandIn runs one episode of a program that leaves grandchildren
// (one in its group, one setsid) and writes the pids, its own last; the
// test kills this process meanwhile.
func rllmStandIn(pidFile string) int {
	tmp := pidFile + ".tmp"
	cmd := "(sleep 300 & echo $! >> " + tmp + "); setsid sleep 300 & echo $! >> " + tmp + "; echo $$ >> " + tmp + "; mv " + tmp + " " + pidFile + ".ready; sleep 300"
	spec := workflow.Spec{Name: "program", Args: map[string]any{"command": cmd, "timeout_s": 600.0}, Deps: workflow.Deps{Env: workflow.Component{Name: "arith"}}}
	w, err := spec.New(answering("7"), sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 16})
	if err != nil {
		os.Stderr.WriteString(err.Error())
		return 1
	}
	w.Run(context.Background(), task, "t:0")
	return 0
}
