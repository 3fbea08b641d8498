package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/rllm-org/rllm-go/pkg/tracking/trackingtest"
)

var fakeWandBs sync.Map // *testscript.TestScript → *trackingtest.WandB

// cmdFakeWandB starts a fake W&B (pkg/tracking/trackingtest) that accepts
// KEY, for the rest of the script, and points WANDB_BASE_URL at it; with
// "runs" it prints the fake's runs, one line each, sorted:
//
//	fakewandb KEY
//	fakewandb runs
func cmdFakeWandB(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: fakewandb KEY | fakewandb runs")
	}
	if args[0] == "runs" {
		v, ok := fakeWandBs.Load(ts)
		if !ok {
			ts.Fatalf("fakewandb runs: no fake started")
		}
		var lines []string
		for _, r := range v.(*trackingtest.WandB).Runs() {
			var steps []string
			for _, h := range r.History {
				steps = append(steps, fmt.Sprint(h["_step"]))
			}
			_, hasConfig := r.Config["trainer"]
			lines = append(lines, fmt.Sprintf("run %s/%s name=%s steps=%s upserts=%d config=%v complete=%v exit=%d files=%s",
				r.Entity, r.Project, r.DisplayName, strings.Join(steps, ","), r.Upserts, hasConfig, r.Complete, r.ExitCode, strings.Join(r.Uploaded, ",")))
		}
		slices.Sort(lines)
		for _, l := range lines {
			fmt.Fprintln(ts.Stdout(), l)
		}
		return
	}
	f := trackingtest.StartWandB(args[0])
	fakeWandBs.Store(ts, f)
	ts.Defer(func() { f.Close(); fakeWandBs.Delete(ts) })
	ts.Setenv("WANDB_BASE_URL", f.URL)
}
