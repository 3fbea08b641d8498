package openai

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	wire "github.com/rllm-org/rllm-go/pkg/openaiwire"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// samplingKeys are the keys openaiwire.SamplingFields reads, plus request metadata
// that changes nothing in the output (user, request_id, cache_salt,
// add_special_tokens: the byte tokenizer adds no BOS either way).
var samplingKeys = keySet("model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "seed", "stop",
	"stop_token_ids", "stream", "stream_options", "logit_bias", "min_tokens", "ignore_eos", "skip_special_tokens",
	"include_stop_str_in_output", "return_token_ids", "return_tokens_as_token_ids", "truncate_prompt_tokens",
	"prompt_logprobs", "allowed_token_ids", "frequency_penalty", "presence_penalty", "repetition_penalty",
	"length_penalty", "best_of", "use_beam_search", "priority", "response_format",
	"user", "request_id", "cache_salt", "add_special_tokens")

// Bounds of stop strings: every sampled token is checked against each
// one, so their number and length bound a request's cost per token (vLLM
// sets no bound; OpenAI allows 4 strings).
const (
	MaxStopStrings = 64
	MaxStopBytes   = 256
)

// genOptions is a validated request: the engine request (without its
// prompt) and how to present the output.
type genOptions struct {
	req             local.GenRequest
	maxTokens       *int // as asked (nil: up to the context or the endpoint's default)
	stream          bool
	includeUsage    bool
	continuousUsage bool
	skipSpecial     bool
	includeStop     bool
	returnIDs       bool
	tokensAsIDs     bool
	stops           []string
	// promptLogprobs is the prompt_logprobs asked for (-1: none); the
	// engine's req.PromptLogprobs may be more, for an echo with logprobs.
	promptLogprobs int
	// tools are the chat request's tools, rendered into the prompt;
	// parseTools (tools offered and tool_choice not "none") takes the
	// reply's <tool_call> blocks out as tool_calls, and a stream holds
	// back the text from the first <tool_call> until the reply ends.
	tools      []sampler.Tool
	parseTools bool
}

// options validates the fields; defaultMax is the endpoint's max_tokens
// when none is given (0: up to the context).
func options(f *wire.SamplingFields, s *Server, defaultMax int) (genOptions, *paramError) {
	o := genOptions{skipSpecial: true}
	p := backend.SamplingParams{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: defaultMax, Seed: f.Seed, StopTokenIDs: f.StopTokenIDs}
	if f.Temperature != nil {
		if t := *f.Temperature; math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
			return o, badParam("temperature", "temperature is %g; use a number ≥ 0 (0 is greedy)", t)
		}
		p.Temperature = *f.Temperature
	}
	if f.TopP != nil {
		if v := *f.TopP; math.IsNaN(v) || v <= 0 || v > 1 {
			return o, badParam("top_p", "top_p is %g; use a number in (0, 1]", v)
		}
		p.TopP = *f.TopP
	}
	if f.TopK != nil {
		if *f.TopK < -1 {
			return o, badParam("top_k", "top_k is %d; use -1 or 0 (off) or a positive number", *f.TopK)
		}
		p.TopK = *f.TopK
	}
	if f.MinP != nil {
		if v := *f.MinP; math.IsNaN(v) || v < 0 || v > 1 {
			return o, badParam("min_p", "min_p is %g; use a number in [0, 1]", v)
		}
		o.req.MinP = *f.MinP
	}
	if f.MaxTokens != nil {
		if *f.MaxTokens < 1 {
			return o, badParam("max_tokens", "max_tokens is %d; it must be at least 1", *f.MaxTokens)
		}
		p.MaxTokens = *f.MaxTokens
		o.maxTokens = f.MaxTokens
	}
	o.req.N = 1
	if f.N != nil {
		if n := *f.N; n < 1 || n > s.opts.MaxN {
			return o, badParam("n", "n is %d; use 1 to %d", n, s.opts.MaxN)
		}
		o.req.N = *f.N
	}
	if len(f.Stop) > 0 && string(f.Stop) != "null" {
		var one string
		if err := json.Unmarshal(f.Stop, &one); err == nil {
			p.Stop = []string{one}
		} else if err := json.Unmarshal(f.Stop, &p.Stop); err != nil {
			return o, badParam("stop", "stop must be a string or a list of strings")
		}
		if len(p.Stop) > MaxStopStrings {
			return o, badParam("stop", "stop has %d strings; send at most %d", len(p.Stop), MaxStopStrings)
		}
		for i, st := range p.Stop {
			if st == "" {
				return o, badParam("stop", "stop has an empty string; remove it")
			}
			if len(st) > MaxStopBytes {
				return o, badParam("stop", "stop string %d is %d bytes long; stop strings may have at most %d bytes", i, len(st), MaxStopBytes)
			}
		}
		o.stops = p.Stop
	}
	if len(f.StopTokenIDs) > local.TokenizerVocab {
		return o, badParam("stop_token_ids", "stop_token_ids has %d ids; the vocabulary has only %d", len(f.StopTokenIDs), local.TokenizerVocab)
	}
	for _, id := range f.StopTokenIDs {
		if id < 0 || id >= local.TokenizerVocab {
			return o, badParam("stop_token_ids", "stop token id %d is outside the vocabulary [0, %d)", id, local.TokenizerVocab)
		}
	}
	for _, id := range f.AllowedTokenIDs {
		if id < 0 || id >= local.TokenizerVocab {
			return o, badParam("allowed_token_ids", "allowed token id %d is outside the vocabulary [0, %d)", id, local.TokenizerVocab)
		}
	}
	o.req.AllowedTokenIDs = f.AllowedTokenIDs
	if len(f.LogitBias) > 0 {
		o.req.LogitBias = map[int]float64{}
		for k, v := range f.LogitBias {
			id, err := strconv.Atoi(k)
			if err != nil || id < 0 || id >= local.TokenizerVocab {
				return o, badParam("logit_bias", "logit_bias key %q is not a token id in [0, %d)", k, local.TokenizerVocab)
			}
			if math.IsNaN(v) || v < -100 || v > 100 {
				return o, badParam("logit_bias", "logit_bias for token %d is %g; use a number in [-100, 100]", id, v)
			}
			o.req.LogitBias[id] = v
		}
	}
	if f.MinTokens != nil {
		if *f.MinTokens < 0 || (f.MaxTokens != nil && *f.MinTokens > *f.MaxTokens) {
			return o, badParam("min_tokens", "min_tokens is %d; use 0 to max_tokens", *f.MinTokens)
		}
		o.req.MinTokens = *f.MinTokens
	}
	o.req.IgnoreEOS = f.IgnoreEOS
	o.req.PromptLogprobs = -1
	if f.PromptLogprobs != nil {
		if k := *f.PromptLogprobs; k < -1 || k > s.opts.MaxLogprobs {
			return o, badParam("prompt_logprobs", "prompt_logprobs is %d; use 0 to %d", k, s.opts.MaxLogprobs)
		}
		o.req.PromptLogprobs = *f.PromptLogprobs
	}
	o.promptLogprobs = o.req.PromptLogprobs
	if f.Stream != nil {
		o.stream = *f.Stream
	}
	if f.StreamOptions != nil {
		if !o.stream {
			return o, badParam("stream_options", "stream_options is only allowed with stream: true")
		}
		o.includeUsage = f.StreamOptions.IncludeUsage
		o.continuousUsage = f.StreamOptions.ContinuousUsageStats && f.StreamOptions.IncludeUsage
	}
	if o.stream && o.req.PromptLogprobs >= 0 {
		return o, badParam("prompt_logprobs", "prompt_logprobs are not available with stream: true")
	}
	if f.SkipSpecialTokens != nil {
		o.skipSpecial = *f.SkipSpecialTokens
	}
	o.includeStop = f.IncludeStopStrInOutput
	o.returnIDs = f.ReturnTokenIDs
	o.tokensAsIDs = f.ReturnTokensAsTokenIDs

	// What the embedded policy cannot do is refused, never ignored.
	switch {
	case f.FrequencyPenalty != nil && *f.FrequencyPenalty != 0:
		return o, badParam("frequency_penalty", "frequency_penalty is not supported by rllm serve; send 0 or leave it out")
	case f.PresencePenalty != nil && *f.PresencePenalty != 0:
		return o, badParam("presence_penalty", "presence_penalty is not supported by rllm serve; send 0 or leave it out")
	case f.RepetitionPenalty != nil && *f.RepetitionPenalty != 1:
		return o, badParam("repetition_penalty", "repetition_penalty is not supported by rllm serve; send 1 or leave it out")
	case f.LengthPenalty != nil && *f.LengthPenalty != 1:
		return o, badParam("length_penalty", "length_penalty (beam search) is not supported by rllm serve; send 1 or leave it out")
	case f.BestOf != nil && *f.BestOf != o.req.N:
		return o, badParam("best_of", "best_of other than n is not supported by rllm serve; sample n choices and rank them yourself")
	case f.UseBeamSearch:
		return o, badParam("use_beam_search", "beam search is not supported by rllm serve")
	case f.Priority != 0:
		return o, badParam("priority", "priority scheduling is not supported by rllm serve (requests are served first come, first served); send 0")
	case f.ResponseFormat != nil && f.ResponseFormat.Type != "" && f.ResponseFormat.Type != "text":
		return o, badParam("response_format", "response_format %q is not supported by rllm serve (no guided decoding); send {\"type\": \"text\"} or leave it out", f.ResponseFormat.Type)
	}
	o.req.Params = p
	return o, nil
}
