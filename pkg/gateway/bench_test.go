package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// BenchmarkGatewayOverhead compares an agent calling an OpenAI-compatible
// server (a fake vLLM answering at once) directly with the same agent
// calling it through the gateway, at 1, 64 and 512 concurrent sessions.
// Both use the same HTTP client code and request; the gateway adds its
// own hop, its session bookkeeping and the rollout client's request for
// token ids and logprobs. Reported per call: the mean latency a caller
// sees (µs/call) and the CPU time of the whole process (cpu-µs/call:
// caller, gateway, rollout client and fake server together), so the
// difference between the two rows is what the gateway costs.
func BenchmarkGatewayOverhead(b *testing.B) {
	up, gw, srv := benchGateway(b)
	body := []byte(`{"model":"` + up.Model() + `","messages":[{"role":"user","content":"What is 3+4?"}],"max_tokens":8}`)
	for _, sessions := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("upstream/sessions=%d", sessions), func(b *testing.B) {
			runCallers(b, sessions, body, func(int) (string, string) { return up.URL + "/v1/chat/completions", "" })
		})
		b.Run(fmt.Sprintf("gateway/sessions=%d", sessions), func(b *testing.B) {
			ss := make([]*gateway.Session, sessions)
			for i := range ss {
				s, err := gw.Open(gateway.SessionConfig{})
				if err != nil {
					b.Fatal(err)
				}
				ss[i] = s
			}
			defer func() {
				for _, s := range ss {
					gw.Close(s.ID)
				}
			}()
			runCallers(b, sessions, body, func(i int) (string, string) {
				return srv.URL + "/sessions/" + ss[i].ID + "/v1/chat/completions", ss[i].Token
			})
		})
	}
}

// benchGateway is a gateway in front of a fake vLLM answering 8 tokens at
// once, through the rollout client; all are closed when b ends.
func benchGateway(b *testing.B) (*fakevllm.Server, *gateway.Gateway, *httptest.Server) {
	up := fakevllm.New(fakevllm.Config{ReplyTokens: 8})
	b.Cleanup(up.Close)
	client, err := rollout.NewClient(rollout.Options{Endpoints: []string{up.URL}, Model: up.Model()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	gw := gateway.New(gateway.Options{Sampler: client, Params: sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 8}, MaxCalls: 1 << 30})
	srv := httptest.NewServer(gw.Handler())
	b.Cleanup(srv.Close)
	return up, gw, srv
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runCallers makes b.N calls from n goroutines, caller i posting to
// target(i).
func runCallers(b *testing.B, n int, body []byte, target func(i int) (url, token string)) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 2048, MaxIdleConnsPerHost: 2048}}
	defer hc.CloseIdleConnections()
	var next, latency atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range n {
		url, token := target(i)
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				latency.Add(int64(time.Since(t0)))
				if resp.StatusCode != 200 {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e3, "cpu-µs/call")
	b.ReportMetric(float64(latency.Load())/float64(b.N)/1e3, "µs/call")
}

// BenchmarkRoutes compares one caller's calls through each wire format
// the gateway serves, the same question to the same fake vLLM: what the
// Responses and Messages translations cost beside chat completions.
func BenchmarkRoutes(b *testing.B) {
	_, gw, srv := benchGateway(b)
	s, err := gw.Open(gateway.SessionConfig{})
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range []struct{ name, path, body string }{
		{"chat", "chat/completions", `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is 3+4?"}]}`},
		{"chat/stream", "chat/completions", `{"model":"m","stream":true,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is 3+4?"}]}`},
		{"responses", "responses", `{"model":"m","instructions":"Be brief.","input":"What is 3+4?"}`},
		{"responses/stream", "responses", `{"model":"m","stream":true,"instructions":"Be brief.","input":"What is 3+4?"}`},
		{"messages", "messages", `{"model":"m","max_tokens":8,"system":"Be brief.","messages":[{"role":"user","content":"What is 3+4?"}]}`},
		{"messages/stream", "messages", `{"model":"m","max_tokens":8,"stream":true,"system":"Be brief.","messages":[{"role":"user","content":"What is 3+4?"}]}`},
	} {
		b.Run(r.name, func(b *testing.B) {
			runCallers(b, 1, []byte(r.body), func(int) (string, string) { return srv.URL + "/sessions/" + s.ID + "/v1/" + r.path, s.Token })
		})
	}
}
