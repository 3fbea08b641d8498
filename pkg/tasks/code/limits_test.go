package code

import (
	"bufio"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

// configRunner records the first line (the harness's configuration) of
// each run and ends the run.
type configRunner struct{ configs []replyConfig }

func (r *configRunner) Run(_ context.Context, req sandbox.Request) (sandbox.Result, error) {
	line, err := bufio.NewReader(req.Stream.In).ReadBytes('\n')
	if err != nil {
		return sandbox.Result{}, err
	}
	var c replyConfig
	if err := json.Unmarshal(line, &c); err != nil {
		return sandbox.Result{}, err
	}
	r.configs = append(r.configs, c)
	return sandbox.Result{}, nil
}

// TestBatchKeepsLimitsAboveDefaults: sandbox.limits set above their
// defaults reach the reply's harness (a test's time and output cap),
// rather than being lowered to sandbox.DefaultLimits.
func TestBatchKeepsLimitsAboveDefaults(t *testing.T) {
	limits := sandbox.Limits{WallTime: 120 * time.Second, OutputBytes: 8 << 20}
	tests := []Test{{Kind: Stdin, Input: "1", Expected: "1"}, {Kind: Stdin, Input: "2", Expected: "2"}}
	r := &configRunner{}
	_, err := Grade(context.Background(), r, "print(input())", tests, GradeOptions{
		Language: Languages["python"], TestTimeout: 60 * time.Second, Batch: true, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.configs) == 0 {
		t.Fatal("no batch run")
	}
	c := r.configs[0]
	if c.TimeoutS != 60 {
		t.Errorf("per-test timeout %vs, want 60s (the test timeout fits sandbox.limits.wall_time_s=120)", c.TimeoutS)
	}
	if c.OutCap != limits.OutputBytes {
		t.Errorf("output cap %d bytes, want %d (sandbox.limits.output_kb=8192)", c.OutCap, limits.OutputBytes)
	}
}
