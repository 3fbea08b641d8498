package trainer

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// Asynchronous training with rollouts from two rllm serve endpoints
// (SGLang's weight API): every turn records the version the server
// answered with, staleness stays within the bound, and both servers end
// on the last step's weights — with partial rollouts and without.
func TestAsyncWithRolloutsFromServers(t *testing.T) {
	for _, partial := range []string{"true", "false"} {
		t.Run("partial="+partial, func(t *testing.T) {
			base := smallConfig(t)
			a, real := serveLike(t, base), serveLike(t, base)
			var mu sync.Mutex
			var admin []string
			b := proxyTo(t, real, func(_ http.ResponseWriter, r *http.Request) bool {
				if !strings.Contains(r.URL.Path, "completions") {
					mu.Lock()
					admin = append(admin, r.URL.Path)
					mu.Unlock()
				}
				return true
			})
			c := smallConfig(t, "rollout.engine=sglang", "rollout.endpoints=["+a+","+b+"]", "rollout.model=policy",
				"trainer.total_training_steps=3", "backend.local.warmup_steps=0", "async_training.enable=true",
				"async_training.staleness_threshold=1", "async_training.mini_batch_size=2", "async_training.partial_rollout="+partial)
			tr, err := New(context.Background(), c, Options{Rollouts: mustClient(t, "policy", a, b)})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			res, err := tr.Train(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Steps != 3 {
				t.Fatalf("steps %d", res.Steps)
			}
			for _, url := range []string{a, b} {
				if v := weightVersion(t, url); v != "3" {
					t.Errorf("%s serves version %q, want 3", url, v)
				}
			}
			for i, m := range readMetrics(t, c.Trainer.DefaultLocalDir) {
				if m["async/staleness_max"].(float64) > 1 || m["async/dropped_stale"].(float64) != 0 {
					t.Errorf("step %d: staleness max %v dropped %v", i+1, m["async/staleness_max"], m["async/dropped_stale"])
				}
			}
			// Without partial rollouts every update after the first is
			// bracketed by SGLang's pause and continue.
			got := strings.Join(admin, " ")
			bracket := "/pause_generation /update_weights_from_disk /continue_generation"
			if n := strings.Count(got, bracket); (partial == "false" && n != 3) || (partial == "true" && strings.Contains(got, "pause")) {
				t.Errorf("partial=%s: admin calls %s", partial, got)
			}
		})
	}
}

// A server that answers with weights older than the bound (it lost the
// updates) has its groups dropped and counted, never trained; when every
// group is stale the run stops with an error saying so instead of
// looping.
func TestAsyncDropsStaleGroups(t *testing.T) {
	base := smallConfig(t)
	real := serveLike(t, base)
	// A proxy that claims version 0 forever in the OpenAI response
	// metadata, as a server that missed every update would.
	var calls atomic.Int64
	proxy := proxyRewrite(t, real, func(w http.ResponseWriter, r *http.Request) bool {
		calls.Add(1)
		if r.URL.Path == "/update_weights_from_disk" {
			w.Write([]byte(`{"success":true,"message":"ok"}`))
			return false
		}
		return true
	}, func(body []byte) []byte { return versionRE.ReplaceAll(body, []byte(`"weight_version":"0"`)) })
	c := smallConfig(t, "rollout.engine=sglang", "rollout.endpoints=["+proxy+"]", "rollout.model=policy",
		"trainer.total_training_steps=3", "backend.local.warmup_steps=0", "async_training.enable=true", "async_training.staleness_threshold=0")
	tr, err := New(context.Background(), c, Options{Rollouts: mustClient(t, "policy", proxy)})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	res, err := tr.Train(context.Background())
	if err == nil {
		t.Fatal("trained on a server that never took the weights")
	}
	if res.Steps != 1 {
		t.Errorf("%d steps trained, want 1 (the first, on version 0)", res.Steps)
	}
	if !strings.Contains(err.Error(), "not receiving the published weights") {
		t.Errorf("err = %v", err)
	}
	if calls.Load() == 0 {
		t.Error("no request reached the server")
	}
}

var versionRE = regexp.MustCompile(`"weight_version":\s*"[^"]*"`)

// The version a response is recorded with: a snapshot sampler's is the
// version the call started on; a server's own report wins but is never
// newer than that; a full-weights server naming weights the trainer never
// published (it missed the updates) is older than any.
func TestVersionOf(t *testing.T) {
	for _, tc := range []struct {
		mode  rollout.PublishMode
		resp  sampler.Response
		start int
		want  int
	}{
		{"", sampler.Response{WeightVersion: "1"}, 4, 4},
		{rollout.PublishFullWeights, sampler.Response{WeightVersion: "3"}, 4, 3},
		{rollout.PublishFullWeights, sampler.Response{WeightVersion: "5"}, 4, 4},
		{rollout.PublishFullWeights, sampler.Response{}, 4, 4},
		{rollout.PublishFullWeights, sampler.Response{WeightVersion: "base"}, 4, -1},
		{rollout.PublishVLLMLoRA, sampler.Response{Model: "policy-v2", WeightVersion: "0"}, 4, 2},
		{rollout.PublishVLLMLoRA, sampler.Response{Model: "other"}, 4, 4},
	} {
		s := &swapSampler{remote: tc.mode, models: map[string]int{"policy-v2": 2}}
		if got := s.versionOf(tc.resp, tc.start); got != tc.want {
			t.Errorf("%s %+v from %d: %d, want %d", tc.mode, tc.resp, tc.start, got, tc.want)
		}
	}
}

// A sampler endpoint that dies mid-run: its requests fail over to the
// other endpoint, the publisher drops it with a warning, and the run
// trains every step on groups within the staleness bound.
func TestAsyncSurvivesADyingEndpoint(t *testing.T) {
	base := smallConfig(t)
	a, b := serveLike(t, base), serveLike(t, base)
	var served atomic.Int64
	var dead atomic.Bool
	var srv *httptest.Server
	var once sync.Once
	srv = proxyServer(t, b, func(w http.ResponseWriter, r *http.Request) bool {
		if dead.Load() || (strings.HasSuffix(r.URL.Path, "/completions") && served.Add(1) > 24) {
			// The process dies: this request's connection drops and no
			// connection is accepted any more.
			dead.Store(true)
			once.Do(func() { srv.Listener.Close() })
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close()
				}
			}
			return false
		}
		return true
	}, nil)
	dying := srv.URL
	c := smallConfig(t, "rollout.engine=sglang", "rollout.endpoints=["+a+","+dying+"]", "rollout.model=policy",
		"trainer.total_training_steps=4", "backend.local.warmup_steps=0", "async_training.enable=true",
		"async_training.staleness_threshold=1", "async_training.mini_batch_size=4")
	var log strings.Builder
	tr, err := New(context.Background(), c, Options{Rollouts: mustClient(t, "policy", a, dying), Log: &lockedWriter{w: &log}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	res, err := tr.Train(context.Background())
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if res.Steps != 4 || !dead.Load() {
		t.Fatalf("steps %d, endpoint died %v", res.Steps, dead.Load())
	}
	if v := weightVersion(t, a); v != "4" {
		t.Errorf("the surviving endpoint serves version %q, want 4", v)
	}
	for i, m := range readMetrics(t, c.Trainer.DefaultLocalDir) {
		if s, ok := m["async/staleness_max"].(float64); !ok || s > 1 {
			t.Errorf("step %d: staleness %v", i+1, m["async/staleness_max"])
		}
	}
}

// lockedWriter serialises writes from the trainer's goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// proxyTo fronts url; hook sees each request first and answers it
// itself by returning false.
func proxyTo(t testing.TB, url string, hook func(w http.ResponseWriter, r *http.Request) bool) string {
	return proxyRewrite(t, url, hook, nil)
}

// proxyRewrite is proxyTo passing every answer's body through rewrite.
func proxyRewrite(t testing.TB, url string, hook func(w http.ResponseWriter, r *http.Request) bool, rewrite func([]byte) []byte) string {
	return proxyServer(t, url, hook, rewrite).URL
}

// proxyServer is proxyRewrite's server.
func proxyServer(t testing.TB, url string, hook func(w http.ResponseWriter, r *http.Request) bool, rewrite func([]byte) []byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hook(w, r) {
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, url+r.URL.Path, r.Body)
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		if rewrite == nil {
			io.Copy(w, resp.Body)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		w.Write(rewrite(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}
