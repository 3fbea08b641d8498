package rollout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// Workflow runs one episode of one task (pkg/workflow's interface).
type Workflow = workflow.Workflow

// WorkflowFactory makes a fresh workflow for every episode (and every
// retry of one), so episodes never share agent or environment state.
type WorkflowFactory func() (Workflow, error)

// EngineOptions configure an Engine.
type EngineOptions struct {
	// N is the number of rollouts per task (rollout.n; default 1).
	N int
	// NParallel bounds the episodes in flight (workflow.n_parallel_tasks;
	// default 256).
	NParallel int
	// Shared, when set, bounds the episodes in flight across every engine
	// given the same channel (phases that overlap: the asynchronous
	// trainer's groups and its validation); an episode holds one of its
	// cap(Shared) places while it runs.
	Shared chan struct{}
	// EpisodeTimeout ends an episode with termination "timeout" (0: none).
	// An episode whose workflow ignores its context is abandoned at the
	// timeout rather than allowed to wedge the run.
	EpisodeTimeout time.Duration
	// RetryLimit is how many times an episode is run in all while it ends
	// in "error" (workflow.retry_limit, rLLM's meaning; default 3, at
	// least 1).
	RetryLimit int
	// TaskID names a task; by default its "uid" or "id" field, else its
	// index in the batch. A name seen twice in a batch gets "@index"
	// appended so that episode ids stay unique.
	TaskID func(index int, task episode.Task) string
	// OnEvent receives progress events. Calls are serialized; keep it fast.
	OnEvent func(Event)
	// OnStall, when set, is told every StallAfter while episodes run and
	// none ends: how many run, the oldest and what bounds them.
	OnStall func(string)
	// StallAfter is how long without an episode ending counts as a stall
	// (0: DefaultStallAfter).
	StallAfter time.Duration
}

// EventKind says what happened to an episode.
type EventKind string

// Progress events. Every episode has one started, any number of retried,
// one tokens, and then exactly one of finished and failed (error or
// timeout).
const (
	EventStarted  EventKind = "started"
	EventRetried  EventKind = "retried"
	EventTokens   EventKind = "tokens"
	EventFinished EventKind = "finished"
	EventFailed   EventKind = "failed"
)

// Event is one progress event.
type Event struct {
	Kind           EventKind
	EpisodeID      string
	TaskIndex      int
	Rollout        int
	Attempt        int // 1 for the first run
	Termination    episode.TerminationReason
	Err            string
	PromptTokens   int
	ResponseTokens int
}

// EngineMetrics are cumulative over every Run of an engine.
type EngineMetrics struct {
	Episodes       int64 // episodes returned
	Retries        int64 // re-runs of episodes that ended in error
	Errors         int64 // episodes returned with termination "error"
	Timeouts       int64 // episodes returned with termination "timeout"
	Abandoned      int64 // workflows still running after their timeout
	PromptTokens   int64
	ResponseTokens int64
	Terminations   map[episode.TerminationReason]int64
}

// Engine runs tasks × N episodes concurrently.
type Engine struct {
	factory WorkflowFactory
	opts    EngineOptions

	eventMu sync.Mutex
	mu      sync.Mutex
	terms   map[episode.TerminationReason]int64

	episodes, retries, errs, timeouts, abandoned atomic.Int64
	promptTokens, responseTokens                 atomic.Int64

	stall *stallWatch
	bound atomic.Value // string: the workflow's Bounder, from the first one built
}

// NewEngine checks the options and builds an engine.
func NewEngine(factory WorkflowFactory, opts EngineOptions) (*Engine, error) {
	if factory == nil {
		return nil, errors.New("rollout engine needs a workflow factory")
	}
	if opts.N < 0 || opts.NParallel < 0 || opts.RetryLimit < 0 || opts.EpisodeTimeout < 0 {
		return nil, optionErrorf("rollout.n (%d), workflow.n_parallel_tasks (%d), workflow.retry_limit (%d) and the episode timeout (%v) must not be negative",
			opts.N, opts.NParallel, opts.RetryLimit, opts.EpisodeTimeout)
	}
	if opts.N == 0 {
		opts.N = 1
	}
	if opts.NParallel == 0 {
		opts.NParallel = 256
	}
	if opts.RetryLimit == 0 {
		opts.RetryLimit = 3
	}
	if opts.TaskID == nil {
		opts.TaskID = DefaultTaskID
	}
	e := &Engine{factory: factory, opts: opts, terms: map[episode.TerminationReason]int64{}}
	if opts.OnStall != nil {
		e.stall = newStallWatch(cmp.Or(opts.StallAfter, DefaultStallAfter), opts.OnStall, e.boundText)
	}
	return e, nil
}

// boundText says what ends an episode that never finishes.
func (e *Engine) boundText() string {
	b, _ := e.bound.Load().(string)
	switch {
	case e.opts.EpisodeTimeout > 0 && b != "":
		return fmt.Sprintf("%s, agent.trajectory_timeout_s=%g any episode", b, e.opts.EpisodeTimeout.Seconds())
	case e.opts.EpisodeTimeout > 0:
		return fmt.Sprintf("agent.trajectory_timeout_s=%g ends an episode", e.opts.EpisodeTimeout.Seconds())
	case b != "":
		return b
	}
	return "no timeout ends an episode: agent.trajectory_timeout_s sets one"
}

// watchStalls starts the stall reports of one Run or Stream; the returned
// func stops them.
func (e *Engine) watchStalls() func() {
	if e.stall == nil {
		return func() {}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); e.stall.watch(stop) }()
	return func() { close(stop); <-done }
}

// DefaultTaskID is the task's "task_id", "uid" or "id" field (the columns
// pkg/dataset reads ids from), else its index.
func DefaultTaskID(index int, task episode.Task) string {
	for _, key := range []string{"task_id", "uid", "id"} {
		switch v := task[key].(type) {
		case string:
			if v != "" {
				return v
			}
		case int:
			return strconv.Itoa(v)
		case int64:
			return strconv.FormatInt(v, 10)
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return strconv.Itoa(index)
}

// Run runs every task N times and returns the episodes in task order:
// task 0's rollouts 0..N-1, then task 1's, and so on, with ids
// "task_id:rollout_index". Every episode is returned exactly once, failed
// ones with termination "error" or "timeout" and the reason in Error.
// When ctx is cancelled Run stops starting episodes and returns the
// finished ones, still in order, with ctx's error.
func (e *Engine) Run(ctx context.Context, tasks []episode.Task) ([]*episode.Episode, error) {
	results := make([]*episode.Episode, len(tasks)*e.opts.N)
	err := e.run(ctx, tasks, func(i int, ep *episode.Episode) error {
		results[i] = ep
		return nil
	})
	if err != nil {
		done := results[:0]
		for _, ep := range results {
			if ep != nil {
				done = append(done, ep)
			}
		}
		return done, err
	}
	return results, nil
}

// Stream runs every task N times like Run but hands each episode to fn
// (one call at a time, in Run's order) as soon as it and those before it
// have finished, and keeps none. An episode starts only while fewer than
// a window of episodes (4 x NParallel, at least 64) wait for an earlier
// one, so memory stays bounded however many tasks and rollouts there are.
// An error from fn stops the run and is returned; so is ctx's error,
// after the episodes already started are handed over.
func (e *Engine) Stream(ctx context.Context, tasks []episode.Task, fn func(*episode.Episode) error) error {
	ids := e.taskIDs(tasks)
	n := e.opts.N
	total := len(tasks) * n
	window := max(4*e.opts.NParallel, 64)
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer e.watchStalls()()

	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	stopWake := context.AfterFunc(runCtx, func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
	defer stopWake()
	pending := map[int]*episode.Episode{}
	next := 0
	var fnErr error
	deliver := func(i int, ep *episode.Episode) {
		mu.Lock()
		defer mu.Unlock()
		pending[i] = ep
		for {
			ep, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			if ep != nil && fnErr == nil {
				if err := fn(ep); err != nil {
					fnErr = err
					cancel(err)
				}
			}
		}
		cond.Broadcast()
	}

	var g errgroup.Group
	g.SetLimit(e.opts.NParallel)
	for i := 0; i < total; i++ {
		mu.Lock()
		for i-next >= window && runCtx.Err() == nil {
			cond.Wait()
		}
		mu.Unlock()
		if runCtx.Err() != nil {
			break
		}
		ti, r := i/n, i%n
		g.Go(func() error {
			deliver(i, e.runEpisode(runCtx, ti, r, tasks[ti], episode.EpisodeID(ids[ti], r)))
			return nil
		})
	}
	_ = g.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return fnErr
}

// run starts the episodes with at most NParallel in flight and delivers
// each with its index task*N+rollout.
func (e *Engine) run(ctx context.Context, tasks []episode.Task, deliver func(int, *episode.Episode) error) error {
	ids := e.taskIDs(tasks)
	n := e.opts.N
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer e.watchStalls()()
	var g errgroup.Group
	g.SetLimit(e.opts.NParallel)
launch:
	for ti, task := range tasks {
		for r := 0; r < n; r++ {
			if runCtx.Err() != nil {
				break launch
			}
			g.Go(func() error {
				ep := e.runEpisode(runCtx, ti, r, task, episode.EpisodeID(ids[ti], r))
				if runCtx.Err() != nil && ctx.Err() == nil {
					return nil // stopped by deliver's error: drop it
				}
				if err := deliver(ti*n+r, ep); err != nil {
					cancel(err)
					return err
				}
				return nil
			})
		}
	}
	err := g.Wait()
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

func (e *Engine) taskIDs(tasks []episode.Task) []string {
	ids := make([]string, len(tasks))
	seen := make(map[string]bool, len(tasks))
	for i, t := range tasks {
		id := e.opts.TaskID(i, t)
		if seen[id] {
			id = id + "@" + strconv.Itoa(i)
		}
		seen[id] = true
		ids[i] = id
	}
	return ids
}

func (e *Engine) emit(ev Event) {
	if e.opts.OnEvent == nil {
		return
	}
	e.eventMu.Lock()
	defer e.eventMu.Unlock()
	e.opts.OnEvent(ev)
}

// runEpisode runs one episode, re-running it while it ends in error. It
// returns nil only when ctx was cancelled.
func (e *Engine) runEpisode(ctx context.Context, ti, r int, task episode.Task, id string) *episode.Episode {
	if ctx.Err() != nil {
		return nil
	}
	if s := e.opts.Shared; s != nil {
		select {
		case s <- struct{}{}:
			defer func() { <-s }()
		case <-ctx.Done():
			return nil
		}
	}
	e.emit(Event{Kind: EventStarted, EpisodeID: id, TaskIndex: ti, Rollout: r, Attempt: 1})
	e.stall.started(id, 1)
	defer e.stall.ended(id)
	var ep *episode.Episode
	attempt, requests := 1, 0
	for ; ; attempt++ {
		var err error
		ep, err = e.once(sampler.WithStream(ctx, id+"#"+strconv.Itoa(attempt)), task, id)
		if ep == nil {
			return nil
		}
		requests += Requests(err)
		permanent := Permanent(err)
		if ep.TerminationReason != episode.TerminationError || attempt >= e.opts.RetryLimit || permanent {
			if ep.TerminationReason == episode.TerminationError {
				ep.Error += retryNote(attempt, e.opts.RetryLimit, requests, permanent)
			}
			break
		}
		e.retries.Add(1)
		e.stall.started(id, attempt+1)
		e.emit(Event{Kind: EventRetried, EpisodeID: id, TaskIndex: ti, Rollout: r, Attempt: attempt + 1, Err: ep.Error})
	}
	pt, rt := tokenCounts(ep)
	e.episodes.Add(1)
	e.promptTokens.Add(int64(pt))
	e.responseTokens.Add(int64(rt))
	e.mu.Lock()
	e.terms[ep.TerminationReason]++
	e.mu.Unlock()
	e.emit(Event{Kind: EventTokens, EpisodeID: id, TaskIndex: ti, Rollout: r, Attempt: attempt, PromptTokens: pt, ResponseTokens: rt})
	kind := EventFinished
	switch ep.TerminationReason {
	case episode.TerminationError:
		e.errs.Add(1)
		kind = EventFailed
	case episode.TerminationTimeout:
		e.timeouts.Add(1)
		kind = EventFailed
	}
	e.emit(Event{Kind: kind, EpisodeID: id, TaskIndex: ti, Rollout: r, Attempt: attempt,
		Termination: ep.TerminationReason, Err: ep.Error, PromptTokens: pt, ResponseTokens: rt})
	return ep
}

// retryNote completes the error of an episode that ended in error with
// what the two retry layers did: they multiply (each run of the episode,
// workflow.retry_limit, retries each model request up to
// rollout.retry.max_attempts times), so "gave up after N attempts" from
// the last request is not the whole story.
func retryNote(runs, limit, requests int, permanent bool) string {
	switch {
	case permanent && runs < limit:
		if requests > 1 {
			return fmt.Sprintf(" (not run again: the server gives this answer to every try; %d requests in all)", requests)
		}
		return " (not run again: the server gives this answer to every try)"
	case runs <= 1:
		return ""
	case requests > 0:
		return fmt.Sprintf(" (%d requests to the server in all: the episode was run %d times, workflow.retry_limit=%d, and each run retried its model request up to rollout.retry.max_attempts times)", requests, runs, limit)
	}
	return fmt.Sprintf(" (the episode was run %d times, workflow.retry_limit=%d; each model request has its own rollout.retry.max_attempts)", runs, limit)
}

func tokenCounts(ep *episode.Episode) (prompt, response int) {
	for _, tr := range ep.Trajectories {
		for _, st := range tr.Steps {
			prompt += len(st.PromptIDs)
			response += len(st.ResponseIDs)
		}
	}
	return prompt, response
}

// abandonGrace is how long a timed-out workflow may take to return
// before the engine leaves it behind.
const abandonGrace = 200 * time.Millisecond

type outcome struct {
	ep  *episode.Episode
	err error
}

// once runs one attempt of an episode and returns it with the workflow's
// error, if any; a nil episode means ctx was cancelled.
func (e *Engine) once(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
	failed := func(reason episode.TerminationReason, partial *episode.Episode, msg string) *episode.Episode {
		ep := &episode.Episode{}
		if partial != nil {
			ep = partial
		}
		ep.ID, ep.TerminationReason, ep.Error = id, reason, msg
		if ep.Task == nil {
			ep.Task = task
		}
		return ep
	}
	wf, err := e.factory()
	if err != nil {
		return failed(episode.TerminationError, nil, "creating the workflow: "+err.Error()), nil
	}
	if wf == nil {
		return failed(episode.TerminationError, nil, "the workflow factory returned no workflow"), nil
	}
	if b, ok := wf.(Bounder); ok && e.bound.Load() == nil {
		e.bound.Store(b.Bound())
	}
	epCtx, cancel := ctx, context.CancelFunc(func() {})
	if e.opts.EpisodeTimeout > 0 {
		epCtx, cancel = context.WithTimeout(ctx, e.opts.EpisodeTimeout)
	}
	defer cancel()
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- outcome{err: fmt.Errorf("workflow panicked: %v", p)}
			}
		}()
		ep, err := wf.Run(epCtx, task, id)
		done <- outcome{ep, err}
	}()
	var out outcome
	select {
	case out = <-done:
	case <-epCtx.Done():
		// A workflow that honours its context returns promptly; give it
		// that moment before deciding it ignores the context.
		grace := time.NewTimer(abandonGrace)
		defer grace.Stop()
		select {
		case out = <-done:
		case <-grace.C:
			if ctx.Err() != nil {
				return nil, nil
			}
			// The workflow ignores its context: leave it behind.
			e.abandoned.Add(1)
			return failed(episode.TerminationTimeout, nil, fmt.Sprintf("episode exceeded its timeout of %v", e.opts.EpisodeTimeout)), nil
		}
	}
	if ctx.Err() != nil {
		return nil, nil
	}
	timedOut := errors.Is(epCtx.Err(), context.DeadlineExceeded)
	switch {
	case out.err != nil && timedOut:
		return failed(episode.TerminationTimeout, out.ep, fmt.Sprintf("episode exceeded its timeout of %v: %v", e.opts.EpisodeTimeout, out.err)), out.err
	case out.err != nil:
		return failed(episode.TerminationError, out.ep, out.err.Error()), out.err
	case out.ep == nil:
		return failed(episode.TerminationError, nil, "the workflow returned no episode and no error"), nil
	}
	ep := out.ep
	ep.ID = id
	if ep.Task == nil {
		ep.Task = task
	}
	if ep.TerminationReason == "" {
		ep.TerminationReason = episode.TerminationUnknown
	}
	if ep.TerminationReason == episode.TerminationError && ep.Error == "" {
		ep.Error = "the workflow ended the episode with termination error"
	}
	return ep, nil
}

// Metrics returns the counters of every Run so far.
func (e *Engine) Metrics() EngineMetrics {
	m := EngineMetrics{Episodes: e.episodes.Load(), Retries: e.retries.Load(), Errors: e.errs.Load(),
		Timeouts: e.timeouts.Load(), Abandoned: e.abandoned.Load(), PromptTokens: e.promptTokens.Load(),
		ResponseTokens: e.responseTokens.Load(), Terminations: map[episode.TerminationReason]int64{}}
	e.mu.Lock()
	for k, v := range e.terms {
		m.Terminations[k] = v
	}
	e.mu.Unlock()
	return m
}
