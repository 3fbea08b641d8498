// Package promserve exposes a training run's progress as Prometheus
// metrics (github.com/prometheus/client_golang) on an HTTP server that
// lives as long as a context: the step, rewards, validation pass@1,
// throughput (episodes and tokens as counters, step durations as a
// histogram) and errors, plus every number of the step's metrics.jsonl
// record as rllm_step_metric{name="..."}. The trainer calls ObserveStep
// once per step; trainer.metrics_addr chooses the address.
package promserve

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Metrics holds the collectors of one run, in a registry of its own (no
// global state: two runs in one process do not mix).
type Metrics struct {
	reg *prometheus.Registry

	step, totalSteps   prometheus.Gauge
	reward, accuracy   prometheus.Gauge
	valPassAt1         *prometheus.GaugeVec
	episodes, tokens   prometheus.Counter
	stepSeconds        prometheus.Histogram
	errs               *prometheus.CounterVec
	stepMetric         *prometheus.GaugeVec
	mu                 sync.Mutex
	lastStepMetricKeys map[string]bool
}

// Error kinds counted by rllm_errors_total.
const (
	ErrorEpisode = "episode" // an episode ended in error or timeout
	ErrorRetry   = "retry"   // a model request or an episode was retried
	ErrorStep    = "step"    // a training step failed
)

// New registers the collectors, with the Go runtime's and the process's.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), lastStepMetricKeys: map[string]bool{}}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "rllm", Name: name, Help: help})
	}
	m.step = g("step", "Last completed training step.")
	m.totalSteps = g("total_steps", "Training steps the run will take.")
	m.reward = g("reward_mean", "Mean episode score of the last step (critic/score/mean).")
	m.accuracy = g("accuracy", "Share of the last step's episodes that solved their task (batch/accuracy).")
	m.valPassAt1 = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "rllm", Name: "validation_pass_at_1",
		Help: "pass@1 of the last validation, per data source (\"all\" for the whole set)."}, []string{"data_source"})
	m.episodes = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rllm", Name: "episodes_total",
		Help: "Training episodes finished."})
	m.tokens = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rllm", Name: "response_tokens_total",
		Help: "Response tokens sampled in training episodes."})
	m.stepSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "rllm", Name: "step_duration_seconds",
		Help: "Wall time of a training step (timing_s/step).", Buckets: prometheus.ExponentialBuckets(0.05, 2, 16)})
	m.errs = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "rllm", Name: "errors_total",
		Help: "Errors by kind: episode (ended in error or timeout), retry, step."}, []string{"kind"})
	m.stepMetric = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "rllm", Name: "step_metric",
		Help: "Every number of the last step's metrics.jsonl record, by its key."}, []string{"name"})
	m.reg.MustRegister(m.step, m.totalSteps, m.reward, m.accuracy, m.valPassAt1, m.episodes, m.tokens,
		m.stepSeconds, m.errs, m.stepMetric,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, k := range []string{ErrorEpisode, ErrorRetry, ErrorStep} {
		m.errs.WithLabelValues(k) // present at 0 from the start, so rate() works
	}
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// SetTotalSteps records how many steps the run will take.
func (m *Metrics) SetTotalSteps(n int) { m.totalSteps.Set(float64(n)) }

// AddEpisodes counts finished training episodes and their response tokens.
func (m *Metrics) AddEpisodes(episodes, responseTokens int) {
	m.episodes.Add(float64(max(episodes, 0)))
	m.tokens.Add(float64(max(responseTokens, 0)))
}

// AddError counts an error of a kind (ErrorEpisode, ErrorRetry, ErrorStep).
func (m *Metrics) AddError(kind string, n int) {
	if n > 0 {
		m.errs.WithLabelValues(kind).Add(float64(n))
	}
}

// ObserveStep records a step's metrics as the trainer writes them to
// metrics.jsonl: keys critic/score/mean, batch/accuracy, timing_s/step,
// val/pass@1 and val/SOURCE/pass@1 feed the named gauges; every finite
// number also becomes rllm_step_metric{name=KEY}. A record without
// training keys (a validation before training) only updates validation.
func (m *Metrics) ObserveStep(step int, metrics map[string]float64) {
	m.step.Set(float64(step))
	finite := func(k string) (float64, bool) {
		v, ok := metrics[k]
		return v, ok && !math.IsNaN(v) && !math.IsInf(v, 0)
	}
	if v, ok := finite("critic/score/mean"); ok {
		m.reward.Set(v)
	}
	if v, ok := finite("batch/accuracy"); ok {
		m.accuracy.Set(v)
	}
	if v, ok := finite("timing_s/step"); ok && v >= 0 {
		m.stepSeconds.Observe(v)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := make(map[string]bool, len(metrics))
	for k := range metrics {
		v, ok := finite(k)
		if !ok {
			continue
		}
		if k == "val/pass@1" {
			m.valPassAt1.WithLabelValues("all").Set(v)
		} else if src, ok := strings.CutPrefix(k, "val/"); ok && strings.HasSuffix(src, "/pass@1") {
			m.valPassAt1.WithLabelValues(strings.TrimSuffix(src, "/pass@1")).Set(v)
		}
		m.stepMetric.WithLabelValues(k).Set(v)
		seen[k] = true
	}
	// A key the last step had and this one lacks is stale: drop it rather
	// than report an old value as current. Validation keys stay until the
	// next validation.
	for k := range m.lastStepMetricKeys {
		if !seen[k] && !strings.HasPrefix(k, "val/") {
			m.stepMetric.DeleteLabelValues(k)
			delete(m.lastStepMetricKeys, k)
		}
	}
	for k := range seen {
		m.lastStepMetricKeys[k] = true
	}
}

// Server is a running metrics server.
type Server struct {
	addr   string
	srv    *http.Server
	served chan error    // Serve's result
	stop   chan struct{} // closed by Close
	once   sync.Once
	err    error
}

// Start listens on addr (host:port; port 0 picks a free one) and serves
// h on /metrics until ctx is cancelled or Close is called. An address it
// cannot listen on is a user error naming trainer.metrics_addr.
func Start(ctx context.Context, addr string, h http.Handler) (*Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, usererr.Errorf("trainer.metrics_addr %q: cannot listen: %v; use host:port with a free port, e.g. 127.0.0.1:9464", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("rllm training metrics: /metrics\n"))
	})
	s := &Server{addr: ln.Addr().String(), served: make(chan error, 1), stop: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { s.served <- s.srv.Serve(ln) }()
	go func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.stop:
		}
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.addr }

// Close stops the server, letting scrapes in flight finish for up to 5s,
// and returns once it has stopped. It may be called more than once.
func (s *Server) Close() error {
	s.once.Do(func() {
		close(s.stop)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := s.srv.Shutdown(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			err = s.srv.Close()
		}
		if serr := <-s.served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
		s.err = err
	})
	return s.err
}
