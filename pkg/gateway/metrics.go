package gateway

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus series, on a registry of its own
// (several gateways may live in one process).
type metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	upstream prometheus.Histogram
	tokens   *prometheus.CounterVec
	sessions prometheus.GaugeFunc
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rllm_gateway_calls_total",
			Help: "Model calls by endpoint and HTTP status."}, []string{"endpoint", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rllm_gateway_call_seconds",
			Help: "Time to answer a model call, sampling included.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"endpoint"}),
		upstream: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rllm_gateway_sampler_seconds",
			Help: "Time the sampler took per call.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rllm_gateway_tokens_total",
			Help: "Tokens recorded, by kind (prompt, completion)."}, []string{"kind"}),
	}
	m.reg.MustRegister(m.calls, m.latency, m.upstream, m.tokens)
	return m
}

func (m *metrics) observe(endpoint string, status int, d time.Duration) {
	m.calls.WithLabelValues(endpoint, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(endpoint).Observe(d.Seconds())
}
