package rollout

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

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
		if err != nil || model != LoRAName(v) {
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
