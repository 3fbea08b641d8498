package trainer

import (
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/tool"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// WorkflowSpec maps the agent, env and workflow sections of the config
// onto pkg/workflow: the workflow's name, its args and its deps with the
// training sampling parameters (the caller sets the Sampler).
func WorkflowSpec(c *config.Config) (name string, args map[string]any, deps workflow.Deps) {
	name = c.Workflow.Name
	if name == "" {
		name = workflow.DefaultName(c.Env.Name)
	}
	deps = workflow.Deps{
		Params:             TrainParams(c),
		ChatTemplateKwargs: c.Rollout.ChatTemplateKwargs,
		MaxSteps:           c.Agent.MaxSteps,
		ToolConfig:         tool.Config{Builtin: c.Tools.Builtin, MCP: c.Tools.MCP, CallTimeoutS: c.Tools.CallTimeoutS},
	}
	if !c.Workflow.UseWorkflow {
		deps.Agent = workflow.Component{Name: c.Agent.Name, Args: c.Agent.Args}
		deps.Env = workflow.Component{Name: c.Env.Name, Args: c.Env.Args}
	}
	return name, c.Workflow.Args, deps
}

// TrainParams are the sampling parameters of training rollouts.
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

// ValParams are the sampling parameters of validation
// (rollout.val_kwargs).
func ValParams(c *config.Config) sampler.Params {
	p := TrainParams(c)
	p.Temperature = c.Rollout.ValKwargs.Temperature
	p.TopP = c.Rollout.ValKwargs.TopP
	p.TopK = c.Rollout.ValKwargs.TopK
	return p
}
