package main

import (
	"context"
	"errors"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	_ "github.com/rllm-org/rllm-go/pkg/tasks" // registers the built-in agents, envs, rewards and workflows
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// workflowSpec maps the agent, env and workflow sections of the config
// onto pkg/workflow: the workflow's name, its args and its deps (without
// a sampler, which the caller supplies).
func workflowSpec(c *config.Config) (name string, args map[string]any, deps workflow.Deps) {
	name = c.Workflow.Name
	if name == "" {
		name = workflow.DefaultName(c.Env.Name)
	}
	deps = workflow.Deps{
		Params: sampler.Params{
			Temperature: c.Rollout.Temperature,
			TopP:        c.Rollout.TopP,
			TopK:        c.Rollout.TopK,
			MaxTokens:   c.EffectiveMaxTokens(),
			Stop:        c.Rollout.Stop,
		},
		ChatTemplateKwargs: c.Rollout.ChatTemplateKwargs,
		MaxSteps:           c.Agent.MaxSteps,
	}
	if c.Rollout.Seed != nil {
		seed := int64(*c.Rollout.Seed)
		deps.Params.Seed = &seed
	}
	if !c.Workflow.UseWorkflow {
		deps.Agent = workflow.Component{Name: c.Agent.Name, Args: c.Agent.Args}
		deps.Env = workflow.Component{Name: c.Env.Name, Args: c.Env.Args}
	}
	return name, c.Workflow.Args, deps
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
