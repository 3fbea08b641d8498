package main

import (
	"context"
	"errors"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	_ "github.com/rllm-org/rllm-go/pkg/tasks"
	"github.com/rllm-org/rllm-go/pkg/trainer" // registers the built-in agents, envs, rewards and workflows
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// workflowSpec maps the agent, env and workflow sections of the config
// onto pkg/workflow (see trainer.WorkflowSpec).
func workflowSpec(c *config.Config) (name string, args map[string]any, deps workflow.Deps) {
	return trainer.WorkflowSpec(c)
}

// errNoSampler stands in for the policy while a workflow is only being
// checked: building it must not call the model.
var errNoSampler = errors.New("no sampler: the workflow is only being validated")

type checkOnlySampler struct{}

func (checkOnlySampler) Sample(context.Context, sampler.Request) (sampler.Response, error) {
	return sampler.Response{}, errNoSampler
}

// checkComponents resolves the configured workflow, agent and env against
// their registries, so a misspelt name or argument is a configuration
// error (exit code 2) before anything runs.
func checkComponents(c *config.Config) error {
	name, args, deps := workflowSpec(c)
	deps.Sampler = checkOnlySampler{}
	_, err := workflow.New(name, args, deps)
	return err
}
