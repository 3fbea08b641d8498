package trainer

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/ppo"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// datumOf lays a sequence out as Tinker does: input = tokens[:-1],
// targets = tokens[1:], so target i is predicted at input position i and
// response token j is target len(prompt)-1+j.
func datumOf(s *rollout.Sequence) backend.Datum {
	tokens := make([]int, 0, len(s.PromptIDs)+len(s.ResponseIDs))
	tokens = append(append(tokens, s.PromptIDs...), s.ResponseIDs...)
	return backend.Datum{
		Input:        tokens[:len(tokens)-1],
		LossFnInputs: backend.LossFnInputs{TargetTokens: tokens[1:]},
	}
}

// datumsOf is the datums of mb's sequences (datumOf).
func datumsOf(mb []*Sample) []backend.Datum {
	datums := make([]backend.Datum, len(mb))
	for i, s := range mb {
		datums[i] = datumOf(&s.Sequence)
	}
	return datums
}

// forward runs datums through be with cross_entropy and no gradient: an
// output per datum with the logprob of every target token (and the
// entropies when the backend gives them).
func forward(ctx context.Context, be backend.TrainingBackend, datums []backend.Datum) ([]backend.LossFnOutput, error) {
	fwd, err := awaitAnswer(ctx, be, "forward", be.Forward(ctx, datums, backend.Loss{Name: backend.LossCrossEntropy}))
	if err != nil {
		return nil, err
	}
	if len(fwd.LossFnOutputs) != len(datums) {
		return nil, fmt.Errorf("the backend's forward returned %d outputs for %d sequences", len(fwd.LossFnOutputs), len(datums))
	}
	return fwd.LossFnOutputs, nil
}

// miniBatches splits the groups into mini-batches of `tasks` groups each
// (actor.ppo_mini_batch_size), keeping only the samples that train.
func miniBatches(groups []Group, tasks int) [][]*Sample {
	var out [][]*Sample
	var cur []*Sample
	n := 0
	for gi := range groups {
		if n == tasks && len(cur) > 0 {
			out, cur, n = append(out, cur), nil, 0
		}
		for si := range groups[gi].Samples {
			if s := &groups[gi].Samples[si]; s.Trains() {
				cur = append(cur, s)
			}
		}
		n++
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// lossInput gathers a mini-batch's response tokens for pkg/ppo: current
// logprobs from the backend's forward (per datum, per target), sampling
// logprobs, advantages and the loss mask.
func lossInput(mb []*Sample, fwd []backend.LossFnOutput) (ppo.LossInput, error) {
	lengths := make([]int, len(mb))
	for i, s := range mb {
		lengths[i] = len(s.ResponseIDs)
	}
	offsets, err := ppo.OffsetsFromLengths(lengths, make([]int, len(lengths)+1))
	if err != nil {
		return ppo.LossInput{}, err
	}
	total := offsets[len(offsets)-1]
	in := ppo.LossInput{
		Offsets:     offsets,
		Logprobs:    make([]float64, total),
		OldLogprobs: make([]float64, total),
		Advantages:  make([]float64, total),
		Mask:        make([]float64, total),
	}
	withEntropy, withRef := true, true
	for i, s := range mb {
		withEntropy = withEntropy && fwd[i].Entropies != nil
		withRef = withRef && s.RefLogprobs != nil
	}
	if withEntropy {
		in.Entropies = make([]float64, total)
	}
	if withRef {
		in.RefLogprobs = make([]float64, total)
	}
	for i, s := range mb {
		p := len(s.PromptIDs) - 1
		lp := fwd[i].Logprobs
		for j := range s.ResponseIDs {
			k := offsets[i] + j
			if withEntropy {
				in.Entropies[k] = fwd[i].Entropies[p+j]
			}
			if withRef {
				in.RefLogprobs[k] = s.RefLogprobs[j]
			}
			in.Logprobs[k] = lp[p+j]
			in.OldLogprobs[k] = s.Logprobs[j]
			in.Advantages[k] = s.AdvantageAt(j)
			if s.LossMask[j] != 0 && !s.Masked {
				in.Mask[k] = 1
			}
		}
	}
	return in, nil
}

// gradientWeights turns ∂loss/∂logprob into cross_entropy weights
// (−gradient at each response target, 0 on the prompt), so that
// forward_backward with cross_entropy adds exactly the loss's gradient.
func gradientWeights(mb []*Sample, datums []backend.Datum, offsets []int, grad []float64) {
	for i, s := range mb {
		p := len(s.PromptIDs) - 1
		w := make([]float64, len(datums[i].LossFnInputs.TargetTokens))
		for j := range s.ResponseIDs {
			w[p+j] = -grad[offsets[i]+j]
		}
		datums[i].LossFnInputs.Weights = w
	}
}

// updateBuiltin runs the update with the backend's own loss (Tinker's
// importance_sampling: −Σ exp(lp − sampling_lp)·A): the sampling logprobs
// and the advantages times the loss aggregation's per-token weights go in
// the datums, which equals pkg/ppo's loss with its aggregation exactly,
// and no forward pass is needed.
func updateBuiltin(ctx context.Context, be backend.TrainingBackend, p *UpdatePlan, mini [][]*Sample, adam backend.AdamParams) (UpdateStats, error) {
	var st UpdateStats
	loss := backend.Loss{Name: p.Builtin}
	for epoch := 0; epoch < p.Epochs; epoch++ {
		for _, mb := range mini {
			in, err := lossInput(mb, samplingOutputs(mb))
			if err != nil {
				return st, err
			}
			agg := make([]float64, len(in.Mask))
			if err := ppo.AggregationWeights(in.Mask, in.Offsets, p.Loss.AggMode, p.Loss.NormLength, agg); err != nil {
				return st, err
			}
			datums := datumsOf(mb)
			for i, s := range mb {
				n, q := len(datums[i].LossFnInputs.TargetTokens), len(s.PromptIDs)-1
				lp, adv := make([]float64, n), make([]float64, n)
				for j := range s.ResponseIDs {
					k := in.Offsets[i] + j
					lp[q+j], adv[q+j] = s.Logprobs[j], in.Advantages[k]*agg[k]
				}
				datums[i].LossFnInputs.Logprobs, datums[i].LossFnInputs.Advantages = lp, adv
			}
			if ctx, err = commitStep(ctx); err != nil {
				return st, err
			}
			fb := be.ForwardBackward(ctx, datums, loss)
			opt := be.OptimStep(ctx, adam)
			out, err := awaitAnswer(ctx, be, "forward_backward", fb)
			if err != nil {
				return st, err
			}
			optOut, err := opt.Result(ctx)
			if err != nil {
				return st, err
			}
			st.Updates++
			st.PGLoss += out.Metrics["loss:sum"]
			st.GradNorm += optOut.Metrics["grad_norm"]
			if e, err := aggregatedEntropy(mb, out.LossFnOutputs, &in, &p.Loss); err == nil && e >= 0 {
				st.Entropy += e
				st.HasEntropy = true
			}
			if epoch == 0 {
				st.TrainedSamples += len(mb)
				for _, m := range in.Mask {
					st.TrainedTokens += int(m)
				}
			}
		}
	}
	if st.Updates > 0 {
		u := float64(st.Updates)
		st.PGLoss, st.GradNorm, st.Entropy = st.PGLoss/u, st.GradNorm/u, st.Entropy/u
	}
	return st, nil
}

// samplingOutputs stands in for a forward pass of the policy that
// sampled: the sampling logprobs at the response targets.
func samplingOutputs(mb []*Sample) []backend.LossFnOutput {
	outs := make([]backend.LossFnOutput, len(mb))
	for i, s := range mb {
		p := len(s.PromptIDs) - 1
		lp := make([]float64, p+len(s.ResponseIDs))
		copy(lp[p:], s.Logprobs)
		outs[i].Logprobs = lp
	}
	return outs
}

// aggregatedEntropy is the loss-aggregated entropy of the response tokens
// from forward_backward's outputs (-1 when the backend gives none).
func aggregatedEntropy(mb []*Sample, outs []backend.LossFnOutput, in *ppo.LossInput, cfg *ppo.LossConfig) (float64, error) {
	ent := make([]float64, len(in.Mask))
	for i, s := range mb {
		if outs[i].Entropies == nil {
			return -1, nil
		}
		p := len(s.PromptIDs) - 1
		copy(ent[in.Offsets[i]:], outs[i].Entropies[p:p+len(s.ResponseIDs)])
	}
	return ppo.Aggregate(ent, in.Mask, in.Offsets, cfg.AggMode, cfg.NormLength)
}

// entropyWeights sets each datum's entropy weights to the entropy
// bonus's per-token coefficient, EntropyCoeff × the aggregation weight
// the loss gives the token, so the backend adds −EntropyCoeff·agg(H)
// exactly as verl's actor does.
func entropyWeights(mb []*Sample, datums []backend.Datum, in *ppo.LossInput, cfg *ppo.LossConfig) error {
	agg := make([]float64, len(in.Mask))
	if err := ppo.AggregationWeights(in.Mask, in.Offsets, cfg.AggMode, cfg.NormLength, agg); err != nil {
		return err
	}
	for i, s := range mb {
		p := len(s.PromptIDs) - 1
		e := make([]float64, len(datums[i].LossFnInputs.TargetTokens))
		for j := range s.ResponseIDs {
			e[p+j] = cfg.EntropyCoeff * agg[in.Offsets[i]+j]
		}
		datums[i].LossFnInputs.EntropyWeights = e
	}
	return nil
}

// commitStep is called before a step's optimizer call is queued. Once
// optim_step is sent the server applies it even after Ctrl-C, so from the
// first one on the step must finish (every mini-batch of it) and be
// checkpointed as the next step, never rewound: a checkpoint labelled t
// holding part of step t+1 would train t+1 twice on resume. It refuses a
// step whose context is already cancelled, before anything changed the
// weights, and otherwise returns a context that outlives ctx's
// cancellation by commitGrace (the backend's request deadlines bound
// every call; commitGrace bounds the whole, for a service that accepts
// and never answers). It marks the step's optimSent flag, if any.
func commitStep(ctx context.Context) (context.Context, error) {
	if isCommitted(ctx) {
		return ctx, nil
	}
	if err := ctx.Err(); err != nil {
		return ctx, err
	}
	if sent, ok := ctx.Value(optimSentKey{}).(*atomic.Bool); ok {
		sent.Store(true)
	}
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	grace := commitGrace // read now: the callback may run after a test restored it
	context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return context.WithValue(c, committedKey{}, &commitment{caller: ctx, abandon: cancel}), nil
}

// commitment is what a committed step's context carries: the caller's
// context, and the cancel that ends the step's calls when the step is
// abandoned.
type commitment struct {
	caller  context.Context
	abandon context.CancelFunc
}

// InProcessTrainer is implemented by a backend whose training calls run
// in this process and always answer (the embedded policy): Ctrl-C waits
// for them, so the step in flight is kept and checkpointed. A backend
// that does not implement it is a service, whose calls may be accepted
// and never answered.
type InProcessTrainer interface {
	TrainsInProcess() bool
}

// answerCtx is the context to wait in for the answer of a forward or
// forward_backward of a committed step. Nothing of a step is applied
// before its optimizer call runs, and the service runs that only after
// the calls queued before it, so on a service an unanswered forward or
// forward_backward is abandoned at Ctrl-C at once, with ctx's caller's
// context: the step is then unfinished (its weights are not saved, as
// when commitGrace runs out). Only optimizer calls wait for commitGrace.
func answerCtx(ctx context.Context, be backend.TrainingBackend) (context.Context, *commitment) {
	if ip, ok := be.(InProcessTrainer); ok && ip.TrainsInProcess() {
		return ctx, nil
	}
	if c, ok := ctx.Value(committedKey{}).(*commitment); ok {
		return c.caller, c
	}
	return ctx, nil
}

// awaitAnswer waits for a forward or forward_backward's answer in
// answerCtx. When Ctrl-C abandons it, the step's calls end too (those not
// yet sent are not sent: an optimizer call is never sent without the
// forward_backward before it, which is sent first), and the error names
// the call.
func awaitAnswer[T any](ctx context.Context, be backend.TrainingBackend, call string, f *backend.Future[T]) (T, error) {
	actx, c := answerCtx(ctx, be)
	v, err := f.Result(actx)
	if err != nil && c != nil && actx.Err() != nil && ctx.Err() == nil {
		c.abandon()
		err = fmt.Errorf("the service had not answered %s when the run was interrupted, so the step was abandoned: %w", call, err)
	}
	return v, err
}

// commitGrace is how long a step whose optimizer call was sent may go on
// after Ctrl-C.
var commitGrace = 5 * time.Minute

type committedKey struct{}

// optimSentKey holds the *atomic.Bool a step's commitStep sets.
type optimSentKey struct{}

// unfinishedStepError is a step that had sent its optimizer call and then
// failed: the weights on the service hold part of it, so they are no
// checkpoint.
type unfinishedStepError struct {
	step int
	err  error
}

func (e *unfinishedStepError) Error() string { return e.err.Error() }
func (e *unfinishedStepError) Unwrap() error { return e.err }

func isCommitted(ctx context.Context) bool { return ctx.Value(committedKey{}) != nil }

// UpdateStats are the averages over a step's optimizer steps.
type UpdateStats struct {
	Updates                           int
	PGLoss, ClipFrac, PPOKL, GradNorm float64
	Entropy, KLLoss                   float64
	HasEntropy, HasKL                 bool
	// Corr holds verl's rollout_corr/ metrics: the step's (decoupled
	// mode) or the mean over its optimizer steps (bypass mode).
	Corr                          map[string]float64
	TrainedTokens, TrainedSamples int
}

// update runs plan.Epochs passes over the mini-batches, one optimizer
// step per mini-batch, with the loss computed client side: a forward for
// the current logprobs, the loss and its gradient in pkg/ppo, then
// forward_backward with cross_entropy and weights = −gradient, with the
// optimizer step queued behind it before waiting (as the cookbook does).
func update(ctx context.Context, be backend.TrainingBackend, p *UpdatePlan, mini [][]*Sample, adam backend.AdamParams) (UpdateStats, error) {
	var st UpdateStats
	if p.Builtin != "" {
		return updateBuiltin(ctx, be, p, mini, adam)
	}
	prox, err := proximalLogprobs(ctx, be, p, mini)
	if err != nil {
		return st, err
	}
	var corr []correction
	if prox != nil {
		if corr, st.Corr, err = decoupledCorrection(mini, prox, p.Correction); err != nil {
			return st, err
		}
	}
	bypassMetrics := 0
	for epoch := 0; epoch < p.Epochs; epoch++ {
		for k, mb := range mini {
			datums := datumsOf(mb)
			if prox != nil && epoch == 0 && k == 0 {
				// π_old is the policy as the update starts: its forward pass
				// is also the first mini-batch's current one.
				outs := prox[0]
				if ctx, err = commitStep(ctx); err != nil {
					return st, err
				}
				if err := step(ctx, be, p, mb, datums, outs, false, adam, &st, epoch, prox[k], &corr[k], &bypassMetrics); err != nil {
					return st, err
				}
				continue
			}
			// Before the first optimizer step the policy is the one that
			// sampled: with OnPolicyFirst its logprobs are the sampling ones
			// and the forward pass is skipped (ratio 1, as the cookbook's
			// importance-sampling loss assumes); the entropies then come from
			// forward_backward, which runs on the same weights.
			skipForward := p.OnPolicyFirst && prox == nil && epoch == 0 && k == 0 && p.Loss.EntropyCoeff == 0
			var outs []backend.LossFnOutput
			if skipForward {
				outs = samplingOutputs(mb)
			} else if outs, err = forward(ctx, be, datums); err != nil {
				return st, err
			}
			var px []backend.LossFnOutput
			var cr *correction
			if prox != nil {
				px, cr = prox[k], &corr[k]
			}
			if ctx, err = commitStep(ctx); err != nil {
				return st, err
			}
			if err := step(ctx, be, p, mb, datums, outs, skipForward, adam, &st, epoch, px, cr, &bypassMetrics); err != nil {
				return st, err
			}
		}
	}
	if st.Updates > 0 {
		u := float64(st.Updates)
		st.PGLoss, st.ClipFrac, st.PPOKL, st.GradNorm = st.PGLoss/u, st.ClipFrac/u, st.PPOKL/u, st.GradNorm/u
		st.Entropy, st.KLLoss = st.Entropy/u, st.KLLoss/u
	}
	if bypassMetrics > 0 {
		for k := range st.Corr {
			st.Corr[k] /= float64(bypassMetrics)
		}
	}
	return st, nil
}

// step is one optimizer step on one mini-batch: the loss and its gradient
// in pkg/ppo from the current logprobs outs (with decoupled PPO's
// correction against prox, the π_old outputs, and cr, its weights and
// mask, when given; else bypass mode's correction of π_θ against the
// sampler, counted in bypassMetrics), then forward_backward with
// cross_entropy and the optimizer step queued behind it. skipForward says
// outs are the sampling logprobs standing in for a forward pass.
func step(ctx context.Context, be backend.TrainingBackend, p *UpdatePlan, mb []*Sample, datums []backend.Datum, outs []backend.LossFnOutput, skipForward bool, adam backend.AdamParams, st *UpdateStats, epoch int, prox []backend.LossFnOutput, cr *correction, bypassMetrics *int) error {
	ce := backend.Loss{Name: backend.LossCrossEntropy}
	in, err := lossInput(mb, outs)
	if err != nil {
		return err
	}
	if prox != nil {
		if err := correctDecoupled(&in, mb, prox, cr, p.Correction); err != nil {
			return err
		}
	} else if c := p.Correction; c.Active() || c.Metrics {
		m, err := correctBypass(&in, c)
		if err != nil {
			return err
		}
		if m != nil {
			if st.Corr == nil {
				st.Corr = map[string]float64{}
			}
			for k, v := range m {
				st.Corr[k] += v
			}
			*bypassMetrics++
		}
	}
	grad := make([]float64, len(in.Logprobs))
	res, err := ppo.PolicyLoss(&in, &p.Loss, grad)
	if err != nil {
		return err
	}
	gradientWeights(mb, datums, in.Offsets, grad)
	if p.Loss.EntropyCoeff != 0 {
		if err := entropyWeights(mb, datums, &in, &p.Loss); err != nil {
			return err
		}
	}
	fb := be.ForwardBackward(ctx, datums, ce)
	opt := be.OptimStep(ctx, adam)
	fbOut, err := awaitAnswer(ctx, be, "forward_backward", fb)
	if err != nil {
		return err
	}
	hasEntropy := in.Entropies != nil
	if skipForward {
		if res.Metrics.Entropy, err = aggregatedEntropy(mb, fbOut.LossFnOutputs, &in, &p.Loss); err != nil {
			return err
		}
		hasEntropy = res.Metrics.Entropy >= 0
	}
	out, err := opt.Result(ctx)
	if err != nil {
		return err
	}
	st.Updates++
	st.PGLoss += res.Metrics.PGLoss
	st.ClipFrac += res.Metrics.ClipFrac
	st.PPOKL += res.Metrics.PPOKL
	st.GradNorm += out.Metrics["grad_norm"]
	st.Entropy += res.Metrics.Entropy
	st.KLLoss += res.Metrics.KLLoss
	st.HasEntropy, st.HasKL = hasEntropy, p.Loss.KLCoef != 0
	if epoch == 0 {
		st.TrainedSamples += len(mb)
		for _, m := range in.Mask {
			st.TrainedTokens += int(m)
		}
	}
	return nil
}

// proximalLogprobs is decoupled PPO's π_old: a forward pass of every
// mini-batch on the weights as the update starts (verl computes
// old_log_prob once per batch before its updates). Nil in bypass mode.
func proximalLogprobs(ctx context.Context, be backend.TrainingBackend, p *UpdatePlan, mini [][]*Sample) ([][]backend.LossFnOutput, error) {
	if !p.Correction.Decoupled {
		return nil, nil
	}
	prox := make([][]backend.LossFnOutput, len(mini))
	for k, mb := range mini {
		outs, err := forward(ctx, be, datumsOf(mb))
		if err != nil {
			return nil, fmt.Errorf("the proximal policy's logprobs (algorithm.rollout_correction.bypass_mode=false): %w", err)
		}
		prox[k] = outs
	}
	return prox, nil
}

// correction is one mini-batch's part of decoupled PPO's correction,
// laid out as its lossInput: the weights multiplying each token's
// advantage (nil without rollout_is) and the mask rejection sampling
// leaves (nil without rollout_rs).
type correction struct {
	weights, keep []float64
}

// decoupledCorrection is verl's compute_rollout_correction_and_add_to_batch
// in decoupled mode: once per step, over the whole batch (so that
// rollout_is_batch_normalize normalises over it), from π_old (prox)
// against the sampler's logprobs. It returns each mini-batch's weights
// and mask and verl's rollout_corr/ metrics.
func decoupledCorrection(mini [][]*Sample, prox [][]backend.LossFnOutput, c CorrectionPlan) ([]correction, map[string]float64, error) {
	var train, rollout, mask []float64
	offsets := []int{0}
	spans := make([][2]int, len(mini)) // each mini-batch's tokens
	for k, mb := range mini {
		if err := proximalFits(mb, prox[k]); err != nil {
			return nil, nil, err
		}
		in, err := lossInput(mb, prox[k])
		if err != nil {
			return nil, nil, err
		}
		spans[k][0] = len(train)
		train, rollout, mask = append(train, in.Logprobs...), append(rollout, in.OldLogprobs...), append(mask, in.Mask...)
		for _, o := range in.Offsets[1:] {
			offsets = append(offsets, spans[k][0]+o)
		}
		spans[k][1] = len(train)
	}
	w, keep := make([]float64, len(train)), make([]float64, len(train))
	cfg := c.ppo()
	m, err := ppo.RolloutCorrection(train, rollout, mask, offsets, &cfg, w, keep)
	if err != nil {
		return nil, nil, err
	}
	out := make([]correction, len(mini))
	for k, sp := range spans {
		if c.IS != ppo.RolloutISNone {
			out[k].weights = w[sp[0]:sp[1]]
		}
		if len(c.RS) > 0 {
			out[k].keep = keep[sp[0]:sp[1]]
		}
	}
	return out, m, nil
}

// proximalFits checks that the proximal forward gave a logprob for every
// target of every sequence.
func proximalFits(mb []*Sample, prox []backend.LossFnOutput) error {
	if len(prox) != len(mb) {
		return fmt.Errorf("the proximal forward returned %d outputs for %d sequences", len(prox), len(mb))
	}
	for i, s := range mb {
		if p := len(s.PromptIDs) - 1; len(prox[i].Logprobs) < p+len(s.ResponseIDs) {
			return fmt.Errorf("the proximal forward returned %d logprobs for a sequence of %d targets", len(prox[i].Logprobs), p+len(s.ResponseIDs))
		}
	}
	return nil
}

// correctDecoupled makes in decoupled PPO's: π_old (prox) becomes the
// policy the ratio is taken against; with rollout_is each token's
// advantage is multiplied by its weight (the losses are positively
// homogeneous in the advantage and the weights positive, so this is
// verl's pg_losses × rollout_is_weights), and with rollout_rs the mask is
// the one rejection sampling left, for every term of the loss (verl
// replaces the batch's response_mask).
func correctDecoupled(in *ppo.LossInput, mb []*Sample, prox []backend.LossFnOutput, cr *correction, c CorrectionPlan) error {
	if err := proximalFits(mb, prox); err != nil {
		return err
	}
	for i, s := range mb {
		p := len(s.PromptIDs) - 1
		copy(in.OldLogprobs[in.Offsets[i]:in.Offsets[i+1]], prox[i].Logprobs[p:p+len(s.ResponseIDs)])
	}
	if cr == nil {
		return nil
	}
	if cr.weights != nil {
		for t := range in.Advantages {
			in.Advantages[t] *= cr.weights[t]
		}
	}
	if cr.keep != nil {
		copy(in.Mask, cr.keep)
	}
	return nil
}

// correctBypass is verl's compute_policy_loss_bypass_mode before its loss:
// the weights and rejection mask of π_θ (this step's logprobs) against
// π_rollout (the sampler's, PPO's old policy here), computed again at
// every optimizer step. The weights (loss_type reinforce only) multiply
// the advantages; the rejection mask masks the policy-gradient term alone
// (verl's actor keeps the response mask for its KL and entropy terms).
func correctBypass(in *ppo.LossInput, c CorrectionPlan) (map[string]float64, error) {
	n := len(in.Logprobs)
	w, keep := make([]float64, n), make([]float64, n)
	cfg := c.ppo()
	m, err := ppo.RolloutCorrection(in.Logprobs, in.OldLogprobs, in.Mask, in.Offsets, &cfg, w, keep)
	if err != nil {
		return nil, err
	}
	if c.IS != ppo.RolloutISNone {
		for t := range in.Advantages {
			in.Advantages[t] *= w[t]
		}
	}
	if len(c.RS) > 0 {
		in.PGMask = keep
	}
	return m, nil
}
