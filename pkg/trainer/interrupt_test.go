package trainer

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/faketinker"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker"
	"github.com/rllm-org/rllm-go/pkg/runs"
)

// Ctrl-C at every point of a run against a Tinker service that takes its
// time to train, then resume to the end: the weights of the final
// checkpoint hold exactly one optimizer step per training step, whatever
// was in flight when the run stopped (an optim_step already sent is
// applied by the server: its step must be kept, never trained again).
func TestInterruptNeverAppliesAStepTwice(t *testing.T) {
	const key = "tml-interrupt-test-key"
	const steps = 3
	var cancelAt atomic.Int64 // the n-th training request cancels the run; 0: never
	var seen atomic.Int64
	var mu sync.Mutex
	var names []string // the training requests of the last run, in order
	var cancel atomic.Pointer[context.CancelFunc]
	training := map[string]bool{"forward": true, "forward_backward": true, "optim_step": true, "save_weights": true,
		"save_weights_for_sampler": true, "load_weights": true, "asample": true}
	srv, err := faketinker.New(faketinker.Options{APIKey: key, PollWait: 20 * time.Millisecond, TrainingLatency: 2 * time.Millisecond,
		OnRequest: func(name string) {
			if !training[name] {
				return
			}
			mu.Lock()
			names = append(names, name)
			mu.Unlock()
			if n := seen.Add(1); n == cancelAt.Load() {
				if c := cancel.Load(); c != nil {
					(*c)()
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	getenv := func(string) string { return key }
	// run trains (or resumes) the run in dir to `steps`, cancelled at the
	// n-th training request; it returns the optimizer steps the model
	// holds at the end and whether the run finished.
	run := func(dir string, n int64) (int, bool) {
		c := smallConfig(t, "backend.name=tinker", "backend.tinker.base_url="+srv.URL, "backend.tinker.base_model="+tinker.EmbeddedModel,
			"backend.tinker.lora_rank=2", "trainer.default_local_dir="+filepath.ToSlash(dir), "actor.optim.lr=0.001",
			fmt.Sprintf("trainer.total_training_steps=%d", steps))
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		seen.Store(0)
		mu.Lock()
		names = nil
		mu.Unlock()
		cancelAt.Store(n)
		cancel.Store(&stop)
		defer cancel.Store(nil)
		tr, err := New(ctx, c, Options{Getenv: getenv})
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return -1, false
			}
			t.Fatal(err)
		}
		defer tr.Close()
		_, err = tr.Train(ctx)
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled at request %d: %v", n, err)
		}
		got, serr := srv.Model(tr.be.(*tinker.Backend).ModelID()).Step(context.Background())
		if serr != nil {
			t.Fatal(serr)
		}
		return got, err == nil
	}
	// An uninterrupted run: how many optimizer steps a training step
	// takes, and how many training requests the run sends.
	perRun, done := run(t.TempDir(), 0)
	if !done || perRun%steps != 0 || perRun == 0 {
		t.Fatalf("an uninterrupted run holds %d optimizer steps", perRun)
	}
	requests := seen.Load()
	mu.Lock()
	order := slices.Clone(names)
	mu.Unlock()
	samples := 0
	for i, name := range order {
		n := int64(i + 1)
		if name == "asample" {
			// Sampling changes no weights: a few of its points suffice.
			if samples++; samples%16 != 1 {
				continue
			}
		}
		if testing.Short() && name != "optim_step" {
			continue
		}
		dir := t.TempDir()
		if _, done := run(dir, n); done {
			continue // the cancel came too late to matter
		}
		got, done := run(dir, 0)
		if !done {
			t.Fatalf("cancelled at request %d: the resumed run did not finish", n)
		}
		if got != perRun {
			t.Errorf("cancelled at training request %d of %d (%s): the final weights hold %d optimizer steps, want %d", n, requests, name, got, perRun)
		}
	}
}

// Ctrl-C after a step's optim_step was sent, on a service that never
// answers it: the run still stops (commitGrace), and writes no checkpoint
// of weights that hold part of the step; the last checkpoint stays the
// one to resume from.
func TestInterruptWithAHungOptimizerStepIsBounded(t *testing.T) {
	defer func(g time.Duration) { commitGrace = g }(commitGrace)
	commitGrace = 500 * time.Millisecond
	const key = "tml-interrupt-test-key"
	var optims atomic.Int32
	var cancel atomic.Pointer[context.CancelFunc]
	var srv *faketinker.Server
	srv, err := faketinker.New(faketinker.Options{APIKey: key, PollWait: 20 * time.Millisecond,
		OnRequest: func(name string) {
			if name == "optim_step" && optims.Add(1) == 2 {
				srv.Inject(faketinker.Fault{Path: "retrieve_future", ForPath: "optim_step", Kind: faketinker.FaultHang, Times: 1 << 20})
				if c := cancel.Load(); c != nil {
					(*c)()
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := smallConfig(t, "backend.name=tinker", "backend.tinker.base_url="+srv.URL, "backend.tinker.base_model="+tinker.EmbeddedModel,
		"backend.tinker.lora_rank=2", "backend.tinker.request_timeout_s=0.3", "trainer.save_freq=1", "trainer.total_training_steps=3")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	cancel.Store(&stop)
	tr, err := New(ctx, c, Options{Getenv: func(string) string { return key }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := tr.Train(ctx)
		tr.Close()
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the interrupted run is still waiting for an optimizer step the service never answers")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	steps, err := runs.Steps(c.Trainer.DefaultLocalDir)
	if err != nil || !slices.Equal(steps, []int{1}) {
		t.Fatalf("checkpoints %v (%v); want only step 1's", steps, err)
	}
}

// Ctrl-C while the service has accepted a step's forward_backward and
// never answers it: the first Ctrl-C ends the run at once (nothing of
// the step is applied before its optimizer call, which the service runs
// only after the forward_backward), not after commitGrace (5 minutes; a
// second Ctrl-C was the only way out). The step is abandoned: its
// weights are not saved, the log says why and where to resume, and the
// run resumes from there to its end.
func TestInterruptWithAnUnansweredForwardBackward(t *testing.T) {
	const key = "tml-interrupt-test-key"
	var armed atomic.Bool
	var hung atomic.Bool
	var cancel atomic.Pointer[context.CancelFunc]
	var srv *faketinker.Server
	srv, err := faketinker.New(faketinker.Options{APIKey: key, PollWait: 20 * time.Millisecond,
		OnRequest: func(name string) {
			switch {
			case name == "save_weights":
				armed.Store(true) // step 1 is checkpointed
			case name == "forward_backward" && armed.Load() && !hung.Swap(true):
				srv.Inject(faketinker.Fault{Path: "retrieve_future", ForPath: "forward_backward", Kind: faketinker.FaultHang, Times: 1 << 20})
				if c := cancel.Load(); c != nil {
					(*c)()
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := smallConfig(t, "backend.name=tinker", "backend.tinker.base_url="+srv.URL, "backend.tinker.base_model="+tinker.EmbeddedModel,
		"backend.tinker.lora_rank=2", "trainer.save_freq=1", "trainer.total_training_steps=3")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	cancel.Store(&stop)
	var log syncBuilder
	tr, err := New(ctx, c, Options{Getenv: func(string) string { return key }, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := tr.Train(ctx)
		tr.Close()
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute): // commitGrace is 5 minutes
		t.Fatal("the interrupted run is still waiting for a forward_backward the service never answers")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	steps, err := runs.Steps(c.Trainer.DefaultLocalDir)
	if err != nil || !slices.Equal(steps, []int{1}) {
		t.Fatalf("checkpoints %v (%v); want only step 1's", steps, err)
	}
	for _, want := range []string{"interrupted during step 2", "had not answered forward_backward", "resume from the checkpoint of step 1"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
	srv.ClearFaults()
	second, err := New(context.Background(), c, Options{Getenv: func(string) string { return key }})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	res, err := second.Train(context.Background())
	if err != nil || res.Steps != 3 || second.resumedFrom == "" {
		t.Fatalf("the resumed run: %v, steps %v, resumed from %q", err, res, second.resumedFrom)
	}
}

// syncBuilder is a strings.Builder safe for the trainer's goroutines.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
