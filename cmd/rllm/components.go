package main

import (
	"context"
	"errors"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/tool"
	_ "github.com/rllm-org/rllm-go/pkg/tasks"
	"github.com/rllm-org/rllm-go/pkg/trainer" // registers the built-in agents, envs, rewards and workflows
	"github.com/rllm-org/rllm-go/pkg/usererr"
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
// error (exit code 2) before anything runs. Every mistake of the three is
// reported, each as a config error naming its key and where it was set.
func checkComponents(ld *config.Loaded) error {
	c := ld.Config
	name, args, deps := workflowSpec(c)
	var errs []error
	if d, err := workflow.Lookup(name); err != nil {
		errs = append(errs, err)
	} else if _, err := d.Resolve("workflow.args", args); err != nil {
		errs = append(errs, err)
	}
	if deps.Agent.Name != "" {
		if d, err := agent.Lookup(deps.Agent.Name); err != nil {
			errs = append(errs, err)
		} else if _, err := d.Resolve("agent.args", deps.Agent.Args); err != nil {
			errs = append(errs, err)
		}
	}
	if deps.Env.Name != "" {
		if _, _, err := env.Resolve(deps.Env.Name, deps.Env.Args); err != nil {
			errs = append(errs, err)
		}
	}
	if err := tool.Check(deps.ToolConfig); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		deps.Sampler = checkOnlySampler{}
		deps.ToolConfig = tool.Config{} // checked above; validating starts no server
		if _, err := workflow.New(name, args, deps); err != nil {
			errs = append(errs, err)
		}
	}
	return withOrigins(ld, errors.Join(errs...))
}

// withOrigins turns the user errors in err that name a config key into
// config errors saying where that key was set, as config.Load reports
// its own.
func withOrigins(ld *config.Loaded, err error) error {
	if err == nil {
		return nil
	}
	var out config.Errors
	var walk func(error) bool
	walk = func(e error) bool {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				if !walk(x) {
					return false
				}
			}
			return true
		}
		var ue *usererr.Error
		if !errors.As(e, &ue) || ue.Subject == "" || ue.Error() != e.Error() {
			return false
		}
		out = append(out, &config.Error{Key: ue.Subject, Origin: ld.Origin(ue.Subject), Msg: withFix(ue)})
		return true
	}
	if !walk(err) {
		return err
	}
	return out
}

func withFix(e *usererr.Error) string {
	if e.Fix != "" {
		return e.Msg + "; " + e.Fix
	}
	return e.Msg
}
