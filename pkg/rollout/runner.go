package rollout

import (
	"time"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// RunnerOptions are how every rollout phase runs episodes: training,
// validation, rllm eval and the warm-up all read them from the same keys,
// so they retry, bound concurrency and time out alike.
type RunnerOptions struct {
	// NParallel bounds the episodes in flight (workflow.n_parallel_tasks).
	NParallel int
	// Shared, when set, is a bound shared by every engine given it: an
	// episode runs while it holds one of its cap(Shared) places.
	Shared chan struct{}
	// RetryLimit is how many times an episode runs in all while it ends in
	// error (workflow.retry_limit, at least 1). Each of those runs may
	// itself retry a failed model request rollout.retry.max_attempts
	// times, so a server failing every request sees up to
	// RetryLimit × max_attempts requests per model call.
	RetryLimit int
	// EpisodeTimeout ends an episode as "timeout" (agent.trajectory_timeout_s).
	EpisodeTimeout time.Duration
	// SeedSalt varies the per-request seeds between phases and steps
	// (sampler.Seeded); requests are seeded only when their params carry
	// a seed.
	SeedSalt uint64
	// TaskIndexBase is added to a task's index when naming a task that
	// has no dataset id, so a phase that runs its batch's tasks one at a
	// time (the asynchronous trainer) names them as a whole-batch run does.
	TaskIndexBase int
	// Stall, when set, is told every StallAfter while episodes run and
	// none ends (EngineOptions.OnStall).
	Stall      func(string)
	StallAfter time.Duration
}

// RunnerOptionsFromConfig reads the runner's keys.
func RunnerOptionsFromConfig(c *config.Config) RunnerOptions {
	o := RunnerOptions{NParallel: c.Workflow.NParallelTasks, RetryLimit: max(c.Workflow.RetryLimit, 1)}
	if o.NParallel <= 0 {
		o.NParallel = 256
	}
	if s := c.Agent.TrajectoryTimeout; s != nil {
		o.EpisodeTimeout = time.Duration(*s * float64(time.Second))
	}
	return o
}

// TrainParams are the sampling parameters of training rollouts (and of
// the gateway's default requests).
func TrainParams(c *config.Config) sampler.Params {
	p := sampler.Params{
		Temperature: c.Rollout.Temperature,
		TopP:        c.Rollout.TopP,
		TopK:        c.Rollout.TopK,
		MaxTokens:   c.EffectiveMaxTokens(),
		Stop:        c.Rollout.Stop,
	}
	if c.Rollout.Seed != nil {
		seed := int64(*c.Rollout.Seed)
		p.Seed = &seed
	}
	return p
}

// ValParams are the sampling parameters of validation and rllm eval
// (rollout.val_kwargs).
func ValParams(c *config.Config) sampler.Params {
	p := TrainParams(c)
	p.Temperature = c.Rollout.ValKwargs.Temperature
	p.TopP = c.Rollout.ValKwargs.TopP
	p.TopK = c.Rollout.ValKwargs.TopK
	return p
}

// NewRunner is the one way to build an engine for a rollout phase: the
// workflows of spec sampling from smp with params, n episodes per task,
// tasks named by their dataset id. onEvent may be nil.
func NewRunner(spec workflow.Spec, smp sampler.Sampler, params sampler.Params, n int, o RunnerOptions, onEvent func(Event)) (*Engine, error) {
	if params.Seed != nil {
		smp = sampler.Seeded(smp, o.SeedSalt)
	}
	return NewEngine(func() (Workflow, error) { return spec.New(smp, params) }, EngineOptions{
		N:              n,
		NParallel:      o.NParallel,
		Shared:         o.Shared,
		RetryLimit:     o.RetryLimit,
		EpisodeTimeout: o.EpisodeTimeout,
		TaskID:         func(i int, task episode.Task) string { return TaskID(i+o.TaskIndexBase, task) },
		OnEvent:        onEvent,
		OnStall:        o.Stall,
		StallAfter:     o.StallAfter,
	})
}

// TaskID names a task by its dataset id (dataset.TaskID), else as
// DefaultTaskID does.
func TaskID(i int, task episode.Task) string {
	if id, ok := dataset.TaskID(task); ok {
		return id
	}
	return DefaultTaskID(i, task)
}
