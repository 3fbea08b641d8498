package trainer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/reward"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/tasks"
)

// warmup fits a freshly initialised embedded policy to the answer format
// before RL (backend.local.warmup_steps). Every training prompt, exactly as
// the agent builds it, is paired with a reply in the task's format that is
// not its answer: the built-in tasks' format examples (arith: an operand of
// the question or a number of its size; countdown: the given numbers in a
// random equation; frozenlake: a random move), else the ground truth of a
// randomly drawn task. The model learns what an answer looks like, when to
// stop and, with format examples, where the prompt's numbers are, but
// nothing about which answer is right, so RL still has the whole task to
// learn. Real RL starts from a pretrained model that already knows the
// format; this stands in for it. The prompts come from the same rollout
// runner as training (with a teacher in place of the policy), one reply per
// task, and the fit is the one SFT loop.
func (t *Trainer) warmup(ctx context.Context) error {
	teacher := &teacher{format: t.plan.Warmup.Format, codec: t.be.Codec(), context: t.be.Info().MaxContext,
		rng: rand.New(rand.NewPCG(uint64(t.plan.Seed), 0x7761726d))}
	if teacher.format == nil {
		for _, task := range t.train {
			if gt, ok := reward.GroundTruth(task); ok {
				if list, isList := gt.([]any); isList && len(list) > 0 {
					gt = list[0]
				}
				teacher.answers = append(teacher.answers, fmt.Sprint(gt))
			}
		}
		if len(teacher.answers) == 0 {
			t.logf("warm-up skipped: the training tasks have no ground truth to learn the answer format from")
			return nil
		}
	}
	steps := t.plan.Warmup.Steps
	what := "shuffled ground truths"
	if teacher.format != nil {
		what = "replies in the task's format, not its answers"
	}
	t.logf("warm-up: %d steps fitting the answer format (%s) before RL", steps, what)
	eng, err := rollout.NewRunner(t.plan.Workflow, t.be.ChatSampler(teacher), t.plan.Train.Params, 1, t.runnerFor(phaseWarmup), nil)
	if err != nil {
		return err
	}
	loader, err := dataset.NewLoader(t.train, dataset.LoaderOptions{BatchSize: min(t.plan.BatchSize, len(t.train)), Shuffle: true, DropLast: true, Seed: t.plan.DataSeed + 2})
	if err != nil {
		return err
	}
	var data []backend.Datum
	perStep := 0
	for s := 0; s < steps; s++ {
		eps, err := eng.Run(ctx, loader.Next().Tasks)
		if err != nil {
			return err
		}
		if err := allFailed(eps); err != nil {
			return fmt.Errorf("warm-up step %d: %w", s+1, err)
		}
		seqs, _, err := rollout.Assemble(eps, t.plan.Assemble)
		if err != nil {
			return err
		}
		n := 0
		for i := range seqs {
			if d, ok := weightedDatum(&seqs[i]); ok {
				data = append(data, d)
				n++
			}
		}
		perStep = max(perStep, n)
	}
	if len(data) == 0 {
		return fmt.Errorf("warm-up: the workflow produced no model turns")
	}
	adam := t.plan.Update.Adam
	adam.LearningRate = t.plan.Warmup.LR
	_, err = SFT(ctx, t.be, data, SFTOptions{Epochs: 1, BatchSize: perStep, Adam: adam,
		OnStep: func(step, steps, _ int, loss float64) {
			if step == 1 || step == steps || step%10 == 0 {
				t.logf("warm-up %d/%d: loss %.3f per token", step, steps, loss)
			}
		}})
	if err != nil {
		return err
	}
	// RL starts with a fresh optimizer, as it would from a pretrained model.
	if r, ok := t.be.(interface {
		ResetOptimizer(context.Context) *backend.Future[struct{}]
	}); ok {
		_, err = r.ResetOptimizer(ctx).Result(ctx)
	}
	return err
}

// weightedDatum is a cross_entropy datum with weight 1 on the sequence's
// model tokens; ok is false when it has none.
func weightedDatum(s *rollout.Sequence) (backend.Datum, bool) {
	if len(s.ResponseIDs) == 0 {
		return backend.Datum{}, false
	}
	d := datumOf(s)
	w := make([]float64, len(d.LossFnInputs.TargetTokens))
	for j, mk := range s.LossMask {
		w[len(s.PromptIDs)-1+j] = float64(mk)
	}
	d.LossFnInputs.Weights = w
	return d, true
}

// teacher is a token sampler that answers every prompt with a format
// example for it, or else a random ground truth, as the model would write
// it: the text, then the end-of-turn token. Like the model it stands in
// for, it refuses a prompt that fills the context and cuts a reply at the
// context's end, so a multi-turn episode ends where the model's would
// (max_prompt_length_exceeded) instead of growing past it.
type teacher struct {
	format  tasks.FormatExample
	answers []string
	codec   backend.Codec
	context int // prompt + reply tokens; 0: no limit
	mu      sync.Mutex
	rng     *rand.Rand // for requests without a seed
}

func (s *teacher) Name() string { return "warm-up teacher" }
func (s *teacher) Version() int { return 0 }

func (s *teacher) Sample(_ context.Context, req backend.SampleRequest) (backend.SampleResult, error) {
	res := backend.SampleResult{}
	if s.context > 0 && len(req.Prompt) >= s.context {
		return res, &backend.InputError{Err: sampler.ErrPromptTooLong,
			Msg: fmt.Sprintf("the prompt has %d tokens but the model's context is %d (prompt + reply)", len(req.Prompt), s.context)}
	}
	rng := s.rng
	if req.Params.Seed != nil {
		// A seeded request picks the same answer whatever the order in
		// which concurrent episodes ask, so the warm-up is reproducible.
		rng = rand.New(rand.NewPCG(uint64(*req.Params.Seed), 0x7465616368))
	}
	var prompt string
	if s.format != nil {
		var err error
		if prompt, err = s.codec.Decode(req.Prompt, false); err != nil {
			return res, err
		}
	}
	for range max(req.NumSamples, 1) {
		s.mu.Lock()
		var text string
		if s.format != nil {
			text = s.format(prompt, rng)
		} else {
			text = s.answers[rng.IntN(len(s.answers))]
		}
		s.mu.Unlock()
		ids := replyTokens(s.codec, text)
		stop := backend.StopReasonStop
		if room := s.context - len(req.Prompt); s.context > 0 && len(ids) > room {
			ids, stop = ids[:room], backend.StopReasonLength
		}
		res.Sequences = append(res.Sequences, backend.SampledSequence{Tokens: ids, Logprobs: make([]float64, len(ids)), StopReason: stop})
	}
	return res, nil
}
