package trainer

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// Asynchronous training (async_training.enable; rLLM's
// rllm.async_training, verl's fully-async recipe, AReaL): rollouts are a
// producer that runs task groups on the newest published weights without
// waiting for the update, and the trainer a consumer of finished groups.
//
//   - The producer starts a group while fewer than Quota =
//     int((1 + staleness_threshold) × trigger_parameter_sync_step ×
//     mini_batch_size) groups are in flight; a group leaves the quota when
//     it is dropped, or when the weights it trained are published. With
//     staleness 0 the groups of step k+1 start once step k is published:
//     the synchronous loop, sample for sample.
//   - The trainer takes the groups in the order they were drawn (so what
//     has trained is always a prefix of the dataloader's order, and a
//     checkpoint's dataloader state says exactly what is left), steps the
//     optimizer every mini_batch_size groups and publishes after
//     trigger_parameter_sync_step optimizer steps: one training step.
//   - A group whose oldest turn was sampled more than ceil(staleness)
//     versions before the weights it would train is dropped and counted
//     (async/dropped_stale), never trained.
//
// Resuming restarts from the checkpoint's dataloader state: the groups
// that were in flight are sampled again, on the resumed weights; nothing
// trained is drawn again.
type asyncRun struct {
	t      *Trainer
	plan   AsyncPlan
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// slots bounds the groups sampling at once to the episodes
	// workflow.n_parallel_tasks allows.
	slots chan struct{}

	mu       sync.Mutex
	cond     *sync.Cond
	inFlight int                 // started and not yet retired
	ready    map[int]*asyncGroup // finished, by draw number
	next     int                 // the draw number the trainer takes next
	unpub    int                 // trained groups whose weights are not published yet
	err      error               // the producer's failure
	running  int                 // groups sampling now
	// Idle time of both sides since the step began.
	idleSince                  time.Time // when running dropped to 0
	rolloutIdle, trainerIdle   time.Duration
	stepStart                  time.Time
	consecutiveDrops, lastDrop int
	stallSaid                  time.Time // the last stall report of any group

	// The producer's own dataloader and draw count (its goroutine only).
	loader *dataset.Loader
	batch  []episode.Task
	pos    int // index in batch
	drawn  int
	base   int // the trainer's step when the run started
}

// asyncGroup is one task's rollouts as the producer hands them over.
type asyncGroup struct {
	seq   int
	task  episode.Task
	index int // the task's index in its dataloader batch
	group Group
	em    rollout.EngineMetrics
	// after is the dataloader state just past this task; epoch its epoch.
	after dataset.LoaderState
	epoch int
	// start is the published version when the group started.
	start int
	err   error
}

// oldest is the version of the group's oldest sampled turn: each step's
// WeightVersion as the trainer's sampler wrote it, bounded by the version
// the group started on (a workflow that leaves WeightVersion empty gets
// that, which no turn of it can be older than).
func (g *asyncGroup) oldest() int {
	v := g.start
	for _, ep := range g.group.Episodes {
		if ep == nil {
			continue
		}
		for _, tr := range ep.Trajectories {
			for _, st := range tr.Steps {
				if n, err := strconv.Atoi(st.WeightVersion); err == nil && n < v {
					v = n
				}
			}
		}
	}
	return v
}

// startAsync starts the producer from the trainer's dataloader state.
func (t *Trainer) startAsync(ctx context.Context) error {
	loader, err := dataset.NewLoader(t.train, dataset.LoaderOptions{
		BatchSize: t.plan.DrawSize, Shuffle: t.plan.Shuffle, Seed: t.plan.DataSeed, DropLast: t.plan.DropLast,
	})
	if err != nil {
		return err
	}
	if err := loader.Restore(t.loader.State()); err != nil {
		return err
	}
	a := &asyncRun{t: t, plan: t.plan.Async, ready: map[int]*asyncGroup{}, loader: loader, base: t.step}
	a.cond = sync.NewCond(&a.mu)
	a.slots = make(chan struct{}, max(1, t.plan.Runner.NParallel/max(1, t.plan.Train.N)))
	runCtx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	a.idleSince, a.stepStart = t.now(), t.now()
	stopWake := context.AfterFunc(runCtx, func() { a.mu.Lock(); a.cond.Broadcast(); a.mu.Unlock() })
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer stopWake()
		a.produce(runCtx)
	}()
	t.async = a
	return nil
}

// stopAsync stops the producer and waits for the groups in flight to
// return (they see the cancelled context); their samples are discarded.
func (t *Trainer) stopAsync() {
	if t.async == nil {
		return
	}
	t.async.cancel()
	t.async.wg.Wait()
	t.async = nil
}

// produce starts groups while the quota allows, until ctx ends.
func (a *asyncRun) produce(ctx context.Context) {
	for {
		a.mu.Lock()
		for a.inFlight >= a.plan.Quota && ctx.Err() == nil {
			a.cond.Wait()
		}
		if ctx.Err() != nil {
			a.mu.Unlock()
			return
		}
		a.inFlight++
		a.mu.Unlock()
		select {
		case a.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		g := a.draw()
		a.mu.Lock()
		if a.running == 0 {
			a.rolloutIdle += a.t.now().Sub(a.idleSince)
		}
		a.running++
		a.mu.Unlock()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.run(ctx, g)
			<-a.slots
			a.mu.Lock()
			a.running--
			if a.running == 0 {
				a.idleSince = a.t.now()
			}
			if g.err != nil && a.err == nil && ctx.Err() == nil {
				a.err = g.err
			}
			a.ready[g.seq] = g
			a.cond.Broadcast()
			a.mu.Unlock()
		}()
	}
}

// draw takes the next task from the producer's dataloader.
func (a *asyncRun) draw() *asyncGroup {
	if a.pos >= len(a.batch) {
		a.batch, a.pos = a.loader.Next().Tasks, 0
	}
	st := a.loader.State()
	// The task's place in its epoch's order; the synchronous loop's
	// batches hold it at place mod the batch size.
	place := st.Position - len(a.batch) + a.pos
	g := &asyncGroup{seq: a.drawn, start: a.t.chat.Version(), task: a.batch[a.pos], index: place % max(1, a.t.plan.DrawSize), after: st, epoch: st.Epoch}
	g.after.Position = place + 1
	a.pos++
	a.drawn++
	return g
}

// stalled logs a group's stall report, one for all the groups in flight
// per rollout.DefaultStallAfter.
func (a *asyncRun) stalled(msg string) {
	a.mu.Lock()
	now := time.Now()
	due := now.Sub(a.stallSaid) >= rollout.DefaultStallAfter
	if due {
		a.stallSaid = now
	}
	a.mu.Unlock()
	if due {
		a.t.logf("asynchronous rollouts: a group's %s", msg)
	}
}

// run samples a group: rollout.n episodes of its task, seeded as the
// synchronous loop seeds the step the group is meant for.
func (a *asyncRun) run(ctx context.Context, g *asyncGroup) {
	o := a.t.plan.Runner
	o.SeedSalt = uint64(phaseTrain)<<40 | uint64(a.base+g.seq/a.plan.GroupsPerStep())
	o.TaskIndexBase = g.index
	// At most n_parallel_tasks episodes at once across the groups in
	// flight (slots) and, with validation, across phases (o.Shared).
	o.NParallel = min(a.t.plan.Train.N, o.NParallel)
	o.Shared = a.t.episodeSlots
	o.Stall = a.stalled
	eng, err := rollout.NewRunner(a.t.plan.Workflow, a.t.chat, a.t.plan.Train.Params, a.t.plan.Train.N, o, nil)
	if err != nil {
		g.err = err
		return
	}
	eps, err := eng.Run(ctx, []episode.Task{g.task})
	if err != nil {
		g.err = err
		return
	}
	groups, err := groupEpisodes(eps, a.t.plan.Train.N)
	if err != nil {
		g.err = err
		return
	}
	g.group, g.em = groups[0], eng.Metrics()
}

// take waits for the next group in draw order.
func (a *asyncRun) take(ctx context.Context) (*asyncGroup, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	waited := a.t.now()
	for a.ready[a.next] == nil && a.err == nil && ctx.Err() == nil {
		a.cond.Wait()
	}
	a.trainerIdle += a.t.now().Sub(waited)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if a.err != nil {
		return nil, a.err
	}
	g := a.ready[a.next]
	delete(a.ready, a.next)
	a.next++
	return g, nil
}

// retire frees n places of the quota.
func (a *asyncRun) retire(n int) {
	a.mu.Lock()
	a.inFlight -= n
	a.cond.Broadcast()
	a.mu.Unlock()
}

// publish publishes the weights of the step just trained, holding new
// model calls meanwhile unless partial rollouts are on, and retires the
// groups those weights trained from the quota.
func (a *asyncRun) publish(ctx context.Context, publish func(context.Context) error) error {
	if !a.plan.Partial {
		if err := a.t.chat.hold(ctx); err != nil {
			return err
		}
		defer a.t.chat.release()
		// Servers that speak SGLang's API are paused around the update as
		// well, for requests that do not come through this trainer.
		if pub := a.t.publisher; pub != nil && pub.CanPause() {
			if err := pub.Pause(ctx); err != nil {
				return fmt.Errorf("pausing generation before the weight update: %w", err)
			}
			defer func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				if err := pub.Continue(cctx); err != nil {
					a.t.logf("warning: continuing generation after the weight update: %v", err)
				}
			}()
		}
	}
	if err := publish(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	n := a.unpub
	a.unpub = 0
	a.mu.Unlock()
	a.retire(n)
	return nil
}

// idle returns and resets both sides' idle times and the time since the
// last call.
func (a *asyncRun) idle() (rolloutIdle, trainerIdle, wall time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.t.now()
	if a.running == 0 {
		a.rolloutIdle += now.Sub(a.idleSince)
		a.idleSince = now
	}
	rolloutIdle, trainerIdle, wall = a.rolloutIdle, a.trainerIdle, now.Sub(a.stepStart)
	a.rolloutIdle, a.trainerIdle, a.stepStart = 0, 0, now
	return
}

// asyncStep is one training step of the asynchronous loop: for each of
// trigger_parameter_sync_step optimizer steps, take mini_batch_size
// groups (dropping stale ones), then score → filter → advantages → train
// as the synchronous step does. Train publishes afterwards.
func (t *Trainer) asyncStep(ctx context.Context) (map[string]float64, error) {
	if t.async == nil {
		if err := t.startAsync(ctx); err != nil {
			return nil, err
		}
	}
	m, err := t.asyncTrain(ctx)
	if err != nil {
		t.stopAsync()
		return nil, err
	}
	return m, nil
}

func (t *Trainer) asyncTrain(ctx context.Context) (map[string]float64, error) {
	a := t.async
	clock := newStopwatch(t.now)
	version := t.chat.Version()
	var parts []map[string]float64
	var lags []float64
	var last *asyncGroup
	dropped := 0
	minV, maxV := math.MaxInt, -1
	for j := 0; j < a.plan.SyncSteps; j++ {
		var groups []Group
		var em rollout.EngineMetrics
		fresh := true
		for len(groups) < a.plan.MiniBatch {
			g, err := a.take(ctx)
			if err != nil {
				return nil, err
			}
			last = g
			old := g.oldest()
			lag := version - old
			if lag > a.plan.MaxLag {
				dropped++
				a.consecutiveDrops++
				a.retire(1)
				if a.consecutiveDrops > a.plan.Quota+a.plan.GroupsPerStep() {
					return nil, fmt.Errorf("the last %d task groups were all sampled on weights more than %d versions older than the trained ones (the newest sampled version is %d, the trainer's %d): the sampler is not receiving the published weights", a.consecutiveDrops, a.plan.MaxLag, old, version)
				}
				continue
			}
			a.consecutiveDrops = 0
			fresh = fresh && lag == 0
			lags = append(lags, float64(lag))
			minV, maxV = min(minV, old), max(maxV, old)
			groups = append(groups, g.group)
			em = addEngineMetrics(em, g.em)
		}
		m, err := t.asyncMiniBatch(ctx, groups, em, j == 0 && fresh, clock)
		if err != nil {
			return nil, err
		}
		parts = append(parts, m)
		a.mu.Lock()
		a.unpub += len(groups)
		a.mu.Unlock()
	}
	m := combineParts(parts)
	if err := t.loader.Restore(last.after); err != nil {
		return nil, err
	}
	m["training/global_step"] = float64(t.step + 1)
	m["training/epoch"] = float64(last.epoch)
	m["timing_s/step"] = clock.total().Seconds()
	rIdle, tIdle, wall := a.idle()
	if wall > 0 {
		m["async/rollout_idle_ratio"] = rIdle.Seconds() / wall.Seconds()
		m["async/trainer_idle_ratio"] = tIdle.Seconds() / wall.Seconds()
	}
	m["async/dropped_stale"] = float64(dropped)
	m["async/weight_version"] = float64(version)
	if len(lags) > 0 {
		m["async/staleness_mean"] = mean(lags)
		m["async/staleness_min"], m["async/staleness_max"] = minF(lags), maxF(lags)
		m["async/sample_version_min"], m["async/sample_version_max"] = float64(minV), float64(maxV)
	}
	return m, nil
}

// asyncMiniBatch is the synchronous step's pipeline on one optimizer
// step's groups.
func (t *Trainer) asyncMiniBatch(ctx context.Context, groups []Group, em rollout.EngineMetrics, onPolicy bool, clock *stopwatch) (map[string]float64, error) {
	var eps []*episode.Episode
	for _, g := range groups {
		eps = append(eps, g.Episodes...)
	}
	if err := allFailed(eps); err != nil {
		return nil, err
	}
	t.diag.noteEpisodes(phaseRollouts, eps)
	m := episodeMetrics(groups)
	m["rollout/retries"], m["rollout/episodes"] = float64(em.Retries), float64(em.Episodes)
	m["rollout/errors"], m["rollout/response_tokens"] = float64(em.Errors+em.Timeouts), float64(em.ResponseTokens)
	m["timing_s/gen"] = clock.lap().Seconds()
	groups, skip, err := t.prepare(ctx, groups, m) // loop.go
	if err != nil {
		return nil, err
	}
	m["timing_s/adv"] = clock.lap().Seconds()
	up := t.plan.Update
	// The embedded policy's sampling logprobs stand in for the forward
	// pass only when they are the current weights' own.
	up.OnPolicyFirst = up.OnPolicyFirst && onPolicy
	mini := miniBatches(groups, up.MiniBatchTasks)
	adam := t.plan.Adam(t.step, t.totalSteps)
	m["actor/lr"] = adam.LearningRate
	if skip || len(mini) == 0 {
		m["batch/skipped"] = 1
	} else {
		st, err := update(ctx, t.be, &up, mini, adam)
		if err != nil {
			return nil, err
		}
		merge(m, updateMetrics(st))
	}
	m["timing_s/update_actor"] = clock.lap().Seconds()
	return m, nil
}

func addEngineMetrics(a, b rollout.EngineMetrics) rollout.EngineMetrics {
	a.Episodes += b.Episodes
	a.Retries += b.Retries
	a.Errors += b.Errors
	a.Timeouts += b.Timeouts
	a.ResponseTokens += b.ResponseTokens
	a.PromptTokens += b.PromptTokens
	return a
}

// combineParts merges the metrics of a step's optimizer steps: counts
// (rollout/*, actor/updates, timings) add up, the rest are averaged. A
// key written only when it is not zero (the termination reasons'
// fractions, batch/skipped) is 0 in a part that lacks it, so it is
// averaged over every part, as the synchronous step would compute it
// over the same episodes; other keys (a loss that a skipped part has not)
// over the parts that have them.
func combineParts(parts []map[string]float64) map[string]float64 {
	if len(parts) == 1 {
		return parts[0]
	}
	sum := map[string]float64{}
	n := map[string]float64{}
	for _, p := range parts {
		for k, v := range p {
			sum[k] += v
			n[k]++
		}
	}
	for k := range sum {
		switch {
		case strings.HasPrefix(k, "rollout/") || strings.HasPrefix(k, "timing_s/") || k == "actor/updates":
			continue
		case zeroWhenAbsent(k):
			sum[k] /= float64(len(parts))
		default:
			sum[k] /= n[k]
		}
	}
	return sum
}

// zeroWhenAbsent reports whether a step metric is left out when it is 0.
func zeroWhenAbsent(k string) bool {
	return strings.HasPrefix(k, "batch/termination_reason/") || k == "batch/skipped"
}

func minF(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = math.Min(m, x)
	}
	return m
}

func maxF(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = math.Max(m, x)
	}
	return m
}
