package promserve

import (
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return string(b)
}

func TestServeStepMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := New()
	srv, err := Start(ctx, "127.0.0.1:0", m.Handler())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	m.SetTotalSteps(10)
	m.ObserveStep(0, map[string]float64{"val/pass@1": 0.25, "val/arith/pass@1": 0.25, "val/math/pass@1": 0.5})
	m.ObserveStep(3, map[string]float64{
		"critic/score/mean": 0.75, "batch/accuracy": 0.5, "timing_s/step": 1.5,
		"actor/pg_loss": -0.125, "actor/ppo_kl": math.NaN(), "response_length/mean": 12,
	})
	m.AddEpisodes(64, 1000)
	m.AddError(ErrorRetry, 2)
	m.AddError(ErrorEpisode, 0)
	body := scrape(t, srv.Addr())
	for _, want := range []string{
		"rllm_step 3\n",
		"rllm_total_steps 10\n",
		"rllm_reward_mean 0.75\n",
		"rllm_accuracy 0.5\n",
		`rllm_validation_pass_at_1{data_source="all"} 0.25`,
		`rllm_validation_pass_at_1{data_source="math"} 0.5`,
		"rllm_episodes_total 64\n",
		"rllm_response_tokens_total 1000\n",
		`rllm_errors_total{kind="retry"} 2`,
		`rllm_errors_total{kind="episode"} 0`,
		`rllm_errors_total{kind="step"} 0`,
		"rllm_step_duration_seconds_count 1\n",
		"rllm_step_duration_seconds_sum 1.5\n",
		`rllm_step_metric{name="actor/pg_loss"} -0.125`,
		`rllm_step_metric{name="val/math/pass@1"} 0.5`,
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(body, `name="actor/ppo_kl"`) {
		t.Error("a NaN metric was exported")
	}
	// A key the next step lacks is dropped; validation keys stay.
	m.ObserveStep(4, map[string]float64{"critic/score/mean": 0.8})
	body = scrape(t, srv.Addr())
	if strings.Contains(body, `name="actor/pg_loss"`) || !strings.Contains(body, `name="val/math/pass@1"`) {
		t.Errorf("stale keys after step 4:\n%s", body)
	}
}

func TestServerStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := Start(ctx, "127.0.0.1:0", New().Handler())
	if err != nil {
		t.Fatal(err)
	}
	scrape(t, srv.Addr())
	cancel()
	// Close waits for the shutdown that the cancellation started.
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	c := http.Client{Timeout: 2 * time.Second}
	if _, err := c.Get("http://" + srv.Addr() + "/metrics"); err == nil {
		t.Fatal("server still answers after its context was cancelled")
	}
}

func TestAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, addr := range []string{ln.Addr().String(), "not an address"} {
		_, err = Start(context.Background(), addr, New().Handler())
		if !usererr.Is(err) || !strings.Contains(err.Error(), "trainer.metrics_addr") {
			t.Errorf("Start(%q) = %v; want a user error naming trainer.metrics_addr", addr, err)
		}
	}
}
