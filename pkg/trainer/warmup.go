package trainer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/reward"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// warmup fits a freshly initialised embedded policy to the answer format
// before RL (backend.local.warmup_steps). Every training prompt, exactly
// as the agent builds it, is paired with the ground truth of a randomly
// drawn task: the model learns what an answer looks like and when to
// stop, but nothing about which answer is right, so RL still has the
// whole task to learn. Real RL starts from a pretrained model that already
// knows the format; this stands in for it.
func (t *Trainer) warmup(ctx context.Context) error {
	var answers []string
	for _, task := range t.train {
		if gt, ok := reward.GroundTruth(task); ok {
			if list, isList := gt.([]any); isList && len(list) > 0 {
				gt = list[0]
			}
			answers = append(answers, fmt.Sprint(gt))
		}
	}
	if len(answers) == 0 {
		t.logf("warm-up skipped: the training tasks have no ground truth to learn the answer format from")
		return nil
	}
	teacher := &teacherSampler{answers: answers, rng: rand.New(rand.NewPCG(uint64(t.cfg.Trainer.Seed), 0x7761726d))}
	name, args, deps := WorkflowSpec(t.cfg)
	deps.NewAgent, deps.NewEnv, deps.Sampler = t.opts.NewAgent, t.opts.NewEnv, teacher
	eng, err := rollout.NewEngine(func() (rollout.Workflow, error) { return workflow.New(name, args, deps) }, t.engineOptions(t.cfg.Rollout.N))
	if err != nil {
		return err
	}
	loader, err := dataset.NewLoader(t.train, dataset.LoaderOptions{
		BatchSize: t.cfg.Data.TrainBatchSize, Shuffle: true, Seed: uint64(t.cfg.Data.Seed) + 2,
	})
	if err != nil {
		return err
	}
	steps := t.cfg.Backend.Local.WarmupSteps
	t.logf("warm-up: %d steps fitting the answer format (shuffled ground truths) before RL", steps)
	ce := backend.Loss{Name: backend.LossCrossEntropy}
	for s := 0; s < steps; s++ {
		eps, err := eng.Run(ctx, loader.Next().Tasks)
		if err != nil {
			return err
		}
		seqs, _, err := rollout.Assemble(eps, t.assembleOptions())
		if err != nil {
			return err
		}
		var datums []backend.Datum
		for i := range seqs {
			sq := &seqs[i]
			if len(sq.ResponseIDs) == 0 {
				continue
			}
			d := datumOf(sq)
			w := make([]float64, len(d.LossFnInputs.TargetTokens))
			for j, mk := range sq.LossMask {
				w[len(sq.PromptIDs)-1+j] = float64(mk)
			}
			d.LossFnInputs.Weights = w
			datums = append(datums, d)
		}
		if len(datums) == 0 {
			return fmt.Errorf("warm-up: the workflow produced no model turns")
		}
		fb := t.be.ForwardBackward(ctx, datums, ce)
		opt := t.be.OptimStep(ctx, t.adam(t.cfg.Backend.Local.WarmupLR))
		out, err := fb.Result(ctx)
		if err != nil {
			return err
		}
		if _, err := opt.Result(ctx); err != nil {
			return err
		}
		if s == 0 || s == steps-1 || (s+1)%10 == 0 {
			t.logf("warm-up %d/%d: loss %.3f per token", s+1, steps, out.Metrics["loss:sum"]/max(out.Metrics["tokens:sum"], 1))
		}
	}
	// RL starts with a fresh optimizer, as it would from a pretrained model.
	_, err = t.be.ResetOptimizer(ctx).Result(ctx)
	return err
}

// teacherSampler answers every request with a random ground truth, as the
// embedded policy would write it: the text, then <|im_end|>.
type teacherSampler struct {
	answers []string
	mu      sync.Mutex
	rng     *rand.Rand
}

func (s *teacherSampler) Sample(_ context.Context, req sampler.Request) (sampler.Response, error) {
	tok := local.Tokenizer{}
	prompt := req.PromptIDs
	if len(req.Messages) > 0 {
		prompt = tok.ChatTemplate(req.Messages, true)
	}
	s.mu.Lock()
	text := s.answers[s.rng.IntN(len(s.answers))]
	s.mu.Unlock()
	ids := append(tok.Encode(text, false), local.TokenImEnd)
	return sampler.Response{
		Text: text, PromptIDs: prompt, CompletionIDs: ids,
		Logprobs: make([]float64, len(ids)), FinishReason: "stop",
	}, nil
}
