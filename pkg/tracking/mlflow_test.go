package tracking

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/tracking/trackingtest"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

func bigConfig() map[string]any {
	args := map[string]any{}
	for i := range 230 {
		args[fmt.Sprintf("k%03d", i)] = float64(i)
	}
	args["prompt"] = strings.Repeat("long system prompt ", 60) // > 500 characters
	args["bad key@x"] = "v"
	return map[string]any{"agent": map[string]any{"args": args}, "trainer": map[string]any{"project_name": "rllm"}}
}

func TestMLflowRun(t *testing.T) {
	fake := trackingtest.NewMLflow(t, "tok")
	spec, _, out := testSpec(t, t.TempDir(), MLflow)
	spec.Config = bigConfig()
	spec.MLflow = MLflowSettings{TrackingURI: fake.URL, Token: "tok"}
	set, err := openReady(spec)
	if err != nil {
		t.Fatal(err)
	}
	rs := rows(1, 3)
	rs[1].Metrics["actor/kl_loss"] = math.NaN()
	rs[2].Metrics["actor/entropy"] = math.Inf(-1)
	// A row with more keys than one batch takes.
	rs[2].Metrics = map[string]float64{}
	for i := range 1500 {
		rs[2].Metrics[fmt.Sprintf("per_source/%04d", i)] = float64(i)
	}
	logAll(set, rs)
	closeSet(t, set, Finished)
	runs := fake.Runs()
	if len(runs) != 1 {
		t.Fatalf("%d runs", len(runs))
	}
	r := runs[0]
	if rf := fake.Refusals(); len(rf) > 0 && !strings.Contains(rf[0], "RESOURCE_DOES_NOT_EXIST") || len(rf) > 1 {
		t.Errorf("refused: %q", rf)
	}
	if r.Status != "FINISHED" || r.EndTime == 0 || r.Name != "arith" {
		t.Errorf("run %s status %s end %d", r.Name, r.Status, r.EndTime)
	}
	if len(r.Params) != 233 {
		t.Errorf("%d params, want 233", len(r.Params))
	}
	if p := r.Params["agent.args.prompt"]; len(p) != 500 {
		t.Errorf("the long param is %d characters", len(p))
	}
	if _, ok := r.Params["agent.args.bad key_at_x"]; !ok {
		t.Errorf("the refused key was not cleaned: %v", r.Params)
	}
	var pass, nan, n1500 int
	for _, m := range r.Metrics {
		switch {
		case m.Key == "val/pass_at_1":
			pass++
		case m.Key == "actor/kl_loss" && math.IsNaN(m.Value):
			nan++
		case strings.HasPrefix(m.Key, "per_source/") && m.Step == 3:
			n1500++
		}
	}
	if pass != 2 || nan != 1 || n1500 != 1500 {
		t.Errorf("val/pass_at_1 %d, NaN %d, step-3 metrics %d", pass, nan, n1500)
	}
	if r.Tags["rllm.summary.best/val/pass_at_1"] != "0.75" {
		t.Errorf("tags %v", r.Tags)
	}
	if !strings.Contains(out.all(), "cut to that length") || strings.Contains(out.all(), "tok\"") {
		t.Errorf("lines:\n%s", out.all())
	}
}

// Resume continues the MLflow run: the params not logged again (a changed
// one is warned about, never sent), the status RUNNING then FINISHED,
// the redone steps not logged twice.
func TestMLflowResume(t *testing.T) {
	fake := trackingtest.NewMLflow(t, "")
	dir := t.TempDir()
	spec, _, out := testSpec(t, dir, MLflow)
	spec.MLflow = MLflowSettings{TrackingURI: fake.URL}
	set, err := openReady(spec)
	if err != nil {
		t.Fatal(err)
	}
	logAll(set, rows(1, 5))
	closeSet(t, set, Killed)
	if r := fake.Runs()[0]; r.Status != "KILLED" {
		t.Fatalf("status %s", r.Status)
	}
	spec.ResumedAt = 3
	spec.Config["rollout"].(map[string]any)["n"] = 16.0 // changed on resume
	set, err = openReady(spec)
	if err != nil {
		t.Fatal(err)
	}
	logAll(set, rows(4, 7))
	closeSet(t, set, Finished)
	runs := fake.Runs()
	if len(runs) != 1 {
		t.Fatalf("%d runs", len(runs))
	}
	r := runs[0]
	if r.Status != "FINISHED" || r.Params["rollout.n"] != "8" {
		t.Errorf("status %s rollout.n %q", r.Status, r.Params["rollout.n"])
	}
	steps := map[int64]int{}
	for _, m := range r.Metrics {
		if m.Key == "critic/score/mean" {
			steps[m.Step]++
		}
	}
	for s := int64(1); s <= 7; s++ {
		if steps[s] != 1 {
			t.Errorf("step %d logged %d times", s, steps[s])
		}
	}
	if len(fake.Refusals()) > 1 { // the first get-by-name
		t.Errorf("refused: %q", fake.Refusals())
	}
	if !strings.Contains(out.all(), "param rollout.n was") {
		t.Errorf("lines:\n%s", out.all())
	}
}

func TestMLflowWrongToken(t *testing.T) {
	fake := trackingtest.NewMLflow(t, "right")
	for _, set := range []MLflowSettings{
		{TrackingURI: fake.URL, Token: "wrong-token-123"},
		{TrackingURI: fake.URL},
		{TrackingURI: strings.Replace(fake.URL, "http://", "http://me:wrong-token-123@", 1)},
	} {
		spec, _, out := testSpec(t, t.TempDir(), MLflow)
		spec.MLflow = set
		_, err := openReady(spec)
		var ue *usererr.Error
		if !errors.As(err, &ue) || ue.ExitCode() != 2 || !strings.Contains(err.Error(), "MLFLOW_TRACKING_") {
			t.Errorf("err = %v", err)
		}
		if strings.Contains(fmt.Sprint(err)+out.all(), "wrong-token-123") {
			t.Error("the secret was printed")
		}
	}
}

// Ctrl-C with rows still queued: Close sends them within its deadline and
// the run ends KILLED.
func TestMLflowKilledWithFullQueue(t *testing.T) {
	fake := trackingtest.NewMLflow(t, "")
	gate := make(chan struct{})
	var once sync.Once
	spec, _, _ := testSpec(t, t.TempDir(), MLflow)
	spec.MLflow = MLflowSettings{TrackingURI: fake.URL}
	set, err := openReady(spec)
	if err != nil {
		t.Fatal(err)
	}
	fake.Intercept = func(w http.ResponseWriter, r *http.Request) bool {
		once.Do(func() { <-gate })
		return false
	}
	logAll(set, rows(1, 300))
	go func() { time.Sleep(20 * time.Millisecond); close(gate) }()
	closeSet(t, set, Killed)
	r := fake.Runs()[0]
	if r.Status != "KILLED" {
		t.Errorf("status %s", r.Status)
	}
	n := 0
	for _, m := range r.Metrics {
		if m.Key == "critic/score/mean" {
			n++
		}
	}
	if n != 300 {
		t.Errorf("%d of 300 rows", n)
	}
}

func TestMLflowKey(t *testing.T) {
	for in, want := range map[string]string{
		"val/pass@1":             "val/pass_at_1",
		"critic/score/mean":      "critic/score/mean",
		"a b:c-d.e_f":            "a b:c-d.e_f",
		"/abs":                   "abs",
		"a//b":                   "a/b",
		"a/../b":                 "a/__/b",
		"ünïcode(x)":             "_n_code_x_",
		"":                       "_",
		strings.Repeat("k", 300): strings.Repeat("k", 250),
	} {
		if got := MLflowKey(in); got != want {
			t.Errorf("MLflowKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzMLflowKey(f *testing.F) {
	for _, s := range []string{"val/pass@1", "a/../b", "./x", "//", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k := MLflowKey(s)
		if len(k) == 0 || len(k) > 250 {
			t.Fatalf("%q → %q", s, k)
		}
		for _, r := range k {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-. :/", r)) {
				t.Fatalf("%q → %q has %q", s, k, r)
			}
		}
	})
}
