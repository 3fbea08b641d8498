package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/ppo"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// Options are what a caller brings besides the configuration.
type Options struct {
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
}

// Trainer runs the training loop over one configuration. Build it with
// New, run it with Train, release it with Close.
type Trainer struct {
	cfg  *config.Config
	opts Options
	now  func() time.Time

	be   *local.Backend
	chat *local.ChatSampler

	train, val []episode.Task
	loader     *dataset.Loader
	totalSteps int
	step       int // the last completed training step
	savedStep  int // the step of the newest checkpoint, -1 before any

	lossCfg ppo.LossConfig
	estCfg  ppo.Config
	ws      ppo.Workspace

	dir     string
	metrics *metricsSink
}

// New checks that the trainer can honour the configuration, loads or
// generates the datasets and builds the policy. It does not resume: Train
// does, so that a failed resume is reported like any training error.
func New(ctx context.Context, cfg *config.Config, opts Options) (*Trainer, error) {
	if err := supported(cfg); err != nil {
		return nil, err
	}
	t := &Trainer{cfg: cfg, opts: opts, now: opts.Now, dir: cfg.Trainer.DefaultLocalDir, savedStep: -1}
	if t.now == nil {
		t.now = time.Now
	}
	if t.opts.Log == nil {
		t.opts.Log = io.Discard
	}
	var err error
	if t.lossCfg, err = lossConfig(cfg); err != nil {
		return nil, err
	}
	t.estCfg = estimatorConfig(cfg)
	if err := t.checkEstimators(); err != nil {
		return nil, err
	}
	if t.train, t.val, err = loadTasks(ctx, cfg, opts); err != nil {
		return nil, err
	}
	if n := cfg.Data.TrainBatchSize; cfg.Data.DropLast && n > len(t.train) {
		return nil, configErrorf("data.train_batch_size (%d) is larger than the training set (%d tasks), so there is no full batch; lower it, add tasks or set data.drop_last=false", n, len(t.train))
	}
	t.loader, err = dataset.NewLoader(t.train, dataset.LoaderOptions{
		BatchSize: cfg.Data.TrainBatchSize, Shuffle: cfg.Data.Shuffle,
		Seed: uint64(cfg.Data.Seed), DropLast: cfg.Data.DropLast,
	})
	if err != nil {
		return nil, err
	}
	t.totalSteps = cfg.Trainer.TotalEpochs * t.loader.BatchesPerEpoch()
	if s := cfg.Trainer.TotalTrainingSteps; s != nil {
		t.totalSteps = *s
	}
	if t.be, err = OpenLocal(ctx, cfg, ""); err != nil {
		return nil, err
	}
	// Check the workflow, agent and env once, before any episode runs.
	if _, err := t.newWorkflow(TrainParams(cfg))(); err != nil {
		t.be.Close()
		return nil, err
	}
	return t, nil
}

// supported refuses settings that validate as configuration but that this
// trainer cannot run yet, naming the key.
func supported(c *config.Config) error {
	switch {
	case c.Backend.Name != "local":
		return configErrorf("backend.name: the %s backend is not available in this build yet; use backend.name=local", c.Backend.Name)
	case c.Rollout.Engine != "auto":
		return configErrorf("rollout.engine: %s rollouts need servers that load the trained weights, which backend local cannot publish; use rollout.engine=auto", c.Rollout.Engine)
	case c.Actor.UseKLLoss:
		return configErrorf("actor.use_kl_loss: a KL loss needs a reference model, which the trainer does not keep yet; set actor.use_kl_loss=false")
	case c.Algorithm.UseKLInReward:
		return configErrorf("algorithm.use_kl_in_reward: needs a reference model, which the trainer does not keep yet; set it to false")
	case c.Actor.EntropyCoeff != 0:
		return configErrorf("actor.entropy_coeff: the entropy bonus needs per-token entropies, which backends do not return yet; set it to 0")
	}
	return nil
}

func lossConfig(c *config.Config) (ppo.LossConfig, error) {
	lc := ppo.DefaultLossConfig()
	kind, err := ppo.ParsePolicyLoss(c.Actor.PolicyLoss)
	if err != nil {
		return lc, err
	}
	agg, err := ppo.ParseAggMode(c.Actor.LossAggMode)
	if err != nil {
		return lc, err
	}
	lc.Loss, lc.AggMode = kind, agg
	lc.ClipRatioLow, lc.ClipRatioHigh, lc.ClipRatioC = c.Actor.ClipRatioLow, c.Actor.ClipRatioHigh, c.Actor.ClipRatioC
	if agg == ppo.AggSeqMeanTokenSumNorm {
		lc.NormLength = float64(c.Data.MaxResponseLength)
	}
	return lc, lc.Validate()
}

func estimatorConfig(c *config.Config) ppo.Config {
	ec := ppo.DefaultConfig()
	ec.NormAdvByStd = c.Algorithm.NormAdvByStdInGRPO
	ec.Gamma, ec.Lam = c.Algorithm.Gamma, c.Algorithm.Lam
	return ec
}

func (t *Trainer) checkEstimators() error {
	names := []string{t.cfg.Algorithm.AdvEstimator}
	for _, n := range t.cfg.Algorithm.AdvEstimatorByRole {
		names = append(names, n)
	}
	for _, n := range names {
		e, err := ppo.Lookup(n)
		if err != nil {
			return err
		}
		if e.Level == ppo.Token && t.cfg.Algorithm.StepwiseAdvantage.Enable {
			return configErrorf("algorithm.adv_estimator: %s works on token rewards and cannot be combined with algorithm.stepwise_advantage.enable; use an outcome estimator such as grpo", n)
		}
	}
	return nil
}

// newWorkflow returns the per-episode workflow factory for the given
// sampling parameters.
func (t *Trainer) newWorkflow(params sampler.Params) rollout.WorkflowFactory {
	name, args, deps := WorkflowSpec(t.cfg)
	deps.Params = params
	deps.NewAgent, deps.NewEnv = t.opts.NewAgent, t.opts.NewEnv
	deps.Sampler = t.sampler()
	return func() (rollout.Workflow, error) { return workflow.New(name, args, deps) }
}

// sampler is the chat sampler over the newest published weights; before
// the first publication it is a placeholder that refuses to sample.
func (t *Trainer) sampler() sampler.Sampler {
	if t.chat == nil {
		return notPublished{}
	}
	return t.chat
}

type notPublished struct{}

func (notPublished) Sample(context.Context, sampler.Request) (sampler.Response, error) {
	return sampler.Response{}, errors.New("trainer: no weights published yet")
}

// publish makes the current weights the ones every new episode samples
// from; episodes in flight keep the snapshot they started with.
func (t *Trainer) publish(ctx context.Context) error {
	snap, err := t.be.PublishSampler(ctx, fmt.Sprintf("policy-step%d", t.step)).Result(ctx)
	if err != nil {
		return err
	}
	if t.chat == nil {
		t.chat = local.NewChatSampler(snap)
	} else {
		t.chat.Swap(snap)
	}
	return nil
}

// Close releases the backend and the metrics file.
func (t *Trainer) Close() error {
	var errs []error
	if t.metrics != nil {
		errs = append(errs, t.metrics.Close())
	}
	if t.be != nil {
		errs = append(errs, t.be.Close())
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
}

// Train runs the loop to trainer.total_training_steps (or total_epochs),
// resuming first when trainer.resume_mode asks for it. When ctx is
// cancelled it writes a checkpoint and returns ctx's error.
func (t *Trainer) Train(ctx context.Context) (*Result, error) {
	res := &Result{}
	resumed, err := t.resume(ctx)
	if err != nil {
		return nil, err
	}
	if !resumed {
		// A fresh run would overwrite the metrics and, step by step, the
		// checkpoints of the run already there.
		if _, err := os.Stat(filepath.Join(t.dir, latestFile)); err == nil {
			return nil, configErrorf("trainer.default_local_dir %s already holds a run; resume it (trainer.resume_mode=auto), pick another trainer.experiment_name, or remove the directory", t.dir)
		}
	}
	if t.metrics, err = openMetrics(t.cfg, t.dir, t.opts, resumed); err != nil {
		return nil, err
	}
	if !resumed && t.cfg.Backend.Local.Weights == "" && t.cfg.Backend.Local.WarmupSteps > 0 {
		if err := t.warmup(ctx); err != nil {
			return nil, err
		}
	}
	if err := t.publish(ctx); err != nil {
		return nil, err
	}
	t.logf("training %d steps (%d tasks, %d per step, %d episodes each) on backend %s with %s; checkpoints in %s",
		t.totalSteps, len(t.train), t.cfg.Data.TrainBatchSize, t.cfg.Rollout.N, t.cfg.Backend.Name, t.cfg.Algorithm.AdvEstimator, t.dir)
	if len(t.val) == 0 {
		t.logf("no validation: data.val_files is empty and env %s generates no tasks", t.cfg.Env.Name)
	}

	validateNow := t.cfg.Trainer.ValOnly || (t.cfg.Trainer.ValBeforeTrain && t.step == 0)
	if validateNow && len(t.val) > 0 {
		if res.Val, err = t.validate(ctx); err != nil {
			return res, err
		}
		t.metrics.write(t.step, res.Val)
	}
	if t.cfg.Trainer.ValOnly {
		res.Steps = t.step
		return res, nil
	}
	for t.step < t.totalSteps {
		if err := ctx.Err(); err != nil {
			return res, t.interrupted(res, err)
		}
		m, err := t.trainStep(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return res, t.interrupted(res, ctx.Err())
			}
			return res, fmt.Errorf("step %d: %w", t.step+1, err)
		}
		t.step++
		res.Steps, res.Last = t.step, m
		if f := t.cfg.Trainer.TestFreq; f > 0 && len(t.val) > 0 && (t.step%f == 0 || t.step == t.totalSteps) {
			v, err := t.validate(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return res, t.interrupted(res, ctx.Err())
				}
				return res, err
			}
			res.Val = v
			for k, x := range v {
				m[k] = x
			}
		}
		t.metrics.write(t.step, m)
		t.printStep(m)
		if f := t.cfg.Trainer.SaveFreq; f > 0 && t.step%f == 0 && t.step < t.totalSteps {
			if res.Checkpoint, err = t.checkpoint(ctx); err != nil {
				return res, err
			}
		}
	}
	if res.Checkpoint, err = t.checkpoint(ctx); err != nil {
		return res, err
	}
	res.Steps = t.step
	t.logf("done: %d steps; checkpoint %s", t.step, res.Checkpoint)
	return res, nil
}

// interrupted writes a checkpoint of the last completed step before
// giving up, so Ctrl-C loses nothing but the step in flight.
func (t *Trainer) interrupted(res *Result, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if t.step > 0 {
		dir, err := t.checkpoint(ctx)
		if err != nil {
			return errors.Join(cause, fmt.Errorf("writing the checkpoint after the interruption: %w", err))
		}
		res.Checkpoint = dir
		t.logf("interrupted after step %d; checkpoint %s (resume with the same command)", t.step, dir)
	}
	return cause
}

// logf reports progress: a line of text, or in JSON mode an object
// {"event": "log", "message": ...} beside the per-step metric objects.
func (t *Trainer) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if t.opts.JSON {
		b, _ := json.Marshal(map[string]string{"event": "log", "message": msg})
		t.opts.Log.Write(append(b, '\n'))
		return
	}
	fmt.Fprintln(t.opts.Log, msg)
}

// lr is the learning rate of training step s (0-based), with
// Hugging Face's schedules as verl uses them: linear warm-up from 0 over
// the warm-up steps, then constant or cosine down to min_lr_ratio.
func (t *Trainer) lr(s int) float64 {
	base := t.cfg.EffectiveLR()
	o := t.cfg.Actor.Optim
	warm := o.WarmupSteps
	if warm < 0 {
		warm = int(o.WarmupStepsRatio * float64(t.totalSteps))
	}
	if s < warm {
		return base * float64(s) / float64(warm)
	}
	if o.LRScheduler != "cosine" || t.totalSteps <= warm {
		return base
	}
	progress := float64(s-warm) / float64(t.totalSteps-warm)
	return base * (o.MinLRRatio + (1-o.MinLRRatio)*0.5*(1+math.Cos(math.Pi*progress)))
}

func (t *Trainer) adam(lr float64) backend.AdamParams {
	o := t.cfg.Actor.Optim
	return backend.AdamParams{
		LearningRate: lr, Beta1: o.Betas[0], Beta2: o.Betas[1], Eps: o.Eps,
		WeightDecay: o.WeightDecay, GradClipNorm: o.GradClip,
	}
}

// groupOf is the task part of an episode id "task_id:rollout_index".
func groupOf(episodeID string) string {
	if i := strings.LastIndexByte(episodeID, ':'); i >= 0 {
		return episodeID[:i]
	}
	return episodeID
}
