package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// funcWorkflow adapts a function to Workflow.
type funcWorkflow func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error)

func (f funcWorkflow) Run(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
	return f(ctx, task, id)
}

func factoryOf(f funcWorkflow) WorkflowFactory {
	return func() (Workflow, error) { return f, nil }
}

func doneEpisode(task episode.Task, id string) *episode.Episode {
	return &episode.Episode{ID: id, TerminationReason: episode.TerminationEnvDone,
		Trajectories: []episode.Trajectory{{Steps: []episode.Step{{PromptIDs: []int{1, 2}, ResponseIDs: []int{3}}}}}}
}

func makeTasks(n int) []episode.Task {
	tasks := make([]episode.Task, n)
	for i := range tasks {
		tasks[i] = episode.Task{"uid": fmt.Sprintf("t%d", i), "question": "the cat"}
	}
	return tasks
}

func TestEngineOrderAndIDs(t *testing.T) {
	var inFlight, peak atomic.Int64
	wf := funcWorkflow(func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer inFlight.Add(-1)
		time.Sleep(time.Duration(len(id)%3) * time.Millisecond) // finish out of order
		return doneEpisode(task, id), nil
	})
	var events sync.Map
	e, err := NewEngine(factoryOf(wf), EngineOptions{N: 3, NParallel: 4, OnEvent: func(ev Event) {
		v, _ := events.LoadOrStore(ev.Kind, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}})
	if err != nil {
		t.Fatal(err)
	}
	tasks := makeTasks(10)
	tasks[3] = episode.Task{"id": 42.0}
	tasks[4] = episode.Task{}
	tasks[5] = episode.Task{"uid": "t0"} // duplicate name
	eps, err := e.Run(context.Background(), tasks)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 30 {
		t.Fatalf("%d episodes", len(eps))
	}
	for i, ep := range eps {
		ti, r := i/3, i%3
		want := fmt.Sprintf("t%d:%d", ti, r)
		switch ti {
		case 3:
			want = fmt.Sprintf("42:%d", r)
		case 4:
			want = fmt.Sprintf("4:%d", r)
		case 5:
			want = fmt.Sprintf("t0@5:%d", r)
		}
		if ep.ID != want {
			t.Errorf("episode %d has id %q, want %q", i, ep.ID, want)
		}
	}
	if p := peak.Load(); p > 4 {
		t.Errorf("%d episodes in flight, limit 4", p)
	}
	for kind, want := range map[EventKind]int64{EventStarted: 30, EventFinished: 30, EventTokens: 30} {
		v, _ := events.Load(kind)
		if v == nil || v.(*atomic.Int64).Load() != want {
			t.Errorf("%s events: %v, want %d", kind, v, want)
		}
	}
	m := e.Metrics()
	if m.Episodes != 30 || m.PromptTokens != 60 || m.ResponseTokens != 30 || m.Terminations[episode.TerminationEnvDone] != 30 {
		t.Errorf("metrics %+v", m)
	}
}

func TestEngineFailures(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	for _, tc := range []struct {
		name      string
		wf        func(attempt int64) funcWorkflow
		limit     int
		term      episode.TerminationReason
		errSubstr string
		retries   int64
		abandoned int64
	}{
		{name: "error retried then succeeds", limit: 3, term: episode.TerminationEnvDone, retries: 2,
			wf: func(attempt int64) funcWorkflow {
				return func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
					if attempt < 3 {
						return nil, errors.New("env crashed")
					}
					return doneEpisode(task, id), nil
				}
			}},
		{name: "error kept after retry_limit", limit: 2, term: episode.TerminationError, errSubstr: "env crashed", retries: 1,
			wf: func(int64) funcWorkflow {
				return func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
					return nil, errors.New("env crashed")
				}
			}},
		{name: "error termination without a Go error", limit: 1, term: episode.TerminationError, errSubstr: "termination error",
			wf: func(int64) funcWorkflow {
				return func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
					return &episode.Episode{TerminationReason: episode.TerminationError}, nil
				}
			}},
		{name: "panic", limit: 1, term: episode.TerminationError, errSubstr: "workflow panicked: boom",
			wf: func(int64) funcWorkflow {
				return func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) { panic("boom") }
			}},
		{name: "nil episode", limit: 1, term: episode.TerminationError, errSubstr: "no episode",
			wf: func(int64) funcWorkflow {
				return func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) { return nil, nil }
			}},
		{name: "timeout honoured by the workflow", limit: 3, term: episode.TerminationTimeout, errSubstr: "timeout",
			wf: func(int64) funcWorkflow {
				return func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
					<-ctx.Done()
					return nil, ctx.Err()
				}
			}},
		{name: "timeout ignored by the workflow", limit: 3, term: episode.TerminationTimeout, errSubstr: "timeout", abandoned: 1,
			wf: func(int64) funcWorkflow {
				return func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
					<-block
					return nil, nil
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var attempts atomic.Int64
			factory := func() (Workflow, error) { return tc.wf(attempts.Add(1)), nil }
			e, err := NewEngine(factory, EngineOptions{RetryLimit: tc.limit, EpisodeTimeout: 30 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			eps, err := e.Run(context.Background(), makeTasks(1))
			if err != nil || len(eps) != 1 {
				t.Fatalf("%d episodes, %v", len(eps), err)
			}
			ep := eps[0]
			if ep.TerminationReason != tc.term || !strings.Contains(ep.Error, tc.errSubstr) || ep.ID != "t0:0" || ep.Task == nil {
				t.Errorf("episode %+v, want %s with %q", ep, tc.term, tc.errSubstr)
			}
			if m := e.Metrics(); m.Retries != tc.retries || m.Abandoned != tc.abandoned {
				t.Errorf("metrics %+v, want %d retries, %d abandoned", m, tc.retries, tc.abandoned)
			}
		})
	}
}

func TestEngineCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var started atomic.Int64
	wf := funcWorkflow(func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
		if started.Add(1) == 5 {
			cancel()
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	e, _ := NewEngine(factoryOf(wf), EngineOptions{NParallel: 5})
	eps, err := e.Run(ctx, makeTasks(100))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v", err)
	}
	if len(eps) != 0 || started.Load() > 5 {
		t.Errorf("%d episodes returned, %d started after cancel", len(eps), started.Load())
	}
}

func TestEngineOptions(t *testing.T) {
	if _, err := NewEngine(nil, EngineOptions{}); err == nil {
		t.Error("nil factory accepted")
	}
	_, err := NewEngine(factoryOf(nil), EngineOptions{NParallel: -1})
	var oe *OptionError
	if !errors.As(err, &oe) {
		t.Errorf("negative n_parallel: %v", err)
	}
}

// chatWorkflow is a small multi-turn workflow on a Sampler, as agents
// built on pkg/workflow will be: it asks turns times and records tokens.
type chatWorkflow struct {
	s     sampler.Sampler
	turns int
}

func (w chatWorkflow) Run(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
	msgs := []episode.Message{{Role: "user", Content: task["question"].(string)}}
	var steps []episode.Step
	for turn := 0; turn < w.turns; turn++ {
		r, err := w.s.Sample(ctx, sampler.Request{Messages: msgs, Params: sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 16}})
		if err != nil {
			return nil, err
		}
		steps = append(steps, episode.Step{PromptIDs: r.PromptIDs, ResponseIDs: r.CompletionIDs, Logprobs: r.Logprobs, ModelResponse: r.Text})
		msgs = append(msgs, episode.Message{Role: "assistant", Content: r.Text}, episode.Message{Role: "user", Content: " so"})
	}
	return &episode.Episode{TerminationReason: episode.TerminationEnvDone, Trajectories: []episode.Trajectory{{Name: "solver", Steps: steps}}}, nil
}

// Faults from the fake, alone and mixed, at 10% of requests: the run
// completes with every episode exactly once; retryable faults are retried
// (and counted) and never surface; a fatal fault ends only its own
// episode, with a reason.
func TestEngineUnderFaults(t *testing.T) {
	cases := map[string][]fakevllm.Fault{"mixed": append(append([]fakevllm.Fault{}, fakevllm.RetryableFaults...), fakevllm.FatalFaults...)}
	for _, f := range append(append([]fakevllm.Fault{}, fakevllm.RetryableFaults...), fakevllm.FatalFaults...) {
		cases[f.String()] = []fakevllm.Fault{f}
	}
	if testing.Short() {
		cases = map[string][]fakevllm.Fault{"mixed": cases["mixed"]}
	}
	for name, faults := range cases {
		t.Run(name, func(t *testing.T) {
			s := fakevllm.New(fakevllm.Config{FaultRate: 0.1, Faults: faults, Seed: 11})
			defer s.Close()
			// Hangs cost one request timeout each; keep it short for the
			// hang fault and generous elsewhere, so that a slow CI machine
			// cannot add timeouts the fake did not inject.
			timeout := 10 * time.Second
			if len(faults) == 1 && faults[0] == fakevllm.FaultTimeout {
				timeout = time.Second
			}
			c := newTestClient(t, Options{Endpoints: []string{s.URL}, RequestTimeout: timeout, VocabSize: s.Vocab().Size(),
				Retry: RetryPolicy{MaxAttempts: 8, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}})
			var finished, failed atomic.Int64
			e, err := NewEngine(func() (Workflow, error) { return chatWorkflow{s: c, turns: 2}, nil },
				EngineOptions{N: 4, NParallel: 32, RetryLimit: 1, OnEvent: func(ev Event) {
					switch ev.Kind {
					case EventFinished:
						finished.Add(1)
					case EventFailed:
						failed.Add(1)
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			eps, err := e.Run(context.Background(), makeTasks(50))
			if err != nil {
				t.Fatal(err)
			}
			if len(eps) != 200 || finished.Load()+failed.Load() != 200 {
				t.Fatalf("%d episodes, %d finished + %d failed events", len(eps), finished.Load(), failed.Load())
			}
			seen := map[string]bool{}
			var errored int64
			for i, ep := range eps {
				if want := fmt.Sprintf("t%d:%d", i/4, i%4); ep.ID != want || seen[ep.ID] {
					t.Fatalf("episode %d: id %q (want %q, seen %v)", i, ep.ID, want, seen[ep.ID])
				}
				seen[ep.ID] = true
				switch ep.TerminationReason {
				case episode.TerminationEnvDone:
					if n := len(ep.Trajectories[0].Steps); n != 2 {
						t.Errorf("%s has %d steps", ep.ID, n)
					}
				case episode.TerminationError:
					errored++
					if ep.Error == "" || !strings.Contains(ep.Error, s.URL) {
						t.Errorf("%s ended without a reason naming the endpoint: %q", ep.ID, ep.Error)
					}
				default:
					t.Errorf("%s ended with %s", ep.ID, ep.TerminationReason)
				}
			}
			st := s.Stats()
			var retryable, fatal int64
			for f, n := range st.Faults {
				if isFatal(f) {
					fatal += n
				} else {
					retryable += n
				}
			}
			if st.Faults == nil || retryable+fatal == 0 {
				t.Fatalf("no fault injected in %d requests", st.Requests)
			}
			cs := c.Stats()
			// Every retryable fault costs exactly one retry; every fatal one
			// ends exactly one episode (retry_limit 1) and nothing else.
			if cs.Retries != retryable || errored != fatal || cs.Failures != fatal {
				t.Errorf("retries %d for %d retryable faults; %d errored episodes and %d failed calls for %d fatal faults",
					cs.Retries, retryable, errored, cs.Failures, fatal)
			}
			if st.Served != cs.Requests-cs.Failures {
				t.Errorf("fake served %d, client completed %d calls", st.Served, cs.Requests-cs.Failures)
			}
		})
	}
}

func isFatal(f fakevllm.Fault) bool {
	for _, x := range fakevllm.FatalFaults {
		if x == f {
			return true
		}
	}
	return false
}

// An episode that fails every run says how many times it was run, on top
// of whatever its model requests retried.
func TestEngineRetryMessageCountsRuns(t *testing.T) {
	runs := 0
	eng, err := NewEngine(factoryOf(func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
		runs++
		return nil, errors.New("server failed: gave up after 2 attempts")
	}), EngineOptions{RetryLimit: 3, NParallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	eps, err := eng.Run(context.Background(), makeTasks(1))
	if err != nil {
		t.Fatal(err)
	}
	if runs != 3 || !strings.Contains(eps[0].Error, "gave up after 2 attempts (the episode was run 3 times, workflow.retry_limit") {
		t.Errorf("runs %d, error %q", runs, eps[0].Error)
	}
}

// Engines given one Shared channel run at most cap(Shared) episodes
// between them, each within its own NParallel too, and give every place
// back; an episode waiting for a place ends with the run's context.
func TestEnginesShareABound(t *testing.T) {
	shared := make(chan struct{}, 2)
	var inFlight, peak atomic.Int64
	wf := funcWorkflow(func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer inFlight.Add(-1)
		return doneEpisode(task, id), nil
	})
	var wg sync.WaitGroup
	for range 3 {
		e, err := NewEngine(factoryOf(wf), EngineOptions{N: 4, NParallel: 4, Shared: shared})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if eps, err := e.Run(context.Background(), makeTasks(5)); err != nil || len(eps) != 20 {
				t.Errorf("%d episodes, %v", len(eps), err)
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > 2 {
		t.Errorf("%d episodes in flight across the engines, shared bound 2", p)
	}
	if len(shared) != 0 {
		t.Errorf("%d places still held", len(shared))
	}
	// A cancelled run waiting for a place ends.
	shared <- struct{}{}
	shared <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	e, _ := NewEngine(factoryOf(wf), EngineOptions{N: 1, NParallel: 1, Shared: shared})
	done := make(chan error, 1)
	go func() { _, err := e.Run(ctx, makeTasks(1)); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}
