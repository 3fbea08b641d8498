package rollout

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Pause and Continue post SGLang's bodies to every live endpoint, in the
// modes whose servers have the API; an unreachable endpoint is dropped.
func TestPauseAndContinue(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.URL.Path+" "+string(b))
		mu.Unlock()
		w.Write([]byte(`{"message":"ok","status":"ok"}`))
	}))
	defer srv.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	var dropped []string
	p, err := NewWeightPublisher(PublisherOptions{Endpoints: []string{srv.URL, deadURL}, Mode: PublishFullWeights,
		Warn: func(string) {}, OnDrop: func(u string) { dropped = append(dropped, u) }})
	if err != nil {
		t.Fatal(err)
	}
	if !p.CanPause() {
		t.Fatal("full weights cannot pause")
	}
	if err := p.Pause(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Continue(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `/pause_generation {"mode":"in_place"}|/continue_generation {}`
	if strings.Join(got, "|") != want {
		t.Errorf("calls %q, want %q", got, want)
	}
	if len(dropped) != 1 || dropped[0] != deadURL {
		t.Errorf("dropped %v", dropped)
	}
	v, _ := NewWeightPublisher(PublisherOptions{Endpoints: []string{srv.URL}, Mode: PublishVLLMLoRA})
	if v.CanPause() {
		t.Error("vLLM has no pause API")
	}
}
