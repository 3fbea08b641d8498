package trainer

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/tracking"
	"github.com/rllm-org/rllm-go/pkg/tracking/trackingtest"
)

const benchKey = "0123456789abcdef0123456789abcdef01234567"

// trackedSpec points the W&B and MLflow sinks at fakes.
func trackedSpec(w *trackingtest.WandB, m *trackingtest.MLflow) tracking.Spec {
	return tracking.Spec{WandB: tracking.WandBSettings{APIKey: benchKey, BaseURL: w.URL}, MLflow: tracking.MLflowSettings{TrackingURI: m.URL, Token: "tok"}}
}

// A run with every logger sends each tracker the rows metrics.jsonl gets:
// the same steps and keys (MLflow's cleaned), the config, the summary.
func TestTrackedRunMatchesMetrics(t *testing.T) {
	w, m := trackingtest.NewWandB(t, benchKey), trackingtest.NewMLflow(t, "tok")
	c := smallConfig(t, "trainer.logger=[console,jsonl,tensorboard,wandb,mlflow]", "trainer.total_training_steps=3", "trainer.test_freq=2", "trainer.val_before_train=true")
	var log bytes.Buffer
	tr, err := New(context.Background(), c, Options{Log: &log, Tracking: trackedSpec(w, m)})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := readMetrics(t, c.Trainer.DefaultLocalDir)
	runs := w.Runs()
	if len(runs) != 1 || len(m.Runs()) != 1 {
		t.Fatalf("%d W&B runs, %d MLflow runs", len(runs), len(m.Runs()))
	}
	hist, mr := runs[0].History, m.Runs()[0]
	if len(hist) != len(recs) {
		t.Fatalf("W&B has %d rows, metrics.jsonl %d", len(hist), len(recs))
	}
	mlflowKeys := map[string]map[int64]bool{}
	for _, x := range mr.Metrics {
		if mlflowKeys[x.Key] == nil {
			mlflowKeys[x.Key] = map[int64]bool{}
		}
		mlflowKeys[x.Key][x.Step] = true
	}
	for i, rec := range recs {
		if hist[i]["_step"] != rec["step"] {
			t.Errorf("row %d: W&B step %v, metrics.jsonl %v", i, hist[i]["_step"], rec["step"])
		}
		for k := range rec {
			if k == "step" {
				continue
			}
			if _, ok := hist[i][k]; !ok {
				t.Errorf("step %v: W&B lacks %s", rec["step"], k)
			}
			if !mlflowKeys[tracking.MLflowKey(k)][int64(rec["step"].(float64))] {
				t.Errorf("step %v: MLflow lacks %s", rec["step"], k)
			}
		}
	}
	if runs[0].Config["actor"] == nil || mr.Params["trainer.total_training_steps"] != "3" || mr.Status != "FINISHED" {
		t.Errorf("config %v, params %d, status %s", len(runs[0].Config), len(mr.Params), mr.Status)
	}
	tables := 0
	for _, h := range hist {
		if ref, ok := h["val/generations"].(map[string]any); ok && ref["_type"] == "table-file" && ref["nrows"].(float64) > 0 {
			tables++
		}
	}
	if tables != 3 { // before training, at step 2 and at the last step
		t.Errorf("%d validation tables, want 3", tables)
	}
	if runs[0].Summary["steps"] != 3.0 || runs[0].Summary["best/val/pass@1"] == nil || !runs[0].Complete {
		t.Errorf("summary %v", runs[0].Summary)
	}
	if files, _ := filepath.Glob(filepath.Join(c.Trainer.DefaultLocalDir, "tensorboard", "events.out.tfevents.*")); len(files) != 1 {
		t.Errorf("event files %v", files)
	}
	if strings.Contains(log.String(), benchKey) {
		t.Error("the key is in the log")
	}
	b, _ := os.ReadFile(filepath.Join(c.Trainer.DefaultLocalDir, "run.json"))
	if bytes.Contains(b, []byte(benchKey)) {
		t.Error("the key is in run.json")
	}
}

// BenchmarkTrackedRun is the default run (configs/default.yaml, here
// cut to trainer.total_training_steps steps, warm-up included) with
// trainer.logger console only, with all five loggers against local fakes
// of W&B and MLflow, and with a W&B that never answers.
func BenchmarkTrackedRun(b *testing.B) {
	steps, warmup := 100, -1 // -1: the default warm-up
	if s := os.Getenv("RLLM_BENCH_STEPS"); s != "" {
		fmt.Sscan(s, &steps)
	}
	if s := os.Getenv("RLLM_BENCH_WARMUP"); s != "" {
		fmt.Sscan(s, &warmup)
	}
	w, m := trackingtest.NewWandB(b, benchKey), trackingtest.NewMLflow(b, "tok")
	never := trackingtest.NewWandB(b, benchKey)
	release := make(chan struct{})
	never.Intercept = func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return true
	}
	b.Cleanup(func() { close(release) })
	for _, tc := range []struct {
		name    string
		loggers string
		spec    tracking.Spec
	}{
		{"console", "[console]", tracking.Spec{}},
		{"all_fakes", "[console,jsonl,tensorboard,wandb,mlflow]", trackedSpec(w, m)},
		{"never_answers", "[console,wandb]", tracking.Spec{WandB: tracking.WandBSettings{APIKey: benchKey, BaseURL: never.URL}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				over := []string{"trainer.default_local_dir=" + filepath.ToSlash(b.TempDir()),
					fmt.Sprintf("trainer.total_training_steps=%d", steps), "trainer.logger=" + tc.loggers}
				if warmup >= 0 {
					over = append(over, fmt.Sprintf("backend.local.warmup_steps=%d", warmup))
				}
				c, err := config.FromOverrides(over)
				if err != nil {
					b.Fatal(err)
				}
				began, cpu := time.Now(), cpuTime()
				tr, err := New(context.Background(), c, Options{Tracking: tc.spec})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tr.Train(context.Background()); err != nil {
					b.Fatal(err)
				}
				tr.Close()
				b.ReportMetric(time.Since(began).Seconds(), "s/run")
				// The process's CPU time (trainer, queues and the fakes):
				// what the trackers cost on a loaded machine, where wall
				// time is mostly waiting for a core.
				b.ReportMetric((cpuTime() - cpu).Seconds(), "cpu-s/run")
			}
		})
	}
}
