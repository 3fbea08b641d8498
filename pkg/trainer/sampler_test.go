package trainer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/gateway/gatewaytest"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// gateSampler answers when its gate opens and names itself.
type gateSampler struct {
	name    string
	started chan struct{}
	gate    chan struct{}
}

func (g *gateSampler) Sample(ctx context.Context, _ sampler.Request) (sampler.Response, error) {
	if g.started != nil {
		g.started <- struct{}{}
	}
	if g.gate != nil {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return sampler.Response{}, ctx.Err()
		}
	}
	return sampler.Response{Model: g.name, WeightVersion: "server-says-" + g.name}, nil
}

// Every response carries the version of the snapshot that answered, and
// hold waits for the calls in flight while new calls wait for release:
// with partial_rollout=false no call spans a publish.
func TestSwapSamplerVersionsAndHold(t *testing.T) {
	step := 0
	s := &swapSampler{step: func() int { return step }}
	if _, err := s.Sample(context.Background(), sampler.Request{}); err == nil {
		t.Fatal("sampled before any publish")
	}
	old := &gateSampler{name: "old", started: make(chan struct{}, 1), gate: make(chan struct{})}
	s.swap(old)
	inFlight := make(chan sampler.Response, 1)
	go func() {
		r, _ := s.Sample(context.Background(), sampler.Request{})
		inFlight <- r
	}()
	<-old.started

	held := make(chan error, 1)
	go func() { held <- s.hold(context.Background()) }()
	select {
	case <-held:
		t.Fatal("hold returned while a call was in flight")
	case <-time.After(20 * time.Millisecond):
	}
	// A new call made during the hold waits for release.
	waiting := make(chan sampler.Response, 1)
	go func() {
		r, _ := s.Sample(context.Background(), sampler.Request{})
		waiting <- r
	}()
	close(old.gate)
	if r := <-inFlight; r.WeightVersion != "0" {
		t.Errorf("the call in flight is recorded as version %q, want 0", r.WeightVersion)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	step = 1
	s.swap(&gateSampler{name: "new"})
	select {
	case <-waiting:
		t.Fatal("a call went on during the hold")
	case <-time.After(20 * time.Millisecond):
	}
	s.release()
	if r := <-waiting; r.WeightVersion != "1" || r.Model != "new" {
		t.Errorf("the held call sampled %q as version %q, want new as 1", r.Model, r.WeightVersion)
	}
}

// A hold whose context ends gives up and releases the waiting calls.
func TestSwapSamplerHoldCancelled(t *testing.T) {
	s := &swapSampler{step: func() int { return 0 }}
	g := &gateSampler{name: "a", started: make(chan struct{}, 1), gate: make(chan struct{})}
	s.swap(g)
	go s.Sample(context.Background(), sampler.Request{})
	<-g.started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.hold(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("hold = %v", err)
	}
	close(g.gate)
	if _, err := s.Sample(context.Background(), sampler.Request{}); err != nil {
		t.Fatalf("sampling after a cancelled hold: %v", err)
	}
}

// A gateway in front of the trainer's sampler counts prompt tokens with
// the newest published sampler.
func TestSwapSamplerCountsWithCurrent(t *testing.T) {
	s := &swapSampler{}
	if _, err := sampler.CountPromptTokens(context.Background(), sampler.Seeded(s, 1), sampler.Request{PromptIDs: []int{1}}); !errors.Is(err, sampler.ErrCannotCount) {
		t.Fatalf("before a publish: %v", err)
	}
	s.swap(&gatewaytest.Sampler{})
	n, err := sampler.CountPromptTokens(context.Background(), sampler.Seeded(s, 1), sampler.Request{PromptIDs: []int{1, 2, 3}})
	if err != nil || n != 3 {
		t.Fatalf("counted %d, %v", n, err)
	}
}
