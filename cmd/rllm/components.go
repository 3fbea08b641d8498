package main

import (
	"errors"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/env"
	_ "github.com/rllm-org/rllm-go/pkg/tasks" // registers the built-in agents, envs, rewards and workflows
	"github.com/rllm-org/rllm-go/pkg/tool"
	"github.com/rllm-org/rllm-go/pkg/usererr"
	"github.com/rllm-org/rllm-go/pkg/workflow"

	_ "github.com/rllm-org/rllm-go/pkg/backend/local" // registers backend.name=local
)

// checkComponents resolves the configured workflow, agent and env (and
// the tools section) against their registries, so a misspelt name or
// argument is a configuration error (exit code 2) before anything runs.
// Every mistake of them is reported, each as a config error naming its
// key and where it was set. No tool server is started.
func checkComponents(ld *config.Loaded) error {
	spec := workflow.SpecFromConfig(ld.Config)
	deps := spec.Deps
	var errs []error
	if _, _, err := workflow.Registry.Resolve(spec.Name, "workflow.args", spec.Args); err != nil {
		errs = append(errs, err)
	}
	if deps.Agent.Name != "" {
		if _, _, err := agent.Resolve(deps.Agent.Name, deps.Agent.Args); err != nil {
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
	if err := workflow.CheckWorkspaceTools(deps); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		spec.Deps.ToolConfig = tool.Config{} // checked above; validating starts no server
		if err := spec.Check(); err != nil {
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
		out = append(out, config.KeyError(ue.Subject, ld.Origin(ue.Subject), withFix(ue)))
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
