// Package backend defines how a trainer drives a policy model's training
// engine, shaped after the Tinker training API so that the embedded
// pure-Go model (subpackage local) and a Tinker client are interchangeable:
// queued calls that return futures, datums whose input position i predicts
// target i, losses by name with Tinker's definitions, Adam parameters per
// optimizer step, checkpoints with optimizer state, and immutable,
// versioned snapshots of the weights for sampling.
package backend

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// TrainingBackend is one trainable model. Calls on it run in the order
// they were submitted, each after the previous one has finished, whatever
// order the caller waits on their futures in. Implementations are safe for
// concurrent use.
type TrainingBackend interface {
	Info() ModelInfo

	// ForwardBackward computes the loss of each datum and adds its
	// gradient to the accumulated gradient (until the next OptimStep).
	ForwardBackward(ctx context.Context, data []Datum, loss Loss) *Future[ForwardBackwardOutput]
	// Forward computes the same outputs without touching the gradient.
	Forward(ctx context.Context, data []Datum, loss Loss) *Future[ForwardBackwardOutput]
	// OptimStep applies the accumulated gradient with Adam(W) and clears
	// it. A gradient with a NaN or Inf is refused with an error and the
	// weights are left unchanged.
	OptimStep(ctx context.Context, params AdamParams) *Future[OptimStepOutput]

	// SaveState writes weights and optimizer state (for resume) under
	// path, a local directory, and returns where they are: path itself for
	// a backend that keeps weights locally; a remote backend saves them on
	// its service, records what finds them again in files under path, and
	// returns the remote path (tinker://…) that LoadState takes.
	SaveState(ctx context.Context, path string) *Future[string]
	// LoadState reads what SaveState wrote; the optimizer state too when
	// withOptimizer is set (else the moments restart at zero).
	LoadState(ctx context.Context, path string, withOptimizer bool) *Future[struct{}]

	// PublishSampler snapshots the current weights for sampling. A
	// snapshot never changes afterwards, so a rollout that started on it
	// keeps its weights while training goes on. An empty name becomes
	// "<model>-v<N>".
	PublishSampler(ctx context.Context, name string) *Future[TokenSampler]

	// ChatSampler lets workflows sample from a snapshot through
	// sampler.Sampler: chats rendered with the model's own chat template,
	// replies decoded with its tokenizer, exact token ids and logprobs
	// kept. The trainer swaps in each newly published snapshot.
	ChatSampler(snap TokenSampler) sampler.Sampler
	// Codec is the model's tokenizer, as training needs it.
	Codec() Codec

	// Close waits for queued calls to finish and releases the model.
	// Calls submitted after Close fail.
	Close() error
}

// Codec is the part of a model's tokenizer the trainer uses (warm-up
// targets, stop tokens). pkg/tokenizer's Hugging Face tokenizers and the
// embedded policy's byte tokenizer both fit it.
type Codec interface {
	Encode(text string, addSpecial bool) []int
	Decode(ids []int, skipSpecial bool) (string, error)
	// StopTokens end a reply; the first is the end-of-turn token a chat
	// reply ends with (<|im_end|> for ChatML models).
	StopTokens() []int
}

// ModelInfo describes the model behind a backend.
type ModelInfo struct {
	Name            string   `json:"name"`
	VocabSize       int      `json:"vocab_size"`
	MaxContext      int      `json:"max_context_length"`
	SupportedLosses []string `json:"supported_losses"`
	// Entropy is set when Forward and ForwardBackward fill
	// LossFnOutput.Entropies (the Tinker API never returns them).
	Entropy bool `json:"entropy"`
}

// Datum is one training sequence: Input[i] predicts LossFnInputs.TargetTokens[i]
// (Input = seq[:-1], targets = seq[1:]). Prompt positions carry advantage 0
// and sampling logprob 0, or mask 0.
type Datum struct {
	Input        []int        `json:"input_tokens"`
	LossFnInputs LossFnInputs `json:"loss_fn_inputs"`
}

// LossFnInputs are Tinker's loss_fn_inputs. Every per-token slice is
// either nil or as long as TargetTokens. A nil Weights or Mask means all
// ones; nil Advantages or Logprobs mean all zeros.
type LossFnInputs struct {
	TargetTokens []int `json:"target_tokens"`
	// Logprobs are the logprobs of the targets under the sampling policy.
	Logprobs   []float64 `json:"logprobs,omitempty"`
	Advantages []float64 `json:"advantages,omitempty"`
	// Weights multiply cross_entropy's per-token term; client-side losses
	// put −∂C/∂lp here.
	Weights []float64 `json:"weights,omitempty"`
	// EntropyWeights, when set, add −Σ e·H to the loss, H the entropy of
	// the next-token distribution at each position: the entropy bonus of a
	// client-side loss (∂loss/∂H = −e), which target-logprob weights
	// cannot express because its gradient flows through every logit. Only
	// backends whose ModelInfo.Entropy is set take it; not in Tinker's API.
	EntropyWeights []float64 `json:"entropy_weights,omitempty"`
	// Mask multiplies every loss's per-token term (0 leaves the token out).
	// It is not in Tinker's API; a Tinker client folds it into the
	// advantages or weights it sends.
	Mask []float64 `json:"mask,omitempty"`
}

func (in *LossFnInputs) at(xs []float64, i int, def float64) float64 {
	if xs == nil {
		return def
	}
	return xs[i]
}

// Validate checks a datum against a vocabulary size and a context length
// before any work is queued, so a bad datum fails its own call with a
// message that names it.
func (d *Datum) Validate(index, vocab, context int, loss Loss) error {
	n := len(d.Input)
	if n == 0 {
		return inputErrorf("datum %d has no input tokens", index)
	}
	if n > context {
		return inputErrorf("datum %d has %d input tokens, more than the model's context of %d", index, n, context)
	}
	in := &d.LossFnInputs
	if len(in.TargetTokens) != n {
		return inputErrorf("datum %d has %d input tokens but %d target tokens; they must match (input = seq[:-1], targets = seq[1:])", index, n, len(in.TargetTokens))
	}
	for _, f := range []struct {
		name string
		toks []int
	}{{"input", d.Input}, {"target", in.TargetTokens}} {
		for i, t := range f.toks {
			if t < 0 || t >= vocab {
				return inputErrorf("datum %d %s token %d is %d, outside the vocabulary [0, %d)", index, f.name, i, t, vocab)
			}
		}
	}
	for _, f := range []struct {
		name string
		xs   []float64
	}{{"logprobs", in.Logprobs}, {"advantages", in.Advantages}, {"weights", in.Weights}, {"entropy_weights", in.EntropyWeights}, {"mask", in.Mask}} {
		if f.xs != nil && len(f.xs) != n {
			return inputErrorf("datum %d has %d %s for %d target tokens; give one per target token", index, len(f.xs), f.name, n)
		}
	}
	needLP, needAdv := loss.Needs()
	if needLP && in.Logprobs == nil {
		return inputErrorf("datum %d lacks logprobs (the sampling logprobs), which loss %s needs", index, loss.Name)
	}
	if needAdv && in.Advantages == nil {
		return inputErrorf("datum %d lacks advantages, which loss %s needs", index, loss.Name)
	}
	return nil
}

// ForwardBackwardOutput is the result of Forward and ForwardBackward.
type ForwardBackwardOutput struct {
	// LossFnOutputs has one entry per datum, in order.
	LossFnOutputs []LossFnOutput `json:"loss_fn_outputs"`
	// Metrics holds "loss:sum" (the summed loss of the call) and
	// "tokens:sum" (the number of target tokens).
	Metrics map[string]float64 `json:"metrics"`
}

// LossFnOutput holds, per target token, the logprob the model gives the
// target (at temperature 1) and the token's loss term.
type LossFnOutput struct {
	Logprobs        []float64 `json:"logprobs"`
	ElementwiseLoss []float64 `json:"elementwise_loss"`
	// Entropies is the entropy of the next-token distribution at each
	// target position (at temperature 1), when ModelInfo.Entropy is set.
	Entropies []float64 `json:"entropies,omitempty"`
}

// AdamParams are Tinker's adam_params; the trainer owns the learning-rate
// schedule and passes the rate of each step.
type AdamParams struct {
	LearningRate float64 `json:"learning_rate"`
	Beta1        float64 `json:"beta1"`
	Beta2        float64 `json:"beta2"`
	Eps          float64 `json:"eps"`
	// WeightDecay is decoupled (AdamW): p -= lr·wd·p.
	WeightDecay float64 `json:"weight_decay"`
	// GradClipNorm clips the gradient's global L2 norm; 0 disables.
	GradClipNorm float64 `json:"grad_clip_norm"`
}

// DefaultAdamParams are Tinker's defaults with the given learning rate.
func DefaultAdamParams(lr float64) AdamParams {
	return AdamParams{LearningRate: lr, Beta1: 0.9, Beta2: 0.95, Eps: 1e-12}
}

// Validate rejects settings Adam cannot run with.
func (p AdamParams) Validate() error {
	bad := func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }
	switch {
	case bad(p.LearningRate) || p.LearningRate < 0:
		return inputErrorf("adam learning_rate %g must be a finite number ≥ 0", p.LearningRate)
	case bad(p.Beta1) || p.Beta1 < 0 || p.Beta1 >= 1:
		return inputErrorf("adam beta1 %g must be in [0, 1)", p.Beta1)
	case bad(p.Beta2) || p.Beta2 < 0 || p.Beta2 >= 1:
		return inputErrorf("adam beta2 %g must be in [0, 1)", p.Beta2)
	case bad(p.Eps) || p.Eps < 0:
		return inputErrorf("adam eps %g must be ≥ 0", p.Eps)
	case bad(p.WeightDecay) || p.WeightDecay < 0:
		return inputErrorf("adam weight_decay %g must be ≥ 0", p.WeightDecay)
	case bad(p.GradClipNorm) || p.GradClipNorm < 0:
		return inputErrorf("adam grad_clip_norm %g must be ≥ 0 (0 disables clipping)", p.GradClipNorm)
	}
	return nil
}

// OptimStepOutput reports one optimizer step: "grad_norm" (before
// clipping), "learning_rate" and "step" (the number of steps taken).
type OptimStepOutput struct {
	Metrics map[string]float64 `json:"metrics"`
}

// Snapshot is the sampler snapshot a chat sampler's new calls use: Swap
// replaces it (a newly published one), Current reads it, and a call in
// flight keeps the one it started with. Safe for concurrent use; the zero
// value holds none.
type Snapshot struct {
	mu   sync.RWMutex
	snap TokenSampler
}

// Swap makes later calls use s.
func (h *Snapshot) Swap(s TokenSampler) {
	h.mu.Lock()
	h.snap = s
	h.mu.Unlock()
}

// Current is the snapshot new calls use.
func (h *Snapshot) Current() TokenSampler {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.snap
}

// TokenSampler samples from one published snapshot of the weights.
// Implementations are safe for concurrent use.
type TokenSampler interface {
	// Name is the snapshot's name, e.g. "local-v3"; Version its number.
	Name() string
	Version() int
	Sample(ctx context.Context, req SampleRequest) (SampleResult, error)
}

// SampleRequest is Tinker's asample: one prompt, NumSamples completions.
type SampleRequest struct {
	Prompt     []int          `json:"prompt"`
	NumSamples int            `json:"num_samples"`
	Params     SamplingParams `json:"sampling_params"`
}

// SamplingParams are the sampling settings. Temperature 0 is greedy;
// TopP 0 or 1 and TopK ≤ 0 disable those filters; MaxTokens ≤ 0 means up
// to the context limit.
type SamplingParams struct {
	MaxTokens    int      `json:"max_tokens"`
	Temperature  float64  `json:"temperature"`
	TopP         float64  `json:"top_p"`
	TopK         int      `json:"top_k"`
	Stop         []string `json:"stop,omitempty"`
	StopTokenIDs []int    `json:"stop_token_ids,omitempty"`
	// Seed makes sampling deterministic: the same seed, prompt, params and
	// snapshot give the same tokens.
	Seed *int64 `json:"seed,omitempty"`
}

// Stop reasons, as Tinker names them.
const (
	StopReasonStop   = "stop"
	StopReasonLength = "length"
)

// SampleResult holds NumSamples sequences.
type SampleResult struct {
	Sequences []SampledSequence `json:"sequences"`
}

// SampledSequence is one completion. Tokens include the stop token that
// ended it (so training teaches the model to stop); Logprobs has one entry
// per token.
type SampledSequence struct {
	Tokens     []int     `json:"tokens"`
	Logprobs   []float64 `json:"logprobs"`
	StopReason string    `json:"stop_reason"`
	// MatchedStop is the stop string or the decimal stop token id that
	// ended the sequence, empty at max_tokens or the end-of-sequence token.
	MatchedStop string `json:"matched_stop,omitempty"`
}

// InputError is a mistake in what the caller sent (a datum, a prompt, a
// parameter, a file): fixing the input fixes it. It reports exit code 2.
// It is rllm's one user-error type; Err, when set, says what kind of
// mistake it is for errors.Is (sampler.ErrPromptTooLong).
type InputError = usererr.Error

func inputErrorf(format string, args ...any) error {
	return &InputError{Msg: fmt.Sprintf(format, args...)}
}
