package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/episodestore"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// runMetrics trains c and returns metrics.jsonl without the timings and
// the async/ metrics (which only the asynchronous loop writes).
func runMetrics(t *testing.T, c *config.Config) []map[string]any {
	t.Helper()
	mustTrain(t, c)
	ms := readMetrics(t, c.Trainer.DefaultLocalDir)
	for _, m := range ms {
		for k := range m {
			if strings.HasPrefix(k, "timing_s/") || strings.HasPrefix(k, "async/") {
				delete(m, k)
			}
		}
	}
	return ms
}

// With staleness 0 and one optimizer step per publish the asynchronous
// loop is the synchronous one: same samples, same updates, same metrics.
func TestAsyncWithoutStalenessIsTheSynchronousRun(t *testing.T) {
	sets := []string{"trainer.total_training_steps=3", "trainer.seed=5", "trainer.test_freq=3", "trainer.val_before_train=true"}
	sync := runMetrics(t, smallConfig(t, sets...))
	async := runMetrics(t, smallConfig(t, append(sets, "async_training.enable=true", "async_training.staleness_threshold=0",
		"async_training.trigger_parameter_sync_step=1", "async_training.mini_batch_size=4")...))
	if len(sync) != len(async) {
		t.Fatalf("%d metric lines synchronously, %d asynchronously", len(sync), len(async))
	}
	for i := range sync {
		if fmt.Sprint(sync[i]) != fmt.Sprint(async[i]) {
			t.Errorf("line %d differs:\nsync  %v\nasync %v", i, sync[i], async[i])
		}
	}
}

// With staleness 1 the producer samples a step ahead: groups trained at
// most one version behind, none dropped, and the async metrics written.
func TestAsyncStalenessBoundAndMetrics(t *testing.T) {
	for _, partial := range []string{"true", "false"} {
		t.Run("partial="+partial, func(t *testing.T) {
			c := smallConfig(t, "trainer.total_training_steps=4", "async_training.enable=true", "async_training.staleness_threshold=1",
				"async_training.mini_batch_size=2", "async_training.trigger_parameter_sync_step=2", "async_training.partial_rollout="+partial,
				"algorithm.rollout_correction.bypass_mode=false", "algorithm.rollout_correction.rollout_is=token")
			tr, err := New(context.Background(), c, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if _, err := tr.Train(context.Background()); err != nil {
				t.Fatal(err)
			}
			ms := readMetrics(t, c.Trainer.DefaultLocalDir)
			if len(ms) != 4 {
				t.Fatalf("%d metric lines, want 4", len(ms))
			}
			for i, m := range ms {
				for _, k := range []string{"async/staleness_mean", "async/staleness_min", "async/staleness_max", "async/dropped_stale",
					"async/trainer_idle_ratio", "async/rollout_idle_ratio", "async/weight_version", "rollout_corr/rollout_is_mean"} {
					if _, ok := m[k]; !ok {
						t.Errorf("step %d lacks %s", i+1, k)
					}
				}
				if m["async/staleness_max"].(float64) > 1 || m["async/dropped_stale"].(float64) != 0 {
					t.Errorf("step %d: staleness max %v, dropped %v", i+1, m["async/staleness_max"], m["async/dropped_stale"])
				}
				if m["async/weight_version"].(float64) != float64(i) {
					t.Errorf("step %d trained from version %v, want %d", i+1, m["async/weight_version"], i)
				}
				if u := m["actor/updates"].(float64); u != 2 {
					t.Errorf("step %d made %v optimizer steps, want 2 (trigger_parameter_sync_step)", i+1, u)
				}
			}
			// 4 steps × 4 groups consumed: the dataloader stands past 16 tasks.
			if st := tr.loader.State(); st.Position != 16 || st.Epoch != 0 {
				t.Errorf("dataloader at %+v, want epoch 0 position 16", st)
			}
		})
	}
}

// An interrupted asynchronous run checkpoints the last published step
// with the dataloader just past the groups it trained; resuming samples
// the groups that were in flight again and trains none twice.
func TestAsyncInterruptAndResume(t *testing.T) {
	sets := []string{"trainer.total_training_steps=4", "trainer.seed=3", "async_training.enable=true", "async_training.staleness_threshold=2",
		"async_training.mini_batch_size=4"}
	c := smallConfig(t, sets...)
	tr, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr.opts.Log = &cancelAfter{lines: 2, cancel: cancel}
	tr.plan.Cadence.Loggers = append(tr.plan.Cadence.Loggers, "console")
	res, err := tr.Train(ctx)
	tr.Close()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if res.Checkpoint == "" {
		t.Fatal("no checkpoint")
	}
	b, err := os.ReadFile(filepath.Join(res.Checkpoint, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`"position": %d`, 4*res.Steps)
	if !strings.Contains(string(b), want) {
		t.Errorf("checkpoint of step %d: dataloader state %s lacks %s", res.Steps, b, want)
	}
	second, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := second.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := second.loader.State(); st.Position != 16 {
		t.Errorf("after resuming, the dataloader is at %+v, want position 16 (4 steps × 4 groups, none twice)", st)
	}
	ms := readMetrics(t, c.Trainer.DefaultLocalDir)
	if len(ms) != 4 {
		t.Errorf("%d metric lines after resuming, want 4", len(ms))
	}
}

func TestAsyncBadInputIsRefused(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		key  string
	}{
		{[]string{"async_training.staleness_threshold=-1"}, "async_training.staleness_threshold"},
		{[]string{"async_training.staleness_threshold=NaN"}, "async_training.staleness_threshold"},
		{[]string{"async_training.staleness_threshold=.inf"}, "async_training.staleness_threshold"},
		{[]string{"async_training.mini_batch_size=0"}, "async_training.mini_batch_size"},
		{[]string{"async_training.trigger_parameter_sync_step=0"}, "async_training.trigger_parameter_sync_step"},
		{[]string{"filters.rejection_sample.enable=true"}, "filters.rejection_sample.enable"},
		{[]string{"algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.bypass_mode=true"}, "algorithm.rollout_correction.rollout_is"},
		{[]string{"algorithm.rollout_correction.rollout_is=geometric", "algorithm.rollout_correction.bypass_mode=false"}, "algorithm.rollout_correction.rollout_is"},
		{[]string{"algorithm.rollout_correction.rollout_is_threshold=0.5"}, "algorithm.rollout_correction.rollout_is_threshold"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			c, err := config.FromOverrides(append([]string{"data.train_batch_size=4", "async_training.enable=true"}, tc.sets...))
			if err == nil {
				_, err = NewPlan(c)
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Errorf("error %q does not name %s", err, tc.key)
			}
			var ue *usererr.Error
			if !errors.As(err, &ue) {
				t.Errorf("not a user error: %T %v", err, err)
			}
		})
	}
}

func TestAsyncPlanQuota(t *testing.T) {
	for _, tc := range []struct {
		staleness     string
		sync, mini    string
		quota, maxLag int
	}{
		{"0", "1", "4", 4, 0},
		{"0.5", "2", "2", 6, 1},
		{"1", "1", "3", 6, 1},
		{"2.25", "1", "4", 13, 3},
	} {
		c, err := config.FromOverrides([]string{"data.train_batch_size=4", "async_training.enable=true", "async_training.staleness_threshold=" + tc.staleness,
			"async_training.trigger_parameter_sync_step=" + tc.sync, "async_training.mini_batch_size=" + tc.mini})
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPlan(c)
		if err != nil {
			t.Fatal(err)
		}
		if p.Async.Quota != tc.quota || p.Async.MaxLag != tc.maxLag {
			t.Errorf("staleness %s × %s × %s: quota %d max lag %d, want %d and %d", tc.staleness, tc.sync, tc.mini, p.Async.Quota, p.Async.MaxLag, tc.quota, tc.maxLag)
		}
		if !strings.Contains(p.String(), "off-policy:") || !strings.Contains(p.String(), "async:") {
			t.Errorf("dry run lacks the correction or async lines:\n%s", p)
		}
	}
}

func TestOldestVersion(t *testing.T) {
	ep := func(versions ...string) *episode.Episode {
		var steps []episode.Step
		for _, v := range versions {
			steps = append(steps, episode.Step{WeightVersion: v})
		}
		return &episode.Episode{Trajectories: []episode.Trajectory{{Steps: steps}}}
	}
	for _, tc := range []struct {
		start int
		eps   []*episode.Episode
		want  int
	}{
		{5, []*episode.Episode{ep("5", "6"), ep("7")}, 5},
		{5, []*episode.Episode{ep("3", "6"), nil}, 3},
		{5, []*episode.Episode{ep("", "x")}, 5}, // unknown: the start bounds it
	} {
		g := asyncGroup{start: tc.start, group: Group{Episodes: tc.eps}}
		if got := g.oldest(); got != tc.want {
			t.Errorf("oldest = %d, want %d", got, tc.want)
		}
	}
	_ = math.Inf
}

// The step line shows both sides of asynchronous training.
func TestAsyncStepLine(t *testing.T) {
	line := stepLine(3, 10, map[string]float64{"critic/score/mean": 0.5, "actor/pg_loss": 0.1, "timing_s/step": 1.2,
		"async/staleness_mean": 0.5, "async/rollout_idle_ratio": 0.1, "async/trainer_idle_ratio": 0.25, "async/dropped_stale": 2})
	for _, want := range []string{"stale 0.5", "idle roll 10% train 25%", "dropped 2"} {
		if !strings.Contains(line, want) {
			t.Errorf("step line %q lacks %q", line, want)
		}
	}
	if len(line) > 110 {
		t.Errorf("step line is %d characters: %q", len(line), line)
	}
}

// serialBackend is a backend whose samplers stop while it trains.
type serialBackend struct{ nullBackend }

func (serialBackend) SamplesWhileTraining() bool { return false }

func TestAsyncRefusesABackendThatCannotSampleWhileTraining(t *testing.T) {
	c := smallConfig(t, "async_training.enable=true")
	_, err := New(context.Background(), c, Options{Backend: serialBackend{}})
	var ue *usererr.Error
	if err == nil || !strings.Contains(err.Error(), "async_training.enable") || !errors.As(err, &ue) {
		t.Fatalf("err = %v, want a user error naming async_training.enable", err)
	}
	c = smallConfig(t)
	tr, err := New(context.Background(), c, Options{Backend: serialBackend{}})
	if err != nil {
		t.Fatalf("the synchronous loop refused it: %v", err)
	}
	tr.Close()
}

// cancelOnPublish cancels the run while it publishes a given step's
// weights, as Ctrl-C mid-publish does.
type cancelOnPublish struct {
	backend.TrainingBackend
	name   string
	cancel context.CancelFunc
}

func (c *cancelOnPublish) PublishSampler(ctx context.Context, name string) *backend.Future[backend.TokenSampler] {
	if name == c.name {
		c.cancel()
		return backend.Resolved[backend.TokenSampler](nil, ctx.Err())
	}
	return c.TrainingBackend.PublishSampler(ctx, name)
}

// Ctrl-C while an asynchronous run publishes: the step that trained is
// checkpointed with the dataloader just past its groups, the groups
// sampled on older weights and not yet trained are discarded, and the
// resumed run publishes first, then trains the rest — every step once.
func TestAsyncInterruptMidPublish(t *testing.T) {
	for _, partial := range []string{"true", "false"} {
		t.Run("partial="+partial, func(t *testing.T) {
			c := smallConfig(t, "trainer.total_training_steps=4", "async_training.enable=true", "async_training.staleness_threshold=1",
				"async_training.mini_batch_size=4", "async_training.partial_rollout="+partial)
			be, err := local.OpenConfig(context.Background(), c, "")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			tr, err := New(context.Background(), c, Options{Backend: &cancelOnPublish{TrainingBackend: be, name: "policy-step2", cancel: cancel}})
			if err != nil {
				t.Fatal(err)
			}
			res, err := tr.Train(ctx)
			tr.Close()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if res.Checkpoint == "" || !strings.HasSuffix(res.Checkpoint, "global_step_2") {
				t.Fatalf("checkpoint %q, want global_step_2 (the step that trained)", res.Checkpoint)
			}
			b, err := os.ReadFile(filepath.Join(res.Checkpoint, stateFile))
			if err != nil || !strings.Contains(string(b), `"position": 8`) {
				t.Fatalf("checkpoint state %s (%v), want the dataloader at position 8", b, err)
			}
			second, err := New(context.Background(), c, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer second.Close()
			if _, err := second.Train(context.Background()); err != nil {
				t.Fatal(err)
			}
			ms := readMetrics(t, c.Trainer.DefaultLocalDir)
			var steps []float64
			for _, m := range ms {
				steps = append(steps, m["step"].(float64))
				if m["async/staleness_max"].(float64) > 1 {
					t.Errorf("step %v trained groups %v versions stale", m["step"], m["async/staleness_max"])
				}
			}
			if fmt.Sprint(steps) != "[1 2 3 4]" {
				t.Errorf("metric steps %v, want [1 2 3 4]", steps)
			}
			if st := second.loader.State(); st.Position != 16 {
				t.Errorf("dataloader at %+v, want position 16", st)
			}
		})
	}
}

// gateEnv counts the episodes in flight (Reset to Close) and holds each
// Reset until more episodes than the bound have started or, when the
// bound holds and no more can, until the hold expires once: a run that
// breaks the bound is caught however slowly the machine runs (the
// episodes started past the bound reach Reset), and a run that keeps it
// waits once, then runs freely.
type gateEnv struct {
	g *gate
}

type gate struct {
	bound int
	hold  time.Duration

	mu       sync.Mutex
	inFlight int
	most     int
	open     chan struct{}
	opened   bool
}

func newGate(bound int) *gate {
	return &gate{bound: bound, hold: 2 * time.Second, open: make(chan struct{})}
}

func (g *gate) release() {
	if !g.opened {
		g.opened = true
		close(g.open)
	}
}

func (e gateEnv) Reset(ctx context.Context) (any, map[string]any, error) {
	g := e.g
	g.mu.Lock()
	g.inFlight++
	g.most = max(g.most, g.inFlight)
	if g.inFlight > g.bound {
		g.release()
	}
	g.mu.Unlock()
	select {
	case <-g.open:
	case <-time.After(g.hold):
		g.mu.Lock()
		g.release()
		g.mu.Unlock()
	case <-ctx.Done():
	}
	return "2+2=", nil, nil
}

func (e gateEnv) Step(context.Context, episode.Action) (env.StepResult, error) {
	return env.StepResult{Observation: "", Reward: 1, Done: true}, nil
}

func (e gateEnv) Close() error {
	e.g.mu.Lock()
	e.g.inFlight--
	e.g.mu.Unlock()
	return nil
}

// workflow.n_parallel_tasks bounds the episodes in flight in the
// asynchronous loop as in the synchronous one, also when it is below
// rollout.n (before, each group ran its rollout.n episodes at once: 8
// for a bound of 2).
func TestAsyncKeepsTheConcurrencyBound(t *testing.T) {
	for _, async := range []string{"false", "true"} {
		t.Run("async="+async, func(t *testing.T) {
			g := newGate(2)
			overrides := []string{"rollout.n=8", "workflow.n_parallel_tasks=2", "data.train_batch_size=2", "trainer.total_training_steps=1",
				"async_training.enable=" + async, "backend.local.warmup_steps=0"}
			if async == "true" { // refused without async_training.enable
				overrides = append(overrides, "async_training.staleness_threshold=1", "async_training.mini_batch_size=2")
			}
			c := smallConfig(t, overrides...)
			tr, err := New(context.Background(), c, Options{NewEnv: func(episode.Task) (env.Env, error) { return gateEnv{g}, nil }})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if _, err := tr.Train(context.Background()); err != nil {
				t.Fatal(err)
			}
			if g.most > 2 {
				t.Errorf("%d episodes in flight at once, bound 2", g.most)
			}
		})
	}
}

// The metrics of an asynchronous step's optimizer steps combine as the
// synchronous step's over the same episodes: a key written only when not
// zero counts as 0 in the part that lacks it (before, a termination
// reason of a quarter of one part's episodes and none of the other's
// read 0.25 instead of 0.125, and one skipped part of two marked the
// whole step skipped).
func TestCombinePartsKeysWrittenOnlyWhenNotZero(t *testing.T) {
	got := combineParts([]map[string]float64{
		{"batch/termination_reason/max_response_length_exceeded": 0.25, "batch/termination_reason/env_done": 0.75, "actor/pg_loss": 0.5, "rollout/episodes": 8, "actor/updates": 1},
		{"batch/termination_reason/env_done": 1, "batch/skipped": 1, "rollout/episodes": 8},
	})
	want := map[string]float64{
		"batch/termination_reason/max_response_length_exceeded": 0.125,
		"batch/termination_reason/env_done":                     0.875,
		"batch/skipped":                                         0.5,
		"actor/pg_loss":                                         0.5, // the skipped part has no loss
		"rollout/episodes":                                      16,
		"actor/updates":                                         1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("combined %v\nwant     %v", got, want)
	}
	if noLearningSignal(got) {
		t.Error("a step half of whose optimizer steps trained counts as skipped")
	}
}

// bypass_mode left null follows verl's default (decoupled) when
// rollout_is asks for weights, so rLLM's rollout_is=sequence acts; with
// no weights it stays in bypass mode.
func TestBypassModeFollowsVerl(t *testing.T) {
	for _, tc := range []struct {
		sets      []string
		decoupled bool
	}{
		{nil, false},
		{[]string{"algorithm.rollout_correction.rollout_is=sequence"}, true},
		{[]string{"algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.bypass_mode=false"}, true},
		{[]string{"algorithm.rollout_correction.bypass_mode=false"}, true},
	} {
		c, err := config.FromOverrides(tc.sets)
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPlan(c)
		if err != nil {
			t.Fatalf("%v: %v", tc.sets, err)
		}
		if p.Update.Correction.Decoupled != tc.decoupled {
			t.Errorf("%v: decoupled %t, want %t", tc.sets, p.Update.Correction.Decoupled, tc.decoupled)
		}
	}
}

// countingBackend counts forward_backward calls, their datums and
// optimizer steps.
type countingBackend struct {
	backend.TrainingBackend
	mu                sync.Mutex
	fwdBwd, optim     int
	datums            []int // per forward_backward call
	callsBeforeOptims []int // forward_backward calls between optimizer steps
	sinceOptim        int
}

func (c *countingBackend) ForwardBackward(ctx context.Context, data []backend.Datum, loss backend.Loss) *backend.Future[backend.ForwardBackwardOutput] {
	c.mu.Lock()
	c.fwdBwd++
	c.sinceOptim++
	c.datums = append(c.datums, len(data))
	c.mu.Unlock()
	return c.TrainingBackend.ForwardBackward(ctx, data, loss)
}

func (c *countingBackend) OptimStep(ctx context.Context, p backend.AdamParams) *backend.Future[backend.OptimStepOutput] {
	c.mu.Lock()
	c.optim++
	c.callsBeforeOptims = append(c.callsBeforeOptims, c.sinceOptim)
	c.sinceOptim = 0
	c.mu.Unlock()
	return c.TrainingBackend.OptimStep(ctx, p)
}

// rLLM's async mode: data.train_batch_size is the tasks the dataloader
// hands the producer at a time (rLLM asserts 1), and an optimizer step
// takes async_training.mini_batch_size task groups. 12 tasks in groups
// of 4 make 3 steps of one optimizer step each, each training the next 4
// tasks of the dataloader's order.
func TestAsyncMiniBatchLargerThanTheTrainBatch(t *testing.T) {
	c := smallConfig(t, "data.train_batch_size=1", "data.generated_train_size=12", "trainer.total_training_steps=null", "trainer.total_epochs=1",
		"async_training.enable=true", "async_training.mini_batch_size=4", "async_training.staleness_threshold=0.5",
		"async_training.trigger_parameter_sync_step=1", "async_training.partial_rollout=true", "trainer.episodes.max_groups=null",
		// Every group trains, uniform rewards or not.
		"filters.rejection_sample.filter_uniform_groups=false")
	p, err := NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Async.MiniBatch != 4 || p.Update.MiniBatchTasks != 4 || p.Async.Quota != 6 || p.DrawSize != 1 {
		t.Fatalf("plan: mini-batch %d (update %d), quota %d, draw %d; want 4, 4, 6, 1", p.Async.MiniBatch, p.Update.MiniBatchTasks, p.Async.Quota, p.DrawSize)
	}
	pre, _, err := Preflight(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	desc := pre.String()
	for _, want := range []string{"4 task groups per step (1 optimizer step of 4 groups, data.train_batch_size 1: the tasks the producer reads at a time) from 12 training tasks",
		"steps:", "3 (1 epoch of 12 tasks, 4 a step): 12 tasks drawn, 48 episodes", "update:", "4 task groups per mini-batch"} {
		if !strings.Contains(desc, want) {
			t.Errorf("the dry run lacks %q:\n%s", want, desc)
		}
	}

	be, err := backend.Open(context.Background(), c, backend.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cb := &countingBackend{TrainingBackend: be}
	var train []episode.Task
	for i := range 12 {
		train = append(train, episode.Task{"question": fmt.Sprintf("%d+%d=", i%10, (i+3)%10), "ground_truth": fmt.Sprint(i%10 + (i+3)%10), "data_source": "arith"})
	}
	tr, err := New(context.Background(), c, Options{Backend: cb, TrainTasks: train})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	res, err := tr.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 3 {
		t.Fatalf("%d steps, want 3 (12 tasks / 4 groups a step)", res.Steps)
	}
	ms := readMetrics(t, c.Trainer.DefaultLocalDir)
	if len(ms) != 3 {
		t.Fatalf("%d metric lines, want 3", len(ms))
	}
	for i, m := range ms {
		if m["actor/updates"] != 1.0 || m["rollout/episodes"] != 16.0 {
			t.Errorf("step %d: %v optimizer steps on %v episodes, want 1 on 16 (4 groups × rollout.n 4)", i+1, m["actor/updates"], m["rollout/episodes"])
		}
	}
	// One forward_backward and one optimizer step per training step, on
	// its 16 sequences (after the embedded policy's warm-up steps).
	if n := len(cb.callsBeforeOptims); n < 3 {
		t.Fatalf("%d optimizer steps, want at least 3", n)
	}
	rl := cb.callsBeforeOptims[len(cb.callsBeforeOptims)-3:]
	for i, calls := range rl {
		if calls != 1 {
			t.Errorf("optimizer step %d of RL follows %d forward_backward calls, want 1", i+1, calls)
		}
	}
	for _, d := range cb.datums[len(cb.datums)-3:] {
		if d != 16 {
			t.Errorf("a forward_backward of %d datums, want 16 (4 groups × rollout.n 4)", d)
		}
	}
	if st := tr.loader.State(); st.Position != 12 {
		t.Errorf("dataloader at %+v, want position 12", st)
	}

	// Each step trained the next 4 tasks of the dataloader's order.
	l, err := dataset.NewLoader(tr.train, dataset.LoaderOptions{BatchSize: 1, Shuffle: p.Shuffle, Seed: p.DataSeed})
	if err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= 3; step++ {
		recs, err := episodestore.ReadAll(episodestore.DataPath(p.Episodes.TrainDir, step))
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 16 {
			t.Fatalf("step %d kept %d episodes, want 16", step, len(recs))
		}
		names := map[string]bool{}
		var got []string
		for _, r := range recs {
			if !names[episodestore.TaskOf(r.ID)] {
				names[episodestore.TaskOf(r.ID)] = true
				got = append(got, fmt.Sprint(r.Task))
			}
		}
		if len(names) != 4 {
			t.Errorf("step %d: task names %v, want 4 different ones", step, names)
		}
		var want []string
		for range 4 {
			want = append(want, fmt.Sprint(l.Next().Tasks[0]))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("step %d trained\n%v\nwant the dataloader's next 4\n%v", step, got, want)
		}
	}
}
