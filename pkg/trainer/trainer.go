package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/internal/jsonline"
	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/ppo"
	"github.com/rllm-org/rllm-go/pkg/progress"
	"github.com/rllm-org/rllm-go/pkg/promserve"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/tracking"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Options are what a caller brings besides the configuration.
type Options struct {
	// Backend is the training engine, already opened; the trainer takes
	// it over and closes it. Nil opens the one backend.name names through
	// the backend registry (the program must link it, e.g. with a blank
	// import of pkg/backend/local).
	Backend backend.TrainingBackend
	// Log receives progress: one readable line per step, or one JSON
	// object per line when JSON is set. Nil discards it.
	Log  io.Writer
	JSON bool
	// TrainTasks and ValTasks, when set, replace data.train_files and
	// data.val_files (rLLM's train_dataset and val_dataset arguments).
	TrainTasks, ValTasks []episode.Task
	// NewAgent and NewEnv build a Go program's own agent and env types
	// without registering them (rLLM's agent_class and env_class).
	NewAgent func() (agent.Agent, error)
	NewEnv   func(task episode.Task) (env.Env, error)
	// Now is the clock, for timings; nil means time.Now.
	Now func() time.Time
	// Rollouts, with rollout.engine=openai, is the client of the inference
	// servers the rollouts sample from (the program builds it, checked
	// against the servers); the trainer publishes every step's weights to
	// them. APIKey authenticates those updates.
	Rollouts *rollout.Client
	APIKey   string
	// Progress shows the run's steps and each rollout phase's episodes (a
	// bar on a terminal); text lines go through its Println. Nil shows no
	// bar and prints lines to Log.
	Progress progress.Progress
	// Getenv reads the environment variables the config names (API keys);
	// nil means none.
	Getenv func(string) string
	// ReadFile reads files the config names (api_key_file); nil means
	// os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// DataSources are the Hub datasets the CLI fetched for
	// data.train_files and data.val_files (already local files in the
	// config); run.json records them.
	DataSources []DataSource
	// Tracking carries what the program read for the trackers
	// trainer.logger names (WandB and MLflow settings from WANDB_*,
	// MLFLOW_* and ~/.netrc) and, for tests, their HTTP client, clock
	// and bounds; the trainer fills in the rest (loggers, run directory,
	// names, config, console).
	Tracking tracking.Spec
}

// Trainer runs the training loop over one plan. Build it with New, run it
// with Train, release it with Close.
type Trainer struct {
	plan *Plan
	cfg  *config.Config // written to the run directory (runs.ConfigFile)
	opts Options
	now  func() time.Time

	be   backend.TrainingBackend
	ref  backend.TrainingBackend // the frozen reference policy, when a KL term needs it
	chat *swapSampler
	// openBackend opens another backend of the configured kind from a
	// checkpoint (the reference policy).
	openBackend func(ctx context.Context, weights string) (backend.TrainingBackend, error)

	train, val []episode.Task
	loader     *dataset.Loader
	totalSteps int
	step       int // the last completed training step
	savedStep  int // the step of the newest checkpoint, -1 before any
	// resumedFrom is the checkpoint directory the run resumed from ("" if
	// none); pruning never removes it (checkpoint.go).
	resumedFrom string

	ws    ppo.Workspace
	track *tracking.Set // trainer.logger's sinks (metrics.go)
	// cfgMap is the resolved config, secrets hidden, for the trackers;
	// cfgProject and cfgName are trainer.project_name and experiment_name.
	cfgMap              map[string]any
	cfgProject, cfgName string
	started             time.Time
	valTable            *tracking.Table          // the last validation's sample of episodes
	episodes            *episodeKeeper           // the episodes kept in the run directory (episodes.go)
	publisher           *rollout.WeightPublisher // rollouts on inference servers
	prom                *promserve.Metrics       // trainer.metrics_addr
	promSrv             *promserve.Server
	diag                *diagnosis
	async               *asyncRun // the rollout producer of async_training
	// best is the run's best validation (across resumes: it is saved
	// with each checkpoint); its checkpoint is written even off the
	// trainer.save_freq cadence and never pruned.
	best valRecord
	// formerBest are the steps of bests a better validation has replaced
	// since the last checkpoint: the next prune may remove them.
	formerBest []int
	// episodeSlots bound the episodes in flight across every rollout
	// phase to workflow.n_parallel_tasks: the asynchronous producer's
	// groups and a validation run at the same time.
	episodeSlots chan struct{}
	// validator runs a validation: t.validate, or a test's stand-in.
	validator func(context.Context) (map[string]float64, error)
}

// New reads the configuration into a plan (refusing what the trainer
// cannot honour), loads or generates the datasets and opens the backend.
// It does not resume: Train does, so that a failed resume is reported
// like any training error.
func New(ctx context.Context, cfg *config.Config, opts Options) (*Trainer, error) {
	plan, err := NewPlan(cfg)
	if err != nil {
		if opts.Backend != nil {
			opts.Backend.Close()
		}
		return nil, err
	}
	t := &Trainer{plan: plan, cfg: cfg, opts: opts, now: opts.Now, savedStep: -1, chat: &swapSampler{}, diag: newDiagnosis()}
	t.validator = t.validate
	t.episodeSlots = make(chan struct{}, max(1, plan.Runner.NParallel))
	t.chat.step, t.chat.remote = func() int { return t.step }, plan.Remote.Mode // step is read by swap, on the trainer's goroutine
	if t.now == nil {
		t.now = time.Now
	}
	if t.opts.Log == nil {
		t.opts.Log = io.Discard
	}
	t.plan.Workflow.Deps.NewAgent, t.plan.Workflow.Deps.NewEnv = opts.NewAgent, opts.NewEnv
	t.plan.Identity.Data = opts.DataSources
	t.cfgMap, t.cfgProject, t.cfgName = configMap(cfg.Redacted()), cfg.Trainer.ProjectName, cfg.Trainer.ExperimentName
	t.started = t.now()
	if err := t.open(ctx, cfg); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *Trainer) open(ctx context.Context, cfg *config.Config) error {
	if t.opts.Backend != nil {
		t.be = t.opts.Backend
	}
	// Check the workflow, agent and env once, before any episode runs.
	if err := t.plan.Workflow.Check(); err != nil {
		return err
	}
	var err error
	if t.train, t.val, err = loadTasks(ctx, cfg, t.opts); err != nil {
		return err
	}
	sched, err := t.plan.Schedule(t.train)
	if err != nil {
		return err
	}
	t.loader, err = dataset.NewLoader(t.train, dataset.LoaderOptions{
		BatchSize: t.plan.DrawSize, Shuffle: t.plan.Shuffle, Seed: t.plan.DataSeed, DropLast: t.plan.DropLast,
	})
	if err != nil {
		return err
	}
	t.totalSteps = sched.Steps
	t.openBackend = func(ctx context.Context, weights string) (backend.TrainingBackend, error) {
		return backend.Open(ctx, cfg, backend.OpenOptions{Weights: weights, Log: t.opts.Log, Getenv: t.opts.Getenv, ReadFile: t.opts.ReadFile})
	}
	if t.be == nil {
		if t.be, err = t.openBackend(ctx, ""); err != nil {
			return err
		}
	}
	if err := t.plan.CheckBackend(t.be.Info()); err != nil {
		return err
	}
	if err := t.plan.checkAsyncBackend(t.be); err != nil {
		return err
	}
	return t.openRemote()
}

// Close releases the backend and the metrics file.
func (t *Trainer) Close() error {
	var errs []error
	if t.promSrv != nil {
		errs = append(errs, t.promSrv.Close())
		t.promSrv = nil
	}
	if t.track != nil {
		// Train ends the trackers' runs; this only closes what a caller
		// that never trained opened.
		ctx, cancel := context.WithTimeout(context.Background(), trackFlushKilled)
		errs = append(errs, t.track.Close(ctx, tracking.Summary{Status: tracking.Failed}))
		cancel()
		t.track = nil
	}
	for _, b := range []*backend.TrainingBackend{&t.ref, &t.be} {
		if *b != nil {
			errs = append(errs, (*b).Close())
			*b = nil
		}
	}
	return errors.Join(errs...)
}

// Result sums up a run.
type Result struct {
	Steps int
	// Last holds the metrics of the last step, Val those of the last
	// validation.
	Last, Val map[string]float64
	// Checkpoint is the last checkpoint written, "" when none.
	Checkpoint string
	// BestCheckpoint is the checkpoint of the best validation, kept
	// whatever trainer.max_ckpt_to_keep prunes; "" when there was no
	// validation after a trained step.
	BestCheckpoint string
	// FirstVal holds the run's first validation (before training when
	// trainer.val_before_train), to compare Val with.
	FirstVal     map[string]float64
	firstValStep int
	best, last   valRecord
	// Warnings are the stalls and collapses the run noticed.
	Warnings []Warning
}

// Train runs the loop to trainer.total_training_steps (or total_epochs),
// resuming first when trainer.resume_mode asks for it. When ctx is
// cancelled it writes a checkpoint of the last finished step and returns
// ctx's error.
func (t *Trainer) Train(ctx context.Context) (*Result, error) {
	res, err := t.run(ctx)
	t.finishTracking(ctx, res, err)
	return res, err
}

func (t *Trainer) run(ctx context.Context) (*Result, error) {
	res := &Result{}
	if err := t.start(ctx); err != nil {
		return nil, err
	}
	for _, v := range t.track.Kept() {
		res.noteVal(v.Step, v.Metrics) // a resumed run's summary starts where the run did
	}
	res.keepBest(t.best) // the checkpoint's own record, when metrics.jsonl is off
	t.best = res.best
	defer t.stopAsync()
	if t.plan.Cadence.ValOnly || (t.plan.Cadence.ValBeforeTrain && t.step == 0) {
		if len(t.val) > 0 {
			v, err := t.validator(ctx)
			if err != nil {
				return res, t.stopped(ctx, res, err)
			}
			res.Val = v
			t.record(t.step, v, tracking.KindValidation)
			t.diagnose(v, res)
		}
	}
	if t.plan.Cadence.ValOnly {
		res.Steps = t.step
		return res, nil
	}
	if t.step >= t.totalSteps {
		return t.complete(res), nil
	}
	steps := t.progress().Start("train", "steps", int64(t.totalSteps-t.step))
	defer steps.Done()
	for t.step < t.totalSteps {
		sent := new(atomic.Bool)
		m, err := t.trainStep(context.WithValue(ctx, optimSentKey{}, sent))
		if err != nil {
			if sent.Load() {
				err = &unfinishedStepError{step: t.step + 1, err: err}
			}
			return res, t.stopped(ctx, res, fmt.Errorf("step %d: %w", t.step+1, err))
		}
		t.step++
		res.Steps, res.Last = t.step, m
		if ctx.Err() != nil {
			// Interrupted after the step's optimizer call was sent: the
			// server applied it, so the step is kept and checkpointed as
			// done (commitStep), never trained again on resume.
			t.record(t.step, m, tracking.KindStep)
			return res, t.stopped(ctx, res, ctx.Err())
		}
		published := t.now()
		if err := t.publish(ctx); err != nil {
			err = fmt.Errorf("publishing the weights of step %d: %w", t.step, err)
			t.record(t.step, m, tracking.KindStep) // the step trained (its checkpoint follows): keep its record
			if ctx.Err() == nil {
				// Keep the step, so a fixed server resumes from here.
				if dir, cerr := t.checkpoint(ctx); cerr == nil {
					res.Checkpoint = dir
					t.logf("checkpoint %s written before stopping", dir)
				}
			}
			return res, t.stopped(ctx, res, err)
		}
		m["timing_s/publish"] = t.now().Sub(published).Seconds()
		if t.validateNow() {
			v, err := t.validator(ctx)
			if err != nil {
				t.record(t.step, m, tracking.KindStep) // the step is done; its record must not be lost
				return res, t.stopped(ctx, res, err)
			}
			res.Val = v
			merge(m, v)
		}
		t.record(t.step, m, tracking.KindStep) // and the console's step line
		t.diagnose(m, res)
		t.observe(m)
		steps.Add(1)
		steps.Describe(fmt.Sprintf("reward %.3f", m["critic/score/mean"]))
		f := t.plan.Cadence.SaveFreq
		onCadence := f > 0 && t.step%f == 0
		newBest := t.best.seen && t.best.step == t.step // kept as Hugging Face's load_best_model_at_end keeps it
		if (onCadence || newBest) && t.step < t.totalSteps {
			if res.Checkpoint, err = t.checkpoint(ctx); err != nil {
				return res, err
			}
		}
	}
	var err error
	if res.Checkpoint, err = t.checkpoint(ctx); err != nil {
		return res, err
	}
	res.Steps = t.step
	if t.best.seen && t.best.step > 0 {
		if dir := stepDir(t.plan.Dir, t.best.step); dirExists(dir) {
			res.BestCheckpoint = dir
		}
	}
	steps.Done() // the bar goes before the last lines
	t.logf("done: %d steps; checkpoint %s", t.step, res.Checkpoint)
	if line, ok := res.valSummary(); ok {
		t.logf("%s", line)
	}
	return res, nil
}

// start resumes or begins a run: the metrics file, the warm-up of a fresh
// embedded policy, and the first published weights.
func (t *Trainer) start(ctx context.Context) error {
	if err := t.checkPromptsFit(ctx); err != nil {
		return err
	}
	for _, n := range t.plan.Notes {
		t.logf("note: %s", n)
	}
	resumed, err := t.resume(ctx)
	if err != nil {
		return err
	}
	if !resumed {
		// A fresh run would overwrite the metrics and, step by step, the
		// checkpoints of the run already there.
		if _, err := os.Stat(filepath.Join(t.plan.Dir, latestFile)); err == nil {
			return usererr.Errorf("trainer.default_local_dir: %s already holds a run; resume it (trainer.resume_mode=auto), pick another trainer.experiment_name, or remove the directory", t.plan.Dir)
		}
		if err := os.MkdirAll(t.plan.Dir, atomicfile.DirMode); err != nil {
			return err
		}
		if err := recordRun(t.plan.Dir, t.plan.Identity); err != nil {
			return err
		}
	}
	resumedAt := -1
	if resumed {
		resumedAt = t.step
	}
	if err := t.openTracking(ctx, resumedAt); err != nil {
		return err
	}
	if err := t.openEpisodes(resumedAt); err != nil {
		return err
	}
	if err := recordConfig(t.plan.Dir, t.cfg, t.totalSteps); err != nil {
		return err
	}
	if addr := t.plan.Cadence.MetricsAddr; addr != "" {
		t.prom = promserve.New()
		if t.promSrv, err = promserve.Start(ctx, addr, t.prom.Handler()); err != nil {
			return err
		}
		t.prom.SetTotalSteps(t.totalSteps)
		t.logf("Prometheus metrics on http://%s/metrics", t.promSrv.Addr())
	}
	if !resumed && !t.plan.Cadence.ValOnly && t.plan.Warmup.Steps > 0 {
		if err := t.warmup(ctx); err != nil {
			return err
		}
	}
	if !t.plan.Cadence.ValOnly {
		if err := t.openReference(ctx, resumed); err != nil {
			return err
		}
	}
	if err := t.publish(ctx); err != nil {
		return err
	}
	if !t.plan.Cadence.ValOnly && t.step < t.totalSteps {
		perStep := t.plan.BatchSize
		if t.plan.Async.Enabled {
			perStep = t.plan.Async.GroupsPerStep()
		}
		t.logf("training %d steps (%d tasks, %d per step, %d episodes each) on backend %s with %s; checkpoints in %s",
			t.totalSteps-t.step, len(t.train), perStep, t.plan.Train.N, t.plan.Backend, t.plan.Advantage.Estimators.Default, t.plan.Dir)
	}
	if len(t.val) == 0 {
		t.logf("no validation: data.val_files is empty and the env generates no tasks")
	}
	// The trackers' auth checks ran beside the warm-up: a refused key
	// stops the run here, before it trains.
	return t.track.Ready(ctx)
}

// progress is the progress display (none when the caller gave none).
func (t *Trainer) progress() progress.Progress {
	if t.opts.Progress == nil {
		return progress.Nop
	}
	return t.opts.Progress
}

// phase counts the finished episodes of one rollout phase on the
// progress display; call done when the phase ends.
func (t *Trainer) phase(name string, episodes int) (onEvent func(rollout.Event), done func()) {
	c := t.progress().Start(name, "episodes", int64(episodes))
	return func(ev rollout.Event) {
		if ev.Kind == rollout.EventFinished || ev.Kind == rollout.EventFailed {
			c.Add(1)
		}
	}, c.Done
}

// observe feeds a step's metrics to the Prometheus endpoint, if any.
func (t *Trainer) observe(m map[string]float64) {
	if t.prom == nil {
		return
	}
	t.prom.ObserveStep(t.step, m)
	t.prom.AddEpisodes(int(m["rollout/episodes"]), int(m["rollout/response_tokens"]))
	t.prom.AddError(promserve.ErrorEpisode, int(m["rollout/errors"]))
	t.prom.AddError(promserve.ErrorRetry, int(m["rollout/retries"]))
}

// diagnose watches the step's (or validation's) metrics for a stall or
// collapse and reports each new one: one line on the log and an event in
// metrics.jsonl.
func (t *Trainer) diagnose(m map[string]float64, res *Result) {
	res.noteVal(t.step, m)
	if t.best.seen && res.best != t.best {
		t.formerBest = append(t.formerBest, t.best.step)
	}
	t.best = res.best
	for _, w := range t.diag.observe(t.step, m) {
		res.Warnings = append(res.Warnings, w)
		e := tracking.Event{Step: w.Step, Time: t.now(), Kind: w.Kind, Message: w.Message}
		t.track.Event(e) // metrics.jsonl, W&B's console log
		if t.opts.JSON {
			t.opts.Log.Write(tracking.EventLine(e))
		} else {
			t.say(fmt.Sprintf("warning: step %d: %s", w.Step, w.Message))
		}
	}
}

func (t *Trainer) validateNow() bool {
	f := t.plan.Cadence.TestFreq
	return f > 0 && len(t.val) > 0 && (t.step%f == 0 || t.step == t.totalSteps)
}

// stopped ends the run after an error: when ctx was cancelled it writes a
// checkpoint of the last completed step first, so Ctrl-C loses nothing
// but the step in flight.
func (t *Trainer) stopped(ctx context.Context, res *Result, err error) error {
	if ctx.Err() == nil {
		return err
	}
	cause := ctx.Err()
	var unfinished *unfinishedStepError
	if errors.As(err, &unfinished) {
		// Part of the step is on the service's weights: saving them would
		// label step t a state that holds some of t+1.
		resume := fmt.Sprintf("resume from the checkpoint of step %d", t.savedStep)
		if t.savedStep < 0 {
			resume = "the run has no checkpoint yet, so running it again starts over"
		}
		t.logf("interrupted during step %d, whose optimizer call was sent but which could not finish (%v); its weights are not saved: %s", unfinished.step, unfinished.err, resume)
		return errors.Join(cause, err)
	}
	saveCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if t.step > 0 {
		dir, err := t.checkpoint(saveCtx)
		if err != nil {
			return errors.Join(cause, fmt.Errorf("writing the checkpoint after the interruption: %w", err))
		}
		res.Checkpoint = dir
		t.logf("interrupted after step %d; checkpoint %s (resume with the same command)", t.step, dir)
	}
	return cause
}

// publish makes the current weights the ones every new episode samples
// from; episodes in flight keep the snapshot they started with.
func (t *Trainer) publish(ctx context.Context) error {
	if t.async != nil {
		return t.async.publish(ctx, t.publishNow)
	}
	return t.publishNow(ctx)
}

func (t *Trainer) publishNow(ctx context.Context) error {
	if t.publisher != nil {
		return t.publishRemote(ctx)
	}
	snap, err := t.be.PublishSampler(ctx, fmt.Sprintf("policy-step%d", t.step)).Result(ctx)
	if err != nil {
		return err
	}
	t.chat.swap(t.be.ChatSampler(snap))
	return nil
}

// logf reports progress: a line of text, or in JSON mode an object
// {"event": "log", "message": ...} beside the per-step metric objects.
func (t *Trainer) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if t.opts.JSON {
		b, _ := jsonline.Marshal(map[string]string{"event": "log", "message": msg})
		t.opts.Log.Write(b)
		return
	}
	t.say(msg)
}

func merge(dst, src map[string]float64) {
	for k, v := range src {
		dst[k] = v
	}
}
