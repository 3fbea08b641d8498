package trainer

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/ppo"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// trainSeq is one training sequence with what the filters and the
// estimators decided about it.
type trainSeq struct {
	rollout.Sequence
	group string  // advantage group: the task, or the task and step position
	adv   float64 // outcome advantage
	// tokenAdv holds per-response-token advantages from a token-level
	// estimator; nil for outcome estimators.
	tokenAdv []float64
	// masked sequences stay in their group for advantages but get a zero
	// loss mask (compact filtering, rLLM's masks).
	masked bool
}

func (t *Trainer) engineOptions(n int) rollout.EngineOptions {
	o := rollout.EngineOptions{
		N:          n,
		NParallel:  t.cfg.Workflow.NParallelTasks,
		RetryLimit: max(t.cfg.Workflow.RetryLimit, 1),
		TaskID: func(i int, task episode.Task) string {
			if id, ok := dataset.TaskID(task); ok {
				return id
			}
			return rollout.DefaultTaskID(i, task)
		},
	}
	if s := t.cfg.Agent.TrajectoryTimeout; s != nil {
		o.EpisodeTimeout = time.Duration(*s * float64(time.Second))
	}
	return o
}

func (t *Trainer) assembleOptions() rollout.AssembleOptions {
	return rollout.AssembleOptions{
		MaxPromptLength:      t.cfg.Data.MaxPromptLength,
		MaxResponseLength:    t.cfg.Data.MaxResponseLength,
		PerStep:              t.cfg.Algorithm.StepwiseAdvantage.Enable,
		FilterTokenMismatch:  t.cfg.Filters.FilterTokenMismatch,
		OverlongFilter:       t.cfg.Agent.OverlongFilter,
		MaskTruncatedSamples: t.cfg.Filters.MaskTruncatedSamples,
	}
}

// trainStep runs one training step and returns its metrics.
func (t *Trainer) trainStep(ctx context.Context) (map[string]float64, error) {
	start := t.now()
	m := map[string]float64{}
	batch := t.loader.Next()
	eng, err := rollout.NewEngine(t.newWorkflow(TrainParams(t.cfg)), t.engineOptions(t.cfg.Rollout.N))
	if err != nil {
		return nil, err
	}
	eps, err := eng.Run(ctx, batch.Tasks)
	if err != nil {
		return nil, err
	}
	genEnd := t.now()
	episodeMetrics(eps, m)
	em := eng.Metrics()
	m["rollout/retries"] = float64(em.Retries)

	seqs, ast, err := rollout.Assemble(eps, t.assembleOptions())
	if err != nil {
		return nil, err
	}
	m["batch/token_mismatch"] = float64(ast.TokenMismatches)
	m["batch/truncated_dropped"] = float64(ast.TruncatedDropped)
	batchSeqs, skip, err := t.advantages(eps, seqs, m)
	if err != nil {
		return nil, err
	}
	advEnd := t.now()
	if skip || len(batchSeqs) == 0 {
		m["batch/skipped"] = 1
	} else if err := t.update(ctx, batchSeqs, m); err != nil {
		return nil, err
	}
	updEnd := t.now()
	if err := t.publish(ctx); err != nil {
		return nil, err
	}
	m["training/global_step"] = float64(t.step + 1)
	m["training/epoch"] = float64(batch.Epoch)
	m["actor/lr"] = t.lr(t.step)
	m["timing_s/gen"] = genEnd.Sub(start).Seconds()
	m["timing_s/adv"] = advEnd.Sub(genEnd).Seconds()
	m["timing_s/update_actor"] = updEnd.Sub(advEnd).Seconds()
	m["timing_s/step"] = t.now().Sub(start).Seconds()
	return m, nil
}

// episodeMetrics are rLLM's per-batch episode numbers: scores, solve
// rates, termination reasons and lengths.
func episodeMetrics(eps []*episode.Episode, m map[string]float64) {
	var scores []float64
	correct := 0
	for _, ep := range eps {
		r := 0.0
		for _, tr := range ep.Trajectories {
			r += tr.Reward
		}
		if len(ep.Trajectories) > 0 {
			r /= float64(len(ep.Trajectories))
		}
		scores = append(scores, r)
		if ep.IsCorrect {
			correct++
		}
		m["batch/termination_reason/"+string(ep.TerminationReason)]++
	}
	if len(scores) == 0 {
		return
	}
	m["critic/score/mean"] = mean(scores)
	m["critic/score/max"] = slices.Max(scores)
	m["critic/score/min"] = slices.Min(scores)
	m["batch/accuracy"] = float64(correct) / float64(len(eps))
	for _, r := range episode.TerminationReasons {
		if n, ok := m["batch/termination_reason/"+string(r)]; ok {
			m["batch/termination_reason/"+string(r)] = n / float64(len(eps))
		}
	}
}

// advantages applies the filters and the estimators. It returns the
// sequences to train on, or skip when rejection sampling left too few
// partially solved tasks for a meaningful update.
func (t *Trainer) advantages(eps []*episode.Episode, seqs []rollout.Sequence, m map[string]float64) ([]trainSeq, bool, error) {
	byID := make(map[string]*episode.Episode, len(eps))
	for _, ep := range eps {
		byID[ep.ID] = ep
	}
	perStep := t.cfg.Algorithm.StepwiseAdvantage.Enable && t.cfg.Algorithm.StepwiseAdvantage.Mode == "per_step"
	all := make([]trainSeq, 0, len(seqs))
	for _, s := range seqs {
		if len(s.ResponseIDs) == 0 {
			continue
		}
		ts := trainSeq{Sequence: s, group: groupOf(s.EpisodeID)}
		if perStep {
			ts.group = fmt.Sprintf("%s\x00%d", ts.group, s.Step)
		}
		all = append(all, ts)
	}
	n := len(all)
	ids := make([]string, n)
	correct := make([]bool, n)
	rewards := make([]float64, n)
	reasons := make([]string, n)
	for i, s := range all {
		ids[i], rewards[i] = s.group, s.Reward
		if ep := byID[s.EpisodeID]; ep != nil {
			correct[i] = ep.IsCorrect
			reasons[i] = string(ep.TerminationReason)
		}
		if s.Termination != "" {
			reasons[i] = string(s.Termination)
		}
	}
	groups := make([]int, n)
	numGroups, err := ppo.GroupIndex(ids, groups)
	if err != nil {
		return nil, false, err
	}

	keep := make([]bool, n)
	for i := range keep {
		keep[i] = true
	}
	solveKeep := slices.Clone(keep)
	stats, err := ppo.RejectionSample(groups, numGroups, correct, &t.ws, solveKeep)
	if err != nil {
		return nil, false, err
	}
	none, solved, partial := stats.Fractions()
	m["batch/solve_none"], m["batch/solve_all"], m["batch/solve_partial"] = none, solved, partial
	rs := t.cfg.Filters.RejectionSample
	if rs.Enable {
		keep = solveKeep
		if stats.SolvePartial < rs.MinPartialSolveTasks {
			return nil, true, nil
		}
	}
	if rs.FilterUniformGroups {
		dropped, err := ppo.DropUniformRewardGroups(groups, numGroups, rewards, 1e-9, &t.ws, keep)
		if err != nil {
			return nil, false, err
		}
		m["batch/uniform_groups_dropped"] = float64(dropped)
	}
	live := make([]bool, n)
	for i := range live {
		live[i] = true
	}
	cf := t.cfg.Filters.CompactFiltering
	masked, err := ppo.CompactFilter{
		Enable:                        cf.Enable,
		MaskMaxPromptLengthExceeded:   cf.MaskMaxPromptLengthExceeded,
		MaskMaxResponseLengthExceeded: cf.MaskMaxResponseLengthExceeded,
		MaskEnvDone:                   cf.MaskEnvDone,
		MaskMaxTurnsExceeded:          cf.MaskMaxTurnsExceeded,
		MaskTimeout:                   cf.MaskTimeout,
		MaskUnknown:                   cf.MaskUnknown,
		MaskError:                     cf.MaskError,
	}.Apply(reasons, live)
	if err != nil {
		return nil, false, err
	}
	m["batch/compact_masked"] = float64(masked)

	var kept []trainSeq
	for i, s := range all {
		if keep[i] {
			s.masked = !live[i] || s.Masked
			kept = append(kept, s)
		}
	}
	if err := t.estimate(kept, byID); err != nil {
		return nil, false, err
	}
	advantageMetrics(kept, m)
	return kept, false, nil
}

// estimate fills in advantages, partitioning sequences by the estimator
// their trajectory name selects (algorithm.adv_estimator_by_role).
func (t *Trainer) estimate(seqs []trainSeq, byID map[string]*episode.Episode) error {
	parts := map[string][]int{}
	for i, s := range seqs {
		name := t.cfg.Algorithm.AdvEstimator
		if r, ok := t.cfg.Algorithm.AdvEstimatorByRole[s.TrajectoryName]; ok {
			name = r
		}
		parts[name] = append(parts[name], i)
	}
	for name, idx := range parts {
		est, err := ppo.Lookup(name)
		if err != nil {
			return err
		}
		if est.Level == ppo.Token {
			err = t.estimateTokens(est, seqs, idx)
		} else {
			err = t.estimateOutcome(est, seqs, idx, byID)
		}
		if err != nil {
			return fmt.Errorf("advantages (%s): %w", name, err)
		}
	}
	return nil
}

// estimateOutcome computes one advantage per sequence, or, with stepwise
// broadcast, one per trajectory given to each of its steps.
func (t *Trainer) estimateOutcome(est ppo.Estimator, seqs []trainSeq, idx []int, byID map[string]*episode.Episode) error {
	sw := t.cfg.Algorithm.StepwiseAdvantage
	broadcast := sw.Enable && sw.Mode == "broadcast"
	// units are what the estimator scores: sequences, or trajectories.
	type unit struct {
		group   string
		reward  float64
		length  float64
		members []int
	}
	var units []unit
	byTraj := map[string]int{}
	for _, i := range idx {
		s := &seqs[i]
		if broadcast {
			key := s.EpisodeID + "\x00" + s.TrajectoryID
			if u, ok := byTraj[key]; ok {
				units[u].members = append(units[u].members, i)
				units[u].length += float64(len(s.ResponseIDs))
				continue
			}
			byTraj[key] = len(units)
			units = append(units, unit{group: s.group, reward: trajectoryReward(byID[s.EpisodeID], s.TrajectoryID, s.Reward),
				length: float64(len(s.ResponseIDs)), members: []int{i}})
			continue
		}
		units = append(units, unit{group: s.group, reward: s.Reward, length: float64(len(s.ResponseIDs)), members: []int{i}})
	}
	ids := make([]string, len(units))
	in := ppo.Input{Rewards: make([]float64, len(units)), Groups: make([]int, len(units)), Lengths: make([]float64, len(units))}
	for u := range units {
		ids[u], in.Rewards[u], in.Lengths[u] = units[u].group, units[u].reward, units[u].length
	}
	var err error
	if in.NumGroups, err = ppo.GroupIndex(ids, in.Groups); err != nil {
		return err
	}
	out := ppo.Output{Sequence: make([]float64, len(units))}
	if err := est.Compute(&in, &t.estCfg, &t.ws, &out); err != nil {
		return err
	}
	for u, un := range units {
		a := out.Sequence[u]
		if broadcast && sw.NormalizeBySteps {
			a /= float64(len(un.members))
		}
		for _, i := range un.members {
			seqs[i].adv = a
		}
	}
	return nil
}

// trajectoryReward is the trajectory's reward from its episode, falling
// back to the sequence's own.
func trajectoryReward(ep *episode.Episode, trajID string, fallback float64) float64 {
	if ep == nil {
		return fallback
	}
	for _, tr := range ep.Trajectories {
		if tr.ID == trajID {
			return tr.Reward
		}
	}
	return fallback
}

// estimateTokens runs a token-level estimator (reinforce_plus_plus, gae):
// the sequence reward sits on its last trainable response token.
func (t *Trainer) estimateTokens(est ppo.Estimator, seqs []trainSeq, idx []int) error {
	lengths := make([]int, len(idx))
	total := 0
	for k, i := range idx {
		lengths[k] = len(seqs[i].ResponseIDs)
		total += lengths[k]
	}
	in := ppo.Input{Tokens: ppo.TokenInput{Rewards: make([]float64, total), Mask: make([]float64, total)}}
	var err error
	if in.Tokens.Offsets, err = ppo.OffsetsFromLengths(lengths, make([]int, len(lengths)+1)); err != nil {
		return err
	}
	for k, i := range idx {
		s := &seqs[i]
		off := in.Tokens.Offsets[k]
		last := -1
		for j, mk := range s.LossMask {
			if mk != 0 && !s.masked {
				in.Tokens.Mask[off+j] = 1
				last = j
			}
		}
		if last >= 0 {
			in.Tokens.Rewards[off+last] = s.Reward
		}
	}
	out := ppo.Output{Advantages: make([]float64, total), Returns: make([]float64, total)}
	if err := est.Compute(&in, &t.estCfg, &t.ws, &out); err != nil {
		return err
	}
	for k, i := range idx {
		off := in.Tokens.Offsets[k]
		seqs[i].tokenAdv = out.Advantages[off : off+lengths[k]]
	}
	return nil
}

// tokenAdvantage is the advantage of response token j of s.
func (s *trainSeq) tokenAdvantage(j int) float64 {
	if s.tokenAdv != nil {
		return s.tokenAdv[j]
	}
	return s.adv
}

func advantageMetrics(seqs []trainSeq, m map[string]float64) {
	var sum, cnt float64
	lo, hi := math.Inf(1), math.Inf(-1)
	var lengths, rewards []float64
	clipped := 0.0
	for _, s := range seqs {
		lengths = append(lengths, float64(len(s.ResponseIDs)))
		rewards = append(rewards, s.Reward)
		if s.Termination == episode.TerminationMaxResponseLength {
			clipped++
		}
		if s.masked {
			continue
		}
		for j, mk := range s.LossMask {
			if mk == 0 {
				continue
			}
			a := s.tokenAdvantage(j)
			sum += a
			cnt++
			lo, hi = math.Min(lo, a), math.Max(hi, a)
		}
	}
	if len(seqs) == 0 {
		return
	}
	m["critic/rewards/mean"] = mean(rewards)
	m["response_length/mean"] = mean(lengths)
	m["response_length/max"] = slices.Max(lengths)
	m["response_length/clip_ratio"] = clipped / float64(len(seqs))
	if cnt > 0 {
		m["critic/advantages/mean"] = sum / cnt
		m["critic/advantages/min"] = lo
		m["critic/advantages/max"] = hi
	}
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// update runs actor.ppo_epochs passes of mini-batch updates over seqs.
func (t *Trainer) update(ctx context.Context, seqs []trainSeq, m map[string]float64) error {
	mini := miniBatches(seqs, t.cfg.EffectiveMiniBatch())
	var pgLoss, clipFrac, ppoKL, gradNorm float64
	updates := 0
	for epoch := 0; epoch < t.cfg.Actor.PPOEpochs; epoch++ {
		for _, mb := range mini {
			res, gn, err := t.updateMiniBatch(ctx, mb)
			if err != nil {
				return err
			}
			pgLoss += res.Metrics.PGLoss
			clipFrac += res.Metrics.ClipFrac
			ppoKL += res.Metrics.PPOKL
			gradNorm += gn
			updates++
		}
	}
	if updates > 0 {
		u := float64(updates)
		m["actor/pg_loss"], m["actor/pg_clipfrac"], m["actor/ppo_kl"], m["actor/grad_norm"] = pgLoss/u, clipFrac/u, ppoKL/u, gradNorm/u
	}
	m["actor/updates"] = float64(updates)
	return nil
}

// miniBatches splits seqs into mini-batches of `tasks` task groups each,
// keeping a group's sequences together as verl keeps a prompt's n
// responses together.
func miniBatches(seqs []trainSeq, tasks int) [][]trainSeq {
	var out [][]trainSeq
	start, groups := 0, 0
	for i := range seqs {
		if i == 0 || groupOf(seqs[i].EpisodeID) != groupOf(seqs[i-1].EpisodeID) {
			if groups == tasks {
				out = append(out, seqs[start:i])
				start, groups = i, 0
			}
			groups++
		}
	}
	if start < len(seqs) {
		out = append(out, seqs[start:])
	}
	return out
}

// updateMiniBatch is one optimizer step: a forward pass for the current
// logprobs, the policy loss and its gradient in pkg/ppo, then
// forward_backward with cross_entropy weights = −gradient and optim_step.
func (t *Trainer) updateMiniBatch(ctx context.Context, mb []trainSeq) (ppo.LossResult, float64, error) {
	datums := make([]backend.Datum, len(mb))
	lengths := make([]int, len(mb))
	for i := range mb {
		datums[i] = datumOf(&mb[i].Sequence)
		lengths[i] = len(mb[i].ResponseIDs)
	}
	ce := backend.Loss{Name: backend.LossCrossEntropy}
	fwd, err := t.be.Forward(ctx, datums, ce).Result(ctx)
	if err != nil {
		return ppo.LossResult{}, 0, err
	}
	offsets, err := ppo.OffsetsFromLengths(lengths, make([]int, len(lengths)+1))
	if err != nil {
		return ppo.LossResult{}, 0, err
	}
	total := offsets[len(offsets)-1]
	in := ppo.LossInput{
		Offsets:     offsets,
		Logprobs:    make([]float64, total),
		OldLogprobs: make([]float64, total),
		Advantages:  make([]float64, total),
		Mask:        make([]float64, total),
	}
	for i := range mb {
		s := &mb[i]
		p := len(s.PromptIDs) - 1 // target index of the first response token
		lp := fwd.LossFnOutputs[i].Logprobs
		for j := range s.ResponseIDs {
			k := offsets[i] + j
			in.Logprobs[k] = lp[p+j]
			in.OldLogprobs[k] = s.Logprobs[j]
			in.Advantages[k] = s.tokenAdvantage(j)
			if s.LossMask[j] != 0 && !s.masked {
				in.Mask[k] = 1
			}
		}
	}
	grad := make([]float64, total)
	res, err := ppo.PolicyLoss(&in, &t.lossCfg, grad)
	if err != nil {
		return res, 0, err
	}
	for i := range mb {
		s := &mb[i]
		p := len(s.PromptIDs) - 1
		w := make([]float64, len(datums[i].LossFnInputs.TargetTokens))
		for j := range s.ResponseIDs {
			w[p+j] = -grad[offsets[i]+j]
		}
		datums[i].LossFnInputs.Weights = w
	}
	fb := t.be.ForwardBackward(ctx, datums, ce)
	opt := t.be.OptimStep(ctx, t.adam(t.lr(t.step)))
	if _, err := fb.Result(ctx); err != nil {
		return res, 0, err
	}
	out, err := opt.Result(ctx)
	if err != nil {
		return res, 0, err
	}
	return res, out.Metrics["grad_norm"], nil
}

// datumOf lays a sequence out as Tinker does: input = tokens[:-1],
// targets = tokens[1:], so target i is predicted at input position i.
func datumOf(s *rollout.Sequence) backend.Datum {
	tokens := make([]int, 0, len(s.PromptIDs)+len(s.ResponseIDs))
	tokens = append(append(tokens, s.PromptIDs...), s.ResponseIDs...)
	return backend.Datum{
		Input:        tokens[:len(tokens)-1],
		LossFnInputs: backend.LossFnInputs{TargetTokens: tokens[1:]},
	}
}
