package code

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

// specRunner records the harness spec of each batch run and answers an
// empty result.
type specRunner struct{ specs []harnessSpec }

func (r *specRunner) Run(_ context.Context, req sandbox.Request) (sandbox.Result, error) {
	var s harnessSpec
	if err := json.Unmarshal(req.Files["tests.json"], &s); err != nil {
		return sandbox.Result{}, err
	}
	r.specs = append(r.specs, s)
	return sandbox.Result{}, nil
}

// TestBatchKeepsLimitsAboveDefaults: sandbox.limits set above their
// defaults reach the batch harness (a test's time and output share),
// rather than being lowered to sandbox.DefaultLimits.
func TestBatchKeepsLimitsAboveDefaults(t *testing.T) {
	limits := sandbox.Limits{WallTime: 120 * time.Second, OutputBytes: 8 << 20}
	tests := []Test{{Kind: Stdin, Input: "1", Expected: "1"}, {Kind: Stdin, Input: "2", Expected: "2"}}
	r := &specRunner{}
	_, err := Grade(context.Background(), r, "print(input())", tests, GradeOptions{
		Language: Languages["python"], TestTimeout: 60 * time.Second, Batch: true, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.specs) == 0 {
		t.Fatal("no batch run")
	}
	s := r.specs[0]
	if s.TimeoutS != 60 {
		t.Errorf("per-test timeout %vs, want 60s (the test timeout fits sandbox.limits.wall_time_s=120)", s.TimeoutS)
	}
	if want := (limits.OutputBytes*9/10/2 - 6*256 - 200) / 6; s.OutCap != want {
		t.Errorf("output share %d bytes, want %d (from sandbox.limits.output_kb=8192)", s.OutCap, want)
	}
}
