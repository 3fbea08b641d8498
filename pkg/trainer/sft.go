package trainer

import (
	"context"
	"math/rand/v2"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// SFTOptions shape a supervised (cross_entropy) run.
type SFTOptions struct {
	Epochs, BatchSize int
	Adam              backend.AdamParams
	// Shuffle, when set, reorders the data at each epoch; nil keeps it in
	// order.
	Shuffle *rand.Rand
	// OnStep, when set, receives each optimizer step's per-token loss.
	OnStep func(step, steps, epoch int, loss float64)
}

// SFT is the one supervised loop, used by `rllm sft` and by the warm-up:
// cross_entropy on the datums' weighted targets through any
// TrainingBackend, each step's forward_backward and optim_step queued
// before waiting. It returns the per-token loss of every step.
func SFT(ctx context.Context, be backend.TrainingBackend, data []backend.Datum, o SFTOptions) ([]float64, error) {
	loss := backend.Loss{Name: backend.LossCrossEntropy}
	batch := max(o.BatchSize, 1)
	steps := o.Epochs * ((len(data) + batch - 1) / batch)
	order := make([]int, len(data))
	for i := range order {
		order[i] = i
	}
	var curve []float64
	for epoch := 1; epoch <= o.Epochs; epoch++ {
		if o.Shuffle != nil {
			o.Shuffle.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		for start := 0; start < len(order); start += batch {
			mb := make([]backend.Datum, 0, batch)
			var weight float64
			for _, i := range order[start:min(start+batch, len(order))] {
				mb = append(mb, data[i])
				for _, w := range data[i].LossFnInputs.Weights {
					weight += w
				}
			}
			fb := be.ForwardBackward(ctx, mb, loss)
			opt := be.OptimStep(ctx, o.Adam)
			res, err := fb.Result(ctx)
			if err != nil {
				return curve, err
			}
			if _, err := opt.Result(ctx); err != nil {
				return curve, err
			}
			perToken := res.Metrics["loss:sum"] / max(weight, 1)
			curve = append(curve, perToken)
			if o.OnStep != nil {
				o.OnStep(len(curve), steps, epoch, perToken)
			}
		}
	}
	return curve, nil
}

// SFTExample is one supervised pair: a chat, and the assistant reply the
// model is to learn to give after it.
type SFTExample struct {
	Messages []episode.Message
	Reply    string
}

// SFTDatums turns examples into cross_entropy datums exactly as the model
// sees them, on any backend: the chat rendered by the backend's own chat
// sampler (the embedded policy's ChatML, or the base model's template from
// its tokenizer files on Tinker), the reply encoded by its tokenizer and
// closed by its end-of-turn token, weight 1 on the reply's tokens and 0
// on the prompt's (the Tinker cookbook's TrainOnWhat.LAST_ASSISTANT_MESSAGE).
// rowError names example i in an error.
func SFTDatums(ctx context.Context, be backend.TrainingBackend, examples []SFTExample, rowError func(i int, format string, args ...any) error) ([]backend.Datum, error) {
	codec, context := be.Codec(), be.Info().MaxContext
	fixed := &fixedReply{}
	chat := be.ChatSampler(fixed)
	data := make([]backend.Datum, 0, len(examples))
	for i, ex := range examples {
		fixed.tokens = replyTokens(codec, ex.Reply)
		res, err := chat.Sample(ctx, sampler.Request{Messages: ex.Messages, Params: sampler.Params{MaxTokens: len(fixed.tokens)}})
		if err != nil {
			return nil, rowError(i, "cannot be rendered with the model's chat template: %v", err)
		}
		full := append(append([]int(nil), res.PromptIDs...), res.CompletionIDs...)
		n := len(full) - 1
		if context > 0 && n > context {
			return nil, rowError(i, "is %d tokens after the chat template, more than the %d a model of context %d trains on; shorten it or train a model with a longer context", len(full), context+1, context)
		}
		w := make([]float64, n)
		for j := len(res.PromptIDs) - 1; j < n; j++ {
			w[j] = 1
		}
		data = append(data, backend.Datum{Input: full[:n], LossFnInputs: backend.LossFnInputs{TargetTokens: full[1:], Weights: w}})
	}
	return data, nil
}

// replyTokens is a reply as the model writes it: the text's tokens, then
// the end-of-turn token.
func replyTokens(codec backend.Codec, text string) []int {
	return append(codec.Encode(text, false), codec.StopTokens()[0])
}

// fixedReply is a token sampler that answers every prompt with the same
// tokens, so a chat sampler over it yields the prompt as the model's
// template renders it and the reply as the model would have written it.
// It serves one call at a time.
type fixedReply struct{ tokens []int }

func (s *fixedReply) Name() string { return "sft-reply" }
func (s *fixedReply) Version() int { return 0 }

func (s *fixedReply) Sample(_ context.Context, _ backend.SampleRequest) (backend.SampleResult, error) {
	return backend.SampleResult{Sequences: []backend.SampledSequence{{
		Tokens: s.tokens, Logprobs: make([]float64, len(s.tokens)), StopReason: backend.StopReasonStop,
	}}}, nil
}
