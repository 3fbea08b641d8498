// Package evaluate runs rllm eval: the configured agent+env (or workflow)
// over every task of the dataset files, K attempts per task, scored as
// pass@1, the unbiased pass@k and the mean reward per data source.
//
// It sits beside pkg/trainer and imports downward only: the rollout runner
// and the pass@k aggregates (pkg/rollout), the episode store's writer
// (pkg/episodestore), the datasets (pkg/dataset). The command reads the
// configuration and the flags once into a Plan (NewPlan), resolves what
// needs the outside world (hf:// files, the policy, the trackers), and
// calls Prepare and Run; what it prints is its own.
package evaluate

import (
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// Inputs are what the command was given beside the configuration.
type Inputs struct {
	// Data are the dataset files as the user named them (--data), for
	// the report and its messages.
	Data []string
	// Files are the same files on this machine (hf:// URIs fetched,
	// registered dataset names resolved), in the same order.
	Files []string
	// ConfigFiles are the --config files: inputs --episodes must not
	// replace.
	ConfigFiles []string
	// N is --n, the k of pass@k; 0 means rollout.val_kwargs.n.
	N int
	// Episodes is --episodes: the file every episode is written to ("" for
	// none); Force lets it replace a file that does not hold episodes.
	Episodes string
	Force    bool
}

// Plan is one evaluation, read once from the configuration and the
// inputs.
type Plan struct {
	Inputs
	// K is the number of attempts per task.
	K int
	// Workflow runs each episode; Params are its sampling parameters
	// (rollout.val_kwargs) and Runner how episodes run (concurrency,
	// retries, the episode timeout).
	Workflow workflow.Spec
	Params   sampler.Params
	Runner   rollout.RunnerOptions
	// Rows says what a dataset row must hold.
	Rows RowRules
}

// RowRules are the checks a dataset's rows go through before anything
// runs.
type RowRules struct {
	// Scored is set for a single-turn scored env: each row needs a text
	// question and a reference answer, and a question longer than
	// MaxQuestionBytes is skipped.
	Scored  bool
	EnvName string
	// MaxPromptLength is data.max_prompt_length (tokens); a question of
	// more than MaxPromptLength × MaxBytesPerToken bytes cannot fit.
	MaxPromptLength int
}

// MaxQuestionBytes is the longest question that some tokenization of
// data.max_prompt_length tokens could hold.
func (r RowRules) MaxQuestionBytes() int { return r.MaxPromptLength * MaxBytesPerToken }

// NewPlan reads the plan of an evaluation from c and the inputs.
func NewPlan(c *config.Config, in Inputs) *Plan {
	k := in.N
	if k == 0 {
		k = c.Rollout.ValKwargs.N
	}
	return &Plan{
		Inputs:   in,
		K:        k,
		Workflow: workflow.SpecFromConfig(c),
		Params:   rollout.ValParams(c),
		Runner:   rollout.RunnerOptionsFromConfig(c),
		Rows: RowRules{
			Scored:          !c.Workflow.UseWorkflow && env.IsSingleTurn(c.Env.Name),
			EnvName:         c.Env.Name,
			MaxPromptLength: c.Data.MaxPromptLength,
		},
	}
}
