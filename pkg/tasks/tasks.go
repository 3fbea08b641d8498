// Package tasks registers every built-in task (agents, envs and their
// reward functions): import it for its side effects, as a program imports
// a database/sql driver.
//
//	import _ "github.com/rllm-org/rllm-go/pkg/tasks"
package tasks

import (
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/rllm-org/rllm-go/pkg/episode"
	// Each registers its agent and env in init().
	"github.com/rllm-org/rllm-go/pkg/tasks/arith"
	"github.com/rllm-org/rllm-go/pkg/tasks/code"
	"github.com/rllm-org/rllm-go/pkg/tasks/countdown"
	"github.com/rllm-org/rllm-go/pkg/tasks/frozenlake"
	_ "github.com/rllm-org/rllm-go/pkg/tasks/qa"
	// Tasks in the Harbor format, in containers (env.name=task).
	"github.com/rllm-org/rllm-go/pkg/tasks/harbor"
	// Environments in other processes.
	_ "github.com/rllm-org/rllm-go/pkg/env/exec"
	_ "github.com/rllm-org/rllm-go/pkg/env/openenv"
	// Agent programs in any language, through the recording gateway.
	_ "github.com/rllm-org/rllm-go/pkg/workflow/program"
	// Coding harnesses (pkg/harness), in a sandbox reaching only their session.
	_ "github.com/rllm-org/rllm-go/pkg/workflow/harness"
	// rLLM's solver-judge workflow on countdown tasks.
	"github.com/rllm-org/rllm-go/pkg/workflow/solverjudge"
)

// Generator makes n task rows of a built-in task from a seed, with the
// task's default options. The trainer uses it when no dataset file is
// given (data.train_files empty), `rllm data generate` for its files.
type Generator func(n int, seed uint64) ([]episode.Task, error)

// generators maps an env name to its task generator.
var generators = map[string]Generator{
	"arith": func(n int, seed uint64) ([]episode.Task, error) { return arith.Generate(n, seed, arith.DefaultOptions) },
	"countdown": func(n int, seed uint64) ([]episode.Task, error) {
		return countdown.Generate(n, seed, countdown.DefaultOptions)
	},
	"frozenlake": func(n int, seed uint64) ([]episode.Task, error) {
		return frozenlake.Generate(n, seed, frozenlake.DefaultOptions)
	},
	"code": func(n int, seed uint64) ([]episode.Task, error) {
		return code.Generate(n, seed, code.DefaultGenerateOptions)
	},
}

// GeneratorFor returns the generator of the env name, if it has one.
func GeneratorFor(env string) (Generator, bool) {
	g, ok := generators[env]
	return g, ok
}

// GeneratorNames lists the envs that can generate their own tasks.
func GeneratorNames() []string {
	return slices.Sorted(maps.Keys(generators))
}

// FormatExample writes a reply in a task's answer format for a rendered
// prompt without solving the task: the embedded policy's warm-up
// (backend.local.warmup_steps) fits a fresh model to such replies so RL
// starts from a model that answers in the format and reads its prompt,
// as a pretrained model would, while the task itself is left to RL.
type FormatExample func(prompt string, rng *rand.Rand) string

// formats maps an env name to its format examples.
var formats = map[string]FormatExample{
	"arith":      arith.FormatExample,
	"countdown":  countdown.FormatExample,
	"frozenlake": frozenlake.FormatExample,
	"code":       code.FormatExample,
	"task":       harbor.FormatExample,
}

// FormatExampleFor returns the format examples of the env name, if it
// has them.
func FormatExampleFor(env string) (FormatExample, bool) {
	f, ok := formats[env]
	return f, ok
}

// workflowFormats maps a workflow name to the format examples of its
// prompts, for workflows that ask in formats of their own whatever the
// env (solver_judge's judge answers with a candidate's number).
var workflowFormats = map[string]FormatExample{
	solverjudge.Name: solverjudge.FormatExample(countdown.FormatExample),
}

// FormatExampleForWorkflow returns the format examples of the workflow
// name, if it has its own.
func FormatExampleForWorkflow(name string) (FormatExample, bool) {
	f, ok := workflowFormats[name]
	return f, ok
}
