package local

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// MaxSamples bounds num_samples in one request.
const MaxSamples = 1024

// Snapshot is an immutable copy of the weights published for sampling. It
// implements backend.TokenSampler.
//
// Logprobs: each sampled token's logprob is log_softmax(logits)[token] of
// the unmodified model at temperature 1, before temperature, top-k or
// top-p shape the sampling distribution (vLLM's default "raw_logprobs").
// That is exactly what Forward and ForwardBackward compute for the same
// sequence, so an importance ratio of the snapshot against itself is 1.
// With temperature ≠ 1 or truncation the tokens come from a different
// distribution than these logprobs describe; the trainer must know that.
type Snapshot struct {
	name    string
	version int
	w       *weights
	workers int

	// prefixes caches the KV rows of prompts and decoded sequences
	// (prefixcache.go), made on first use because snapshots are built as
	// literals.
	prefixOnce sync.Once
	prefixes   *prefixCache
}

var _ backend.TokenSampler = (*Snapshot)(nil)

// Name is the snapshot's name, e.g. "local-v3".
func (s *Snapshot) Name() string { return s.name }

// Version is the snapshot's number, counting from 1 per backend.
func (s *Snapshot) Version() int { return s.version }

// Config is the model configuration of the snapshot.
func (s *Snapshot) Config() Config { return s.w.cfg }

// Tokenizer is the snapshot's tokenizer.
func (s *Snapshot) Tokenizer() Tokenizer { return Tokenizer{} }

// prefixCache is the snapshot's prefix cache, bounded by
// defaultPrefixCacheLimit unless a test set it first.
func (s *Snapshot) prefixCache() *prefixCache {
	s.prefixOnce.Do(func() { s.prefixes = newPrefixCache(s.w, defaultPrefixCacheLimit(s.w.cfg)) })
	return s.prefixes
}

// Sample draws req.NumSamples completions of req.Prompt. The prompt is run
// once and its KV cache shared, also with concurrent and later requests
// for the same prompt on this snapshot, and only the part of it after the
// longest cached prefix (an earlier prompt, or an earlier prompt and its
// reply) is run at all (prefixcache.go); the sequences then decode in
// parallel, and what they decoded is cached for the next turn.
func (s *Snapshot) Sample(ctx context.Context, req backend.SampleRequest) (backend.SampleResult, error) {
	cfg := s.w.cfg
	if err := validateSampleRequest(&req, cfg.Context); err != nil {
		return backend.SampleResult{}, err
	}
	n := max(req.NumSamples, 1)
	pc := s.prefixCache()
	prompt, err := pc.get(ctx, req.Prompt)
	if err != nil {
		return backend.SampleResult{}, err
	}

	seed := rand.Uint64()
	if req.Params.Seed != nil {
		seed = uint64(*req.Params.Seed)
	}
	out := make([]backend.SampledSequence, n)
	workers := max(1, min(s.workers, n))
	pool := scratchPool(cfg)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := pool.Get().(*sampleScratch)
			defer pool.Put(sc)
			for i := wk; i < n; i += workers {
				sc.dec.load(prompt)
				rng := rand.New(rand.NewPCG(seed, uint64(i)))
				seq, err := s.decode(ctx, sc.dec, prompt.logits, len(req.Prompt), req.Params, rng, sc.probs)
				if err != nil {
					errs[wk] = err
					return
				}
				out[i] = seq
				pc.keepDecoded(req.Prompt, seq.Tokens, sc.dec)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return backend.SampleResult{}, err
		}
	}
	return backend.SampleResult{Sequences: out}, nil
}

// decode samples one sequence from dec, which holds the prompt; logits
// are the prompt's next-token logits and are only read (they may be a
// cache entry's); scratch holds TokenizerVocab values.
func (s *Snapshot) decode(ctx context.Context, dec *decoder, logits []float32, promptLen int, p backend.SamplingParams, rng *rand.Rand, scratch []float64) (backend.SampledSequence, error) {
	ctxLen := s.w.cfg.Context
	maxTokens := ctxLen - promptLen
	if p.MaxTokens > 0 {
		maxTokens = min(maxTokens, p.MaxTokens)
	}
	var seq backend.SampledSequence
	var text strings.Builder
	for {
		if err := ctx.Err(); err != nil {
			return seq, err
		}
		lse := logSumExp(logits)
		tok := choose(logits, p, rng, scratch)
		seq.Tokens = append(seq.Tokens, tok)
		seq.Logprobs = append(seq.Logprobs, float64(logits[tok])-lse)
		if tok == TokenEOS || tok == TokenImEnd {
			seq.StopReason = backend.StopReasonStop
			return seq, nil
		}
		if slices.Contains(p.StopTokenIDs, tok) {
			seq.StopReason, seq.MatchedStop = backend.StopReasonStop, strconv.Itoa(tok)
			return seq, nil
		}
		if tok < 256 {
			text.WriteByte(byte(tok))
			for _, stop := range p.Stop {
				if stop != "" && strings.HasSuffix(text.String(), stop) {
					seq.StopReason, seq.MatchedStop = backend.StopReasonStop, stop
					return seq, nil
				}
			}
		}
		if len(seq.Tokens) >= maxTokens {
			seq.StopReason = backend.StopReasonLength
			return seq, nil
		}
		logits = dec.step(s.w, []int{tok})
	}
}

// choose draws a token from logits shaped by temperature, top-k and top-p.
// Temperature 0 takes the most likely token (the first on a tie).
func choose(logits []float32, p backend.SamplingParams, rng *rand.Rand, probs []float64) int {
	if p.Temperature == 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return best
	}
	m := float64(slices.Max(logits))
	var total float64
	for i, v := range logits {
		probs[i] = math.Exp((float64(v) - m) / p.Temperature)
		total += probs[i]
	}
	topK := p.TopK > 0 && p.TopK < len(logits)
	topP := p.TopP > 0 && p.TopP < 1
	if !topK && !topP {
		u := rng.Float64() * total
		for i, q := range probs[:len(logits)] {
			u -= q
			if u < 0 {
				return i
			}
		}
		return len(logits) - 1
	}
	idx := make([]int, len(logits))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case probs[a] > probs[b]:
			return -1
		case probs[a] < probs[b]:
			return 1
		}
		return 0
	})
	keep := len(idx)
	if topK {
		keep = p.TopK
	}
	if topP {
		var kept float64
		for _, i := range idx[:keep] {
			kept += probs[i]
		}
		var cum float64
		for k, i := range idx[:keep] {
			cum += probs[i]
			if cum >= p.TopP*kept {
				keep = k + 1
				break
			}
		}
	}
	var kept float64
	for _, i := range idx[:keep] {
		kept += probs[i]
	}
	u := rng.Float64() * kept
	for _, i := range idx[:keep] {
		u -= probs[i]
		if u < 0 {
			return i
		}
	}
	return idx[keep-1]
}

func validateSampleRequest(req *backend.SampleRequest, ctxLen int) error {
	p := req.Params
	switch {
	case len(req.Prompt) == 0:
		return inputErrorf("the prompt is empty; give at least one token")
	case len(req.Prompt) >= ctxLen:
		return &backend.InputError{Err: sampler.ErrPromptTooLong,
			Msg: fmt.Sprintf("the prompt has %d tokens but the model's context is %d (prompt + reply); shorten the prompt", len(req.Prompt), ctxLen)}
	case req.NumSamples < 0 || req.NumSamples > MaxSamples:
		return inputErrorf("num_samples is %d; use 1 to %d", req.NumSamples, MaxSamples)
	case math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0) || p.Temperature < 0:
		return inputErrorf("temperature is %g; use a number ≥ 0 (0 is greedy)", p.Temperature)
	case math.IsNaN(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return inputErrorf("top_p is %g; use a number in (0, 1] (0 or 1 disables it)", p.TopP)
	case p.MaxTokens < 0:
		return inputErrorf("max_tokens is %d; use a positive number (0 means up to the context)", p.MaxTokens)
	}
	for i, t := range req.Prompt {
		if t < 0 || t >= TokenizerVocab {
			return inputErrorf("prompt token %d is %d, outside the vocabulary [0, %d)", i, t, TokenizerVocab)
		}
	}
	for _, t := range p.StopTokenIDs {
		if t < 0 || t >= TokenizerVocab {
			return inputErrorf("stop token id %d is outside the vocabulary [0, %d)", t, TokenizerVocab)
		}
	}
	return nil
}

func inputErrorf(format string, args ...any) error {
	return &backend.InputError{Msg: fmt.Sprintf(format, args...)}
}

// decoder is the KV cache of one sequence plus scratch for up to rows new
// rows per step.
type decoder struct {
	cfg    Config
	pos    int
	caches [][]float32 // per layer: [ctx, 3d] q|k|v rows
	bufs   []blockBufs
	rstdF  []float32
	nf     []float32
	logits []float32
}

func newDecoder(c Config, rows int) *decoder { return newDecoderCap(c, rows, c.Context) }

// newDecoderCap is a decoder whose cache holds capacity positions, for a
// prefill that needs no room to decode after it. The arithmetic does not
// depend on the capacity.
func newDecoderCap(c Config, rows, capacity int) *decoder {
	d, ff, H := c.DModel, c.DFF, c.Heads
	f := func(n int) []float32 { return make([]float32, n) }
	dec := &decoder{cfg: c, rstdF: f(1), nf: f(d), logits: f(TokenizerVocab)}
	prev := f(rows * d)
	for range c.Layers {
		b := blockBufs{
			x: prev, rstd1: f(rows), n1: f(rows * d), qkv: f(capacity * 3 * d), probs: f(H * rows * capacity),
			att: f(rows * d), x1: f(rows * d), rstd2: f(rows), n2: f(rows * d), hpre: f(rows * ff), hact: f(rows * ff), out: f(rows * d),
			probStride: capacity,
		}
		dec.caches = append(dec.caches, b.qkv)
		dec.bufs = append(dec.bufs, b)
		prev = b.out
	}
	return dec
}

// step runs tokens at the next positions and returns the logits of the
// last one (valid until the next step).
func (dec *decoder) step(w *weights, tokens []int) []float32 {
	c, d, n := dec.cfg, dec.cfg.DModel, len(tokens)
	x := dec.bufs[0].x
	for r, t := range tokens {
		xi := x[r*d : (r+1)*d]
		copy(xi, w.tokEmb[t*d:(t+1)*d])
		for k, p := range w.posEmb[(dec.pos+r)*d : (dec.pos+r+1)*d] {
			xi[k] += p
		}
	}
	for l := range dec.bufs {
		blockForward(c, &w.layers[l], &dec.bufs[l], dec.pos, n)
	}
	last := dec.bufs[len(dec.bufs)-1].out[(n-1)*d : n*d]
	rmsNorm(dec.nf, dec.rstdF, last, w.finalNorm, 1, d)
	matMul(dec.logits, dec.nf, w.head, 1, d, TokenizerVocab)
	dec.pos += n
	return dec.logits
}
