package openai

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
)

// metrics are exported at /metrics under vLLM's names where one applies
// (label model_name), and rllm:* for what vLLM has no name for. Each
// server has its own registry.
type metrics struct {
	reg      *prometheus.Registry
	ttft     prometheus.Histogram
	itl      prometheus.Histogram
	e2e      prometheus.Histogram
	success  *prometheus.CounterVec
	rejected prometheus.Counter
	updates  *prometheus.CounterVec
}

var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}

func newMetrics(eng *local.Engine, model string) *metrics {
	labels := prometheus.Labels{"model_name": model}
	m := &metrics{reg: prometheus.NewRegistry()}
	gauge := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
	}
	counter := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f))
	}
	maxSeqs := float64(eng.Options().MaxNumSeqs)
	gauge("vllm:num_requests_running", "Number of sequences decoding in the batch.", func() float64 { return float64(eng.Stats().Running) })
	gauge("vllm:num_requests_waiting", "Number of sequences waiting for a slot.", func() float64 { return float64(eng.Stats().Waiting) })
	gauge("vllm:kv_cache_usage_perc", "Fraction of sequence slots (KV caches) in use, 0 to 1.", func() float64 { return float64(eng.Stats().Running) / maxSeqs })
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", func() float64 { return float64(eng.Stats().PromptTokens) })
	counter("vllm:generation_tokens_total", "Number of generation tokens processed.", func() float64 { return float64(eng.Stats().GenTokens) })
	counter("rllm:decode_steps_total", "Number of decoding steps of the continuous batch.", func() float64 { return float64(eng.Stats().Steps) })
	counter("rllm:batched_forwards_total", "Number of batched forward passes (one per step and weight version in use).", func() float64 { return float64(eng.Stats().Forwards) })
	gauge("rllm:max_batch_size", "Largest number of sequences one forward pass carried.", func() float64 { return float64(eng.Stats().MaxBatch) })
	hist := func(name, help string) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: latencyBuckets})
		m.reg.MustRegister(h)
		return h
	}
	m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.")
	m.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.")
	m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.")
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Count of finished requests by finish reason.", ConstLabels: labels}, []string{"finished_reason"})
	m.rejected = prometheus.NewCounter(prometheus.CounterOpts{Name: "rllm:requests_rejected_total", Help: "Requests refused with 429 because the waiting queue was full.", ConstLabels: labels})
	m.updates = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rllm:weight_updates_total", Help: "Weight updates by outcome.", ConstLabels: labels}, []string{"success"})
	m.reg.MustRegister(m.success, m.rejected, m.updates)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
