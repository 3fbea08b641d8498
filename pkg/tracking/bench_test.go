package tracking

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/tracking/trackingtest"
)

// BenchmarkSetLog is what one step's row costs the training goroutine: a
// row of 80 metrics handed to console only (JSON lines), to all five
// sinks (W&B and MLflow against local fakes), and to console plus a W&B
// that never answers. The remote sends happen on the queues' goroutines.
func BenchmarkSetLog(b *testing.B) {
	w, m := trackingtest.NewWandB(b, testKey), trackingtest.NewMLflow(b, "tok")
	never := trackingtest.NewWandB(b, testKey)
	release := make(chan struct{})
	never.Intercept = func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return true
	}
	b.Cleanup(func() { close(release) })
	metrics := map[string]float64{}
	for i := range 80 {
		metrics[fmt.Sprintf("group%d/metric_%02d", i%8, i)] = float64(i) * 0.37
	}
	for _, tc := range []struct {
		name    string
		loggers []string
		w       WandBSettings
		m       MLflowSettings
	}{
		{"console", []string{Console}, WandBSettings{}, MLflowSettings{}},
		{"all_fakes", []string{Console, JSONLines, TensorBoard, WandB, MLflow}, WandBSettings{APIKey: testKey, BaseURL: w.URL}, MLflowSettings{TrackingURI: m.URL, Token: "tok"}},
		{"never_answers", []string{Console, WandB}, WandBSettings{APIKey: testKey, BaseURL: never.URL}, MLflowSettings{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			spec := Spec{Loggers: tc.loggers, Dir: b.TempDir(), Project: "bench", Name: "bench", ResumedAt: -1,
				Console: ConsoleOptions{JSON: true, Out: io.Discard}, WandB: tc.w, MLflow: tc.m, StartTimeout: 200 * time.Millisecond}
			set, err := Open(context.Background(), spec)
			if err != nil {
				b.Fatal(err)
			}
			set.Ready(context.Background())
			b.ReportAllocs()
			step := 0
			for b.Loop() {
				step++
				set.Log(Row{Step: step, Metrics: metrics})
			}
			b.StopTimer()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			set.Close(ctx, Summary{Status: Finished})
			cancel()
		})
	}
}
