package trainer

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/ppo"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// trainStep is one step of the loop, as the Tinker cookbook's rl/train.py
// reads: sample groups → score → filter → advantages → datums → train
// step; the loop then publishes the new weights. It returns the step's
// metrics (rLLM's names). The dataloader only moves on when the step
// completes, so an interrupted step is redone, batch and all, on resume.
func (t *Trainer) trainStep(ctx context.Context) (map[string]float64, error) {
	if t.plan.Async.Enabled {
		return t.asyncStep(ctx) // async.go
	}
	clock := newStopwatch(t.now)
	before := t.loader.State()
	batch := t.loader.Next()
	m, err := t.runStep(ctx, batch.Tasks, clock)
	if err != nil {
		t.loader.Restore(before)
		return nil, err
	}
	m["training/global_step"] = float64(t.step + 1)
	m["training/epoch"] = float64(batch.Epoch)
	m["timing_s/step"] = clock.total().Seconds()
	return m, nil
}

func (t *Trainer) runStep(ctx context.Context, tasks []episode.Task, clock *stopwatch) (map[string]float64, error) {
	groups, m, err := t.sampleGroups(ctx, tasks)
	if err != nil {
		return nil, err
	}
	m["timing_s/gen"] = clock.lap().Seconds()
	groups, skip, err := t.prepare(ctx, groups, m)
	if err != nil {
		return nil, err
	}
	m["timing_s/adv"] = clock.lap().Seconds()
	if err := t.trainOn(ctx, groups, skip, m); err != nil {
		return nil, err
	}
	m["timing_s/update_actor"] = clock.lap().Seconds()
	return m, nil
}

// prepare turns sampled groups into what the update trains on, the same
// way for synchronous and asynchronous steps: score them, filter them and,
// unless the filters skip the step, compute their advantages.
func (t *Trainer) prepare(ctx context.Context, groups []Group, m map[string]float64) ([]Group, bool, error) {
	if err := score(groups, t.plan.Assemble, m); err != nil {
		return nil, false, err
	}
	shapeRewards(groups, t.plan.Reward, m)
	groups, skip, err := t.filter(groups, m)
	if err != nil {
		return nil, false, err
	}
	if !skip {
		if groups, err = t.advantages(ctx, groups, m); err != nil {
			return nil, false, err
		}
	}
	t.episodes.keepTrain(t.step+1, groups)
	return groups, skip, nil
}

// score lays the episodes out as training samples with their rewards,
// length limits and token checks (rollout.Assemble).
func score(groups []Group, opts rollout.AssembleOptions, m map[string]float64) error {
	ast, err := assemble(groups, opts)
	if err != nil {
		return err
	}
	m["batch/token_mismatch"] = float64(ast.TokenMismatches)
	m["batch/truncated_dropped"] = float64(ast.TruncatedDropped)
	return nil
}

// shapeRewards adds DAPO's overlong penalty to each sample's reward
// (verl's dapo reward manager, ppo.OverlongPenalty), and with log its
// step means: batch/overlong_reward, the mean penalty, and
// batch/overlong, the fraction of samples penalised (verl's
// reward_extra_info overlong_reward and overlong).
func shapeRewards(groups []Group, r RewardPlan, m map[string]float64) {
	if !r.Overlong {
		return
	}
	var n, sum, hit float64
	for gi := range groups {
		for si := range groups[gi].Samples {
			s := &groups[gi].Samples[si]
			pen := ppo.OverlongPenalty(len(s.ResponseIDs), r.MaxRespLen, r.Len, r.PenaltyFactor)
			s.Reward += pen
			n++
			sum += pen
			if pen < 0 {
				hit++
			}
		}
	}
	if r.Log && n > 0 {
		m["batch/overlong_reward"], m["batch/overlong"] = sum/n, hit/n
	}
}

// advantages folds in the reference policy's KL when asked, runs the
// estimators and drops the groups left without signal.
func (t *Trainer) advantages(ctx context.Context, groups []Group, m map[string]float64) ([]Group, error) {
	if t.ref != nil {
		start := t.now()
		if err := referenceLogprobs(ctx, t.ref, miniBatches(groups, t.plan.Update.MiniBatchTasks)); err != nil {
			return nil, fmt.Errorf("reference logprobs: %w", err)
		}
		m["timing_s/ref"] = t.now().Sub(start).Seconds()
		if beta := t.plan.Reference.RewardKLCoef; beta != 0 {
			kl, err := klInReward(samples(groups), beta, t.plan.Reference.RewardKLType)
			if err != nil {
				return nil, err
			}
			m["actor/reward_kl_penalty"], m["actor/reward_kl_penalty_coeff"] = kl, beta
		}
	}
	if err := computeAdvantages(groups, &t.plan.Advantage, &t.ws); err != nil {
		return nil, err
	}
	if t.plan.Filters.DropZeroAdvantage {
		var dropped int
		var err error
		if groups, dropped, err = dropZeroAdvantage(groups, &t.ws); err != nil {
			return nil, err
		}
		m["batch/uniform_groups_dropped"] = float64(dropped)
	}
	merge(m, advantageMetrics(groups))
	return groups, nil
}

// trainOn turns the groups into mini-batches of datums and runs the
// update on the backend (nothing when the filters left no signal).
func (t *Trainer) trainOn(ctx context.Context, groups []Group, skip bool, m map[string]float64) error {
	mini := miniBatches(groups, t.plan.Update.MiniBatchTasks)
	adam := t.plan.Adam(t.step, t.totalSteps)
	m["actor/lr"] = adam.LearningRate
	if skip || len(mini) == 0 {
		m["batch/skipped"] = 1
		return nil
	}
	st, err := update(ctx, t.be, &t.plan.Update, mini, adam)
	if err != nil {
		return err
	}
	merge(m, updateMetrics(st))
	return nil
}

// sampleGroups runs rollout.n episodes of every task on the newest
// weights, groups them by task and returns the episode metrics.
func (t *Trainer) sampleGroups(ctx context.Context, tasks []episode.Task) ([]Group, map[string]float64, error) {
	onEvent, done := t.phase("rollout", len(tasks)*t.plan.Train.N)
	defer done()
	eng, err := rollout.NewRunner(t.plan.Workflow, t.chat, t.plan.Train.Params, t.plan.Train.N, t.runnerFor(phaseTrain), onEvent)
	if err != nil {
		return nil, nil, err
	}
	eps, err := eng.Run(ctx, tasks)
	if err != nil {
		return nil, nil, err
	}
	if err := allFailed(eps); err != nil {
		return nil, nil, err // the loop names the step
	}
	t.diag.noteEpisodes(phaseRollouts, eps)
	groups, err := groupEpisodes(eps, t.plan.Train.N)
	if err != nil {
		return nil, nil, err
	}
	m := episodeMetrics(groups)
	em := eng.Metrics()
	m["rollout/retries"], m["rollout/episodes"] = float64(em.Retries), float64(em.Episodes)
	m["rollout/errors"], m["rollout/response_tokens"] = float64(em.Errors+em.Timeouts), float64(em.ResponseTokens)
	return groups, m, nil
}

// filter applies rejection sampling (keeping at most data.train_batch_size
// groups of the multiplied draw) and compact filtering. skip says too few
// partly solved groups are left for an update
// (rejection_sample.min_partial_solve_tasks).
func (t *Trainer) filter(groups []Group, m map[string]float64) ([]Group, bool, error) {
	stats, err := solveStats(groups, &t.ws)
	if err != nil {
		return nil, false, err
	}
	m["batch/solve_none"], m["batch/solve_all"], m["batch/solve_partial"] = stats.Fractions()
	if t.plan.Filters.DropOverlongPrompts {
		var dropped int
		groups, dropped = dropOverlongPrompts(groups)
		m["batch/overlong_prompt_dropped"] = float64(dropped)
		if len(groups) == 0 {
			return groups, true, nil
		}
	}
	if t.plan.Filters.Rejection {
		if groups, _, err = rejectionSample(groups, t.plan.BatchSize, &t.ws); err != nil {
			return nil, false, err
		}
		if len(groups) < t.plan.Filters.MinPartial || len(groups) == 0 {
			return groups, true, nil
		}
	} else if !t.plan.Async.Enabled && len(groups) > t.plan.BatchSize {
		// An asynchronous optimizer step trains its mini-batch, however
		// many tasks the dataloader hands out at a time.
		groups = groups[:t.plan.BatchSize]
	}
	masked, err := compactFilter(groups, t.plan.Filters.Compact)
	if err != nil {
		return nil, false, err
	}
	m["batch/compact_masked"] = float64(masked)
	return groups, false, nil
}

// episodeMetrics are rLLM's per-batch episode numbers: scores, accuracy
// and termination reasons.
func episodeMetrics(groups []Group) map[string]float64 {
	m := map[string]float64{}
	var scores []float64
	correct, total := 0, 0
	for gi := range groups {
		for _, ep := range groups[gi].Episodes {
			if ep == nil {
				continue
			}
			total++
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
	}
	if total == 0 {
		return m
	}
	m["critic/score/mean"] = mean(scores)
	m["critic/score/max"] = slices.Max(scores)
	m["critic/score/min"] = slices.Min(scores)
	m["batch/accuracy"] = float64(correct) / float64(total)
	for _, r := range episode.TerminationReasons {
		k := "batch/termination_reason/" + string(r)
		if n, ok := m[k]; ok {
			m[k] = n / float64(total)
		}
	}
	return m
}

// advantageMetrics summarise the samples that train: rewards, response
// lengths and the advantages of trained tokens.
func advantageMetrics(groups []Group) map[string]float64 {
	m := map[string]float64{}
	var sum, cnt float64
	lo, hi := math.Inf(1), math.Inf(-1)
	var lengths, rewards []float64
	clipped := 0.0
	for _, s := range samples(groups) {
		lengths = append(lengths, float64(len(s.ResponseIDs)))
		rewards = append(rewards, s.Reward)
		if s.Termination == episode.TerminationMaxResponseLength {
			clipped++
		}
		if s.Masked {
			continue
		}
		for j, mk := range s.LossMask {
			if mk != 0 {
				a := s.AdvantageAt(j)
				sum += a
				cnt++
				lo, hi = math.Min(lo, a), math.Max(hi, a)
			}
		}
	}
	if len(lengths) == 0 {
		return m
	}
	m["critic/rewards/mean"] = mean(rewards)
	m["response_length/mean"] = mean(lengths)
	m["response_length/max"] = slices.Max(lengths)
	m["response_length/clip_ratio"] = clipped / float64(len(lengths))
	if cnt > 0 {
		m["critic/advantages/mean"] = sum / cnt
		m["critic/advantages/min"] = lo
		m["critic/advantages/max"] = hi
	}
	return m
}

func updateMetrics(st UpdateStats) map[string]float64 {
	m := map[string]float64{"actor/updates": float64(st.Updates)}
	if st.Updates > 0 {
		m["actor/pg_loss"], m["actor/pg_clipfrac"], m["actor/ppo_kl"], m["actor/grad_norm"] = st.PGLoss, st.ClipFrac, st.PPOKL, st.GradNorm
		if st.HasEntropy {
			m["actor/entropy"] = st.Entropy
		}
		if st.HasKL {
			m["actor/kl_loss"] = st.KLLoss
		}
		merge(m, st.Corr)
	}
	return m
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

// stopwatch times the phases of a step.
type stopwatch struct {
	now         func() time.Time
	start, last time.Time
}

func newStopwatch(now func() time.Time) *stopwatch {
	t := now()
	return &stopwatch{now: now, start: t, last: t}
}

// lap is the time since the previous lap (or the start).
func (s *stopwatch) lap() time.Duration {
	t := s.now()
	d := t.Sub(s.last)
	s.last = t
	return d
}

func (s *stopwatch) total() time.Duration { return s.now().Sub(s.start) }

// Rollout phases, to salt their sampling seeds apart.
const (
	phaseTrain = iota + 1
	phaseVal
	phaseWarmup
)

// runnerFor is the plan's runner settings with seeds salted by the phase
// and the step, so no two steps (or a step and its validation) sample
// with the same seeds.
func (t *Trainer) runnerFor(phase int) rollout.RunnerOptions {
	o := t.plan.Runner
	o.SeedSalt = uint64(phase)<<40 | uint64(t.step)
	o.Shared = t.episodeSlots
	o.Stall = func(msg string) { t.logf("%s: %s", phaseName(phase, t.step), msg) }
	return o
}

// phaseName names a rollout phase in a stall report.
func phaseName(phase, step int) string {
	switch phase {
	case phaseVal:
		return fmt.Sprintf("validation at step %d", step)
	case phaseWarmup:
		return "warm-up"
	}
	return fmt.Sprintf("step %d's rollouts", step+1)
}
