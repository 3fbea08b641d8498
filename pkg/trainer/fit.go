package trainer

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/progress"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// replyRoom is the least number of tokens a first prompt must leave the
// model to reply in for training to be worth starting.
const replyRoom = 16

// checkPromptsFit renders the first prompt of a few training tasks with
// the backend's own chat template (through a probe that samples nothing)
// and refuses to start when one leaves the model no room to reply: a run
// that would end every episode as max_prompt_length_exceeded and train
// nothing. The error names the context key and the size needed.
func (t *Trainer) checkPromptsFit(ctx context.Context) error {
	return promptsFit(ctx, t.be, t.plan, t.train, t.progress())
}

// CheckPrompts is train's prompt check for rllm validate-config: given
// the data (data.train_files, every one a file or directory here: a
// directory of tasks starts its first tasks' containers, as train's
// check does) and the embedded
// policy (backend local, rollouts from it: nothing to reach over a
// network), it loads the training tasks, opens the policy and refuses,
// with train's words, a configuration whose first prompts leave the
// model no room to reply. Other configurations (and one with MCP tool
// servers, which validate-config does not start) are checked when train
// starts.
func CheckPrompts(ctx context.Context, c *config.Config, opts Options) error {
	if c.Backend.Name != "local" || c.Rollout.Engine != "auto" || len(c.Data.TrainFiles) == 0 || len(c.Tools.MCP) > 0 {
		return nil
	}
	for _, f := range c.Data.TrainFiles {
		if _, err := os.Stat(f); err != nil {
			return nil
		}
	}
	plan, err := NewPlan(c)
	if err != nil {
		return err
	}
	plan.Workflow.Deps.NewAgent, plan.Workflow.Deps.NewEnv = opts.NewAgent, opts.NewEnv
	if err := plan.Workflow.Check(); err != nil {
		return err
	}
	train, _, err := loadTasks(ctx, c, opts)
	if err != nil {
		return err
	}
	be, err := backend.Open(ctx, c, backend.OpenOptions{Log: io.Discard, Getenv: opts.Getenv, ReadFile: opts.ReadFile})
	if err != nil {
		return err
	}
	defer be.Close()
	return promptsFit(ctx, be, plan, train, progress.Nop)
}

// promptChecks is how many training tasks' first prompts are checked.
const promptChecks = 8

func promptsFit(ctx context.Context, be backend.TrainingBackend, plan *Plan, train []episode.Task, prog progress.Progress) error {
	maxCtx := be.Info().MaxContext
	if maxCtx <= 0 || len(train) == 0 {
		return nil
	}
	n := min(len(train), promptChecks)
	counter := prog.Start("prompt check", "tasks", int64(n))
	defer counter.Done()
	lengths := make([]int, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, plan.Runner.NParallel)) // workflow.n_parallel_tasks holds here too
	for i := range n {
		// Each check is an episode of its own that ends at its first
		// model call, concurrently: a program or a harness that takes
		// seconds to start pays them once, not eight times.
		g.Go(func() error {
			ectx, stop := context.WithCancel(gctx)
			defer stop()
			probe := &promptProbe{stop: stop}
			wf, err := plan.Workflow.New(be.ChatSampler(probe), plan.Train.Params)
			if err != nil {
				return err
			}
			wf.Run(ectx, train[i], fmt.Sprintf("prompt-check:%d", i))
			lengths[i] = probe.first()
			counter.Add(1)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	longest, task := 0, -1
	for i, l := range lengths {
		if l > longest {
			longest, task = l, i
		}
	}
	if longest+replyRoom <= maxCtx {
		return nil
	}
	key := "the model's context"
	if plan.Backend == "local" {
		key = "backend.local.context"
	}
	return usererr.Errorf("%s: the first prompt of training task %d is %d tokens, which leaves the model of context %d no room to reply; set %s to at least %d (or shorten the prompts)",
		contextKey(plan.Backend), task, longest, maxCtx, key, nextPow2(longest+replyRoom*4))
}

func contextKey(backendName string) string {
	if backendName == "local" {
		return "backend.local.context"
	}
	return "backend." + backendName
}

func nextPow2(n int) int {
	p := 64
	for p < n {
		p *= 2
	}
	return p
}

// promptProbe is a token sampler that records the length of the first
// prompt it is asked to continue and ends the check's episode there: it
// cancels the episode (stop) and answers as a sampler would, with an
// empty reply that stops (the request's first stop token, the eos). The
// check never waits for what a workflow does after its first call: a
// program's answer, a verifier. Before, the probe failed the call, and a
// serving program whose thread raised on the error never answered, so
// the check waited for workflow.args.timeout_s on every task.
type promptProbe struct {
	stop   context.CancelFunc
	mu     sync.Mutex
	prompt int
	seen   bool
}

func (p *promptProbe) Name() string { return "prompt probe" }
func (p *promptProbe) Version() int { return 0 }

func (p *promptProbe) first() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.prompt
}

func (p *promptProbe) Sample(_ context.Context, req backend.SampleRequest) (backend.SampleResult, error) {
	p.mu.Lock()
	if !p.seen {
		p.prompt, p.seen = len(req.Prompt), true
	}
	p.mu.Unlock()
	if p.stop != nil {
		p.stop()
	}
	seq := backend.SampledSequence{Tokens: []int{}, Logprobs: []float64{}, StopReason: backend.StopReasonStop}
	if ids := req.Params.StopTokenIDs; len(ids) > 0 {
		seq.Tokens, seq.Logprobs = ids[:1:1], []float64{0}
	}
	n := max(req.NumSamples, 1)
	res := backend.SampleResult{Sequences: make([]backend.SampledSequence, n)}
	for i := range res.Sequences {
		res.Sequences[i] = seq
	}
	return res, nil
}
