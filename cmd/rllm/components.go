package main

import (
	"github.com/rllm-org/rllm-go/pkg/config"
	_ "github.com/rllm-org/rllm-go/pkg/tasks" // registers the built-in agents, envs, rewards and workflows
	"github.com/rllm-org/rllm-go/pkg/workflow"

	_ "github.com/rllm-org/rllm-go/pkg/backend/local" // registers backend.name=local
)

// checkComponents resolves the configured workflow, agent and env against
// their registries, so a misspelt name or argument is a configuration
// error (exit code 2) before anything runs.
func checkComponents(c *config.Config) error {
	return workflow.SpecFromConfig(c).Check()
}
