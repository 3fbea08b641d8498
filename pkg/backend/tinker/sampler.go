package tinker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Sampler samples from one set of sampler weights (a
// tinker://…/sampler_weights/… path) with asample. It is safe for
// concurrent use; samples do not take part in the training order.
type Sampler struct {
	c          *Client
	path       string
	name       string
	version    int
	maxContext int
}

var _ backend.TokenSampler = (*Sampler)(nil)

// Name is the snapshot's name.
func (s *Sampler) Name() string { return s.name }

// Version is the snapshot's number.
func (s *Sampler) Version() int { return s.version }

// Path is the snapshot's tinker:// path.
func (s *Sampler) Path() string { return s.path }

// Sample asks the service for NumSamples completions of the prompt.
func (s *Sampler) Sample(ctx context.Context, req backend.SampleRequest) (backend.SampleResult, error) {
	body, err := s.requestBody(req)
	if err != nil {
		return backend.SampleResult{}, err
	}
	raw, err := s.c.invoke(ctx, wire.PathSample, body)
	if err != nil {
		return backend.SampleResult{}, err
	}
	return decodeSample(raw, req)
}

func (s *Sampler) requestBody(req backend.SampleRequest) ([]byte, error) {
	p := req.Params
	n := req.NumSamples
	if n == 0 {
		n = 1
	}
	switch {
	case len(req.Prompt) == 0:
		return nil, usererr.Errorf("a sample request with an empty prompt; give at least one prompt token")
	case n < 0:
		return nil, usererr.Errorf("num_samples is %d; ask for at least one", req.NumSamples)
	case len(p.Stop) > 0 && len(p.StopTokenIDs) > 0:
		return nil, usererr.Errorf("a Tinker sample request takes stop strings or stop token ids, not both; give the token ids as strings")
	}
	for i, t := range req.Prompt {
		if t < 0 {
			return nil, usererr.Errorf("prompt token %d is %d; token ids are ≥ 0", i, t)
		}
	}
	maxTokens := p.MaxTokens
	if s.maxContext > 0 {
		room := s.maxContext - len(req.Prompt)
		if room <= 0 {
			return nil, &usererr.Error{Msg: fmt.Sprintf("the prompt has %d tokens, leaving no room in the served context of %d", len(req.Prompt), s.maxContext), Err: sampler.ErrPromptTooLong}
		}
		if maxTokens <= 0 || maxTokens > room {
			maxTokens = room
		}
	}
	if maxTokens <= 0 {
		return nil, usererr.Errorf("max_tokens is %d and the service does not say its context length; set rollout.max_tokens", p.MaxTokens)
	}
	topK := p.TopK
	if topK <= 0 {
		topK = -1
	}
	topP := p.TopP
	if topP <= 0 || topP > 1 {
		topP = 1
	}
	var stop any = []string{}
	switch {
	case len(p.StopTokenIDs) > 0:
		stop = p.StopTokenIDs
	case len(p.Stop) > 0:
		stop = p.Stop
	}
	return json.Marshal(wire.SampleRequestWire{
		Type:       "sample",
		Prompt:     wire.ModelInput{Chunks: []wire.ModelInputChunk{{Type: "encoded_text", Tokens: req.Prompt}}},
		NumSamples: n,
		SamplingParams: wire.SamplingParamsWire{
			MaxTokens: maxTokens, Temperature: p.Temperature, TopK: topK, TopP: topP, Stop: stop, Seed: p.Seed,
		},
		ModelPath: s.path,
	})
}

// decodeSample checks the result: as many sequences as asked, one
// logprob per token, token ids ≥ 0, a known stop reason.
func decodeSample(raw json.RawMessage, req backend.SampleRequest) (backend.SampleResult, error) {
	var res wire.SampleResultWire
	if err := json.Unmarshal(raw, &res); err != nil {
		return backend.SampleResult{}, fmt.Errorf("%s: the result is not {sequences: [...]}: %v", wire.PathSample, err)
	}
	want := max(req.NumSamples, 1)
	if len(res.Sequences) != want {
		return backend.SampleResult{}, fmt.Errorf("%s: asked for %d sequences, got %d", wire.PathSample, want, len(res.Sequences))
	}
	stops := map[int]bool{}
	for _, t := range req.Params.StopTokenIDs {
		stops[t] = true
	}
	out := backend.SampleResult{Sequences: make([]backend.SampledSequence, len(res.Sequences))}
	for i, seq := range res.Sequences {
		if len(seq.Logprobs) != len(seq.Tokens) {
			return backend.SampleResult{}, fmt.Errorf("%s: sequence %d has %d tokens but %d logprobs; training needs one logprob per token", wire.PathSample, i, len(seq.Tokens), len(seq.Logprobs))
		}
		for j, t := range seq.Tokens {
			if t < 0 {
				return backend.SampleResult{}, fmt.Errorf("%s: sequence %d token %d is %d", wire.PathSample, i, j, t)
			}
		}
		reason := seq.StopReason
		if reason != backend.StopReasonStop && reason != backend.StopReasonLength {
			return backend.SampleResult{}, fmt.Errorf("%s: sequence %d has stop_reason %q; expected stop or length", wire.PathSample, i, reason)
		}
		matched := ""
		if reason == backend.StopReasonStop && len(seq.Tokens) > 0 && stops[seq.Tokens[len(seq.Tokens)-1]] {
			matched = strconv.Itoa(seq.Tokens[len(seq.Tokens)-1])
		}
		out.Sequences[i] = backend.SampledSequence{Tokens: seq.Tokens, Logprobs: seq.Logprobs, StopReason: reason, MatchedStop: matched}
	}
	return out, nil
}
