package trainer

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// swapSampler is the chat sampler over the newest published weights;
// before the first publication it refuses to sample. It is where every
// sampled turn gets the weight version it was drawn with: the training
// step whose weights were published (0: the weights training started
// from), written to the response's WeightVersion, which the workflows
// copy into episode.Step.WeightVersion.
//
// It can also hold new calls while weights are published
// (async_training.partial_rollout=false): hold waits for the calls in
// flight to finish, and calls made until release wait for it.
type swapSampler struct {
	mu  sync.Mutex
	cur sampler.Sampler
	// step reads the trainer's step; swap records it as the version.
	step    func() int
	version int
	// remote is how an inference server updated in place names the
	// version that answered: its weight_version (full weights published
	// as the step), or the model name of a versioned adapter (kept in
	// models). Empty for snapshot samplers.
	remote rollout.PublishMode
	models map[string]int

	inflight int
	held     chan struct{} // closed by release; nil when not holding
	drained  chan struct{} // closed when inflight reaches 0 during a hold
}

// versioned is a sampler that names the model it samples (rollout.Client).
type versioned interface{ Model() string }

func (s *swapSampler) swap(next sampler.Sampler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = next
	if s.step != nil {
		s.version = s.step()
	}
	if v, ok := next.(versioned); ok && (s.remote == rollout.PublishVLLMLoRA || s.remote == rollout.PublishSGLangLoRA) {
		if s.models == nil {
			s.models = map[string]int{}
		}
		s.models[v.Model()] = s.version
	}
}

// Version is the version new calls sample from.
func (s *swapSampler) Version() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

func (s *swapSampler) Sample(ctx context.Context, req sampler.Request) (sampler.Response, error) {
	s.mu.Lock()
	for s.held != nil {
		ch := s.held
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return sampler.Response{}, ctx.Err()
		}
		s.mu.Lock()
	}
	cur, v := s.cur, s.version
	s.inflight++
	s.mu.Unlock()
	defer s.done()
	if cur == nil {
		return sampler.Response{}, errors.New("trainer: no weights published yet")
	}
	resp, err := cur.Sample(ctx, req)
	if err == nil {
		resp.WeightVersion = strconv.Itoa(s.versionOf(resp, v))
	}
	return resp, err
}

// Unwrap is the sampler of the newest published weights (sampler.Wrapper):
// a gateway counts a prompt's tokens with it.
func (s *swapSampler) Unwrap() sampler.Sampler {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// versionOf is the version a response was sampled with. A snapshot
// sampler (the embedded policy, Tinker's sampling clients) samples from
// the weights it was published with: v, the version when the call
// started. An inference server is updated in place, so its own report
// wins — the adapter the request named, exactly, or the server's
// weight_version (the step the trainer published; anything else means
// the server missed the updates: -1, older than any) — but never a
// version newer than v: a call that spans an update has tokens of both,
// and the older one bounds its staleness.
func (s *swapSampler) versionOf(resp sampler.Response, v int) int {
	switch s.remote {
	case rollout.PublishFullWeights:
		if resp.WeightVersion == "" {
			return v // a server that does not say
		}
		n, err := strconv.Atoi(resp.WeightVersion)
		if err != nil || n < 0 {
			return -1 // weights the trainer never published
		}
		return min(n, v)
	case rollout.PublishVLLMLoRA, rollout.PublishSGLangLoRA:
		s.mu.Lock()
		m, ok := s.models[resp.Model]
		s.mu.Unlock()
		if ok && resp.Model != "" {
			return min(m, v)
		}
	}
	return v
}

func (s *swapSampler) done() {
	s.mu.Lock()
	s.inflight--
	if s.inflight == 0 && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
	s.mu.Unlock()
}

// hold stops new calls and waits for those in flight to finish; release
// lets the waiting calls go on. On ctx's end hold releases and returns
// ctx's error.
func (s *swapSampler) hold(ctx context.Context) error {
	s.mu.Lock()
	if s.held == nil {
		s.held = make(chan struct{})
	}
	var wait chan struct{}
	if s.inflight > 0 {
		if s.drained == nil {
			s.drained = make(chan struct{})
		}
		wait = s.drained
	}
	s.mu.Unlock()
	if wait == nil {
		return nil
	}
	select {
	case <-wait:
		return nil
	case <-ctx.Done():
		s.release()
		return ctx.Err()
	}
}

func (s *swapSampler) release() {
	s.mu.Lock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
	s.mu.Unlock()
}
