package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// updateServer is an SGLang-style server: it records update bodies and
// answers each with ok.
type updateServer struct {
	mu     sync.Mutex
	bodies []map[string]string
	paths  []string
	ok     bool
}

func (u *updateServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var b map[string]string
	json.NewDecoder(r.Body).Decode(&b)
	u.mu.Lock()
	u.bodies, u.paths = append(u.bodies, b), append(u.paths, r.URL.Path)
	u.mu.Unlock()
	if strings.Contains(r.URL.Path, "lora") {
		w.Write([]byte("Success: LoRA adapter loaded"))
		return
	}
	if !u.ok {
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"success": false, "message": "Failed to load weights: shape mismatch"}`))
		return
	}
	w.Write([]byte(`{"success": true, "message": "Succeeded to update model weights.", "num_paused_requests": 0}`))
}

func TestPublishFullWeights(t *testing.T) {
	a, b := &updateServer{ok: true}, &updateServer{ok: true}
	sa, sb := httptest.NewServer(a), httptest.NewServer(b)
	defer sa.Close()
	defer sb.Close()
	p, err := NewWeightPublisher(PublisherOptions{Endpoints: []string{sa.URL, sb.URL + "/"}, Mode: PublishFullWeights})
	if err != nil {
		t.Fatal(err)
	}
	model, err := p.Publish(context.Background(), 7, "/runs/x/published/step_7")
	if err != nil || model != "" {
		t.Fatalf("model %q err %v", model, err)
	}
	for _, s := range []*updateServer{a, b} {
		if len(s.bodies) != 1 || s.paths[0] != "/update_weights_from_disk" || s.bodies[0]["model_path"] != "/runs/x/published/step_7" || s.bodies[0]["weight_version"] != "7" {
			t.Errorf("update %v %v", s.paths, s.bodies)
		}
	}
}

// An endpoint that refuses the update stops the run, naming it; one that
// is gone is dropped while another remains; with none left it is an error.
func TestPublishFaults(t *testing.T) {
	good, refusing := &updateServer{ok: true}, &updateServer{ok: false}
	sg, sr := httptest.NewServer(good), httptest.NewServer(refusing)
	defer sg.Close()
	defer sr.Close()
	p, _ := NewWeightPublisher(PublisherOptions{Endpoints: []string{sg.URL, sr.URL}, Mode: PublishFullWeights})
	_, err := p.Publish(context.Background(), 1, "/w")
	if err == nil || !strings.Contains(err.Error(), sr.URL) || !strings.Contains(err.Error(), "shape mismatch") {
		t.Errorf("refused update: %v", err)
	}

	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	var warned []string
	p, _ = NewWeightPublisher(PublisherOptions{Endpoints: []string{deadURL, sg.URL}, Mode: PublishFullWeights,
		Warn: func(m string) { warned = append(warned, m) }})
	if _, err := p.Publish(context.Background(), 2, "/w"); err != nil {
		t.Fatalf("one endpoint gone, one left: %v", err)
	}
	if live := p.Live(); len(live) != 1 || live[0] != sg.URL || len(warned) != 1 || !strings.Contains(warned[0], deadURL) {
		t.Errorf("live %v, warnings %v", live, warned)
	}
	p, _ = NewWeightPublisher(PublisherOptions{Endpoints: []string{deadURL}, Mode: PublishFullWeights})
	if _, err := p.Publish(context.Background(), 3, "/w"); err == nil || !strings.Contains(err.Error(), "no inference endpoint is left") {
		t.Errorf("every endpoint gone: %v", err)
	}
}

// vLLM LoRA: each version loads under its own name, which requests then
// use; versions older than the two newest are unloaded.
func TestPublishVLLMLoRA(t *testing.T) {
	s := &updateServer{ok: true}
	srv := httptest.NewServer(s)
	defer srv.Close()
	p, _ := NewWeightPublisher(PublisherOptions{Endpoints: []string{srv.URL}, Mode: PublishVLLMLoRA})
	for v := 1; v <= 3; v++ {
		model, err := p.Publish(context.Background(), v, "/adapters/v"+string(rune('0'+v)))
		if err != nil || model != LoRANameWith("policy", v) {
			t.Fatalf("v%d: model %q err %v", v, model, err)
		}
	}
	want := []string{"/v1/load_lora_adapter", "/v1/load_lora_adapter", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"}
	if strings.Join(s.paths, " ") != strings.Join(want, " ") || s.bodies[3]["lora_name"] != "policy-v1" || s.bodies[2]["lora_name"] != "policy-v3" {
		t.Errorf("calls %v %v", s.paths, s.bodies)
	}
}

// An endpoint the publisher drops is retired from the rollout client: its
// weights are stale, so no request goes to it again even when it answers.
func TestDroppedEndpointIsRetired(t *testing.T) {
	a, b := fakevllm.New(fakevllm.Config{}), fakevllm.New(fakevllm.Config{})
	defer a.Close()
	defer b.Close()
	c, err := NewClient(Options{Endpoints: []string{a.URL, b.URL}, Model: a.Model()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.Retire(a.URL+"/") || c.Retire("http://elsewhere:1") {
		t.Fatal("Retire did not match the endpoints")
	}
	for range 6 {
		if _, err := c.Sample(context.Background(), sampler.Request{Messages: []episode.Message{{Role: "user", Content: "hi"}}, Params: sampler.Params{MaxTokens: 2, Temperature: 1, TopP: 1, TopK: -1}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ep := range c.Stats().Endpoints {
		if ep.URL == a.URL && ep.Requests != 0 {
			t.Errorf("the retired endpoint got %d requests", ep.Requests)
		}
	}
}

// A resumed run publishes a name the server already holds (vLLM refuses
// it with 400 "has already been loaded"): it is unloaded and loaded again
// from the new path, and the run goes on.
func TestPublishReloadsAnAdapterTheServerHas(t *testing.T) {
	s := fakevllm.New(fakevllm.Config{RuntimeLoRA: true})
	defer s.Close()
	first, _ := NewWeightPublisher(PublisherOptions{Endpoints: []string{s.URL}, Mode: PublishVLLMLoRA, Prefix: "exp"})
	for v := 1; v <= 2; v++ {
		if _, err := first.Publish(context.Background(), v, fmt.Sprintf("/run/published/step_%d", v)); err != nil {
			t.Fatal(err)
		}
	}
	// Ctrl-C, then resume from step 2: a new publisher, the same server.
	resumed, _ := NewWeightPublisher(PublisherOptions{Endpoints: []string{s.URL}, Mode: PublishVLLMLoRA, Prefix: "exp"})
	model, err := resumed.Publish(context.Background(), 2, "/run/published/step_2")
	if err != nil || model != "exp-v2" {
		t.Fatalf("resumed publish: %q %v", model, err)
	}
	log := strings.Join(s.AdapterLog(), ", ")
	if !strings.HasSuffix(log, "load exp-v2, unload exp-v2, load exp-v2") {
		t.Fatalf("adapter calls: %s", log)
	}
}

// When one endpoint refuses a version, the others unload it again, so
// that a fixed server can resume from the kept checkpoint.
func TestPartialPublishIsUnloaded(t *testing.T) {
	ok := fakevllm.New(fakevllm.Config{RuntimeLoRA: true})
	defer ok.Close()
	noLoRA := fakevllm.New(fakevllm.Config{}) // started without runtime LoRA: 404
	defer noLoRA.Close()
	p, _ := NewWeightPublisher(PublisherOptions{Endpoints: []string{ok.URL, noLoRA.URL}, Mode: PublishVLLMLoRA})
	if _, err := p.Publish(context.Background(), 3, "/a"); err == nil || !strings.Contains(err.Error(), noLoRA.URL) {
		t.Fatalf("err %v", err)
	}
	if a := ok.Adapters(); len(a) != 0 {
		t.Fatalf("adapters left on the endpoint that took the update: %v", a)
	}
}

// rollout.endpoints may name a server with /v1: the updates still go to
// its /v1/load_lora_adapter, not /v1/v1/...
func TestPublishEndpointSpelledWithV1(t *testing.T) {
	s := fakevllm.New(fakevllm.Config{RuntimeLoRA: true})
	defer s.Close()
	p, err := NewWeightPublisher(PublisherOptions{Endpoints: []string{s.URL + "/v1/"}, Mode: PublishVLLMLoRA})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(context.Background(), 1, "/a"); err != nil {
		t.Fatal(err)
	}
	if a := s.Adapters(); len(a) != 1 || a[0] != "policy-v1" {
		t.Fatalf("adapters %v", a)
	}
}

// Endpoints are updated at once: two servers that each answer only once
// both have the update (a barrier) finish within one timeout, and a load
// slower than the timeout is sent again, not taken for a dead server.
func TestPublishConcurrentAndSlowIsRetried(t *testing.T) {
	var arrived sync.WaitGroup
	arrived.Add(2)
	var calls sync.Map
	barrier := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := calls.LoadOrStore(r.Host, new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) == 1 {
			arrived.Done()
			arrived.Wait()
		}
		w.Write([]byte(`{"success": true}`))
	})
	a, b := httptest.NewServer(barrier), httptest.NewServer(barrier)
	defer a.Close()
	defer b.Close()
	p, _ := NewWeightPublisher(PublisherOptions{Endpoints: []string{a.URL, b.URL}, Mode: PublishFullWeights, Timeout: 10 * time.Second, Attempts: 1})
	if _, err := p.Publish(context.Background(), 1, "/w"); err != nil {
		t.Fatalf("concurrent publish: %v", err)
	}

	var slowCalls atomic.Int32
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // so that a closed connection cancels r's context
		if slowCalls.Add(1) == 1 {
			<-r.Context().Done() // the first load outlasts the timeout
			return
		}
		w.Write([]byte(`{"success": true}`))
	}))
	defer slow.Close()
	var dropped []string
	p, _ = NewWeightPublisher(PublisherOptions{Endpoints: []string{slow.URL}, Mode: PublishFullWeights, Timeout: 200 * time.Millisecond,
		OnDrop: func(u string) { dropped = append(dropped, u) }, Warn: func(string) {}})
	if _, err := p.Publish(context.Background(), 1, "/w"); err != nil || len(dropped) != 0 || len(p.Live()) != 1 {
		t.Fatalf("slow endpoint: err %v, dropped %v", err, dropped)
	}
}

// BenchmarkPublishLoRALatency is the time to publish one LoRA version to
// 1, 2 and 4 vLLM-like endpoints whose load takes 100 ms each (a server
// loading from its own disk, idle CPU): serial publishing adds the loads
// up, concurrent publishing waits for the slowest.
func BenchmarkPublishLoRALatency(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			var urls []string
			for range n {
				s := fakevllm.New(fakevllm.Config{RuntimeLoRA: true, LoadLatency: 100 * time.Millisecond})
				b.Cleanup(s.Close)
				urls = append(urls, s.URL)
			}
			p, err := NewWeightPublisher(PublisherOptions{Endpoints: urls, Mode: PublishVLLMLoRA})
			if err != nil {
				b.Fatal(err)
			}
			v := 0
			for b.Loop() {
				v++
				if _, err := p.Publish(context.Background(), v, "/adapters/v"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
