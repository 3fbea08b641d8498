package workflow

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/tool"
)

// Spec is which workflow runs with which agent and env, read from the
// config's agent, env, workflow and rollout sections. Every rollout phase
// (training, validation, rllm eval, warm-up) builds its workflows from it.
type Spec struct {
	Name string
	Args map[string]any
	// Deps holds everything but the sampler and its parameters, which
	// each phase brings.
	Deps Deps
}

// SpecFromConfig reads the spec. rollout.disable_thinking becomes
// chat_template_kwargs.enable_thinking=false, as rLLM passes it. It also
// sets the process-wide sandbox (sandbox.*) that the code env and the
// python tool run in; the sandbox is only probed when one of them is
// built.
func SpecFromConfig(c *config.Config) Spec {
	sandbox.Configure(SandboxConfig(c))
	s := Spec{Name: c.Workflow.Name, Args: c.Workflow.Args}
	if s.Name == "" {
		s.Name = DefaultName(c.Env.Name)
	}
	kwargs := c.Rollout.ChatTemplateKwargs
	if c.Rollout.DisableThinking {
		kwargs = maps.Clone(kwargs)
		if kwargs == nil {
			kwargs = map[string]any{}
		}
		kwargs["enable_thinking"] = false
	}
	s.Deps = Deps{ChatTemplateKwargs: kwargs, MaxSteps: c.Agent.MaxSteps,
		ToolConfig: tool.Config{Builtin: c.Tools.Builtin, Args: c.Tools.Args, MCP: c.Tools.MCP, CallTimeoutS: c.Tools.CallTimeoutS}}
	if !c.Workflow.UseWorkflow {
		s.Deps.Agent = Component{Name: AgentFor(c.Agent.Name, c.Env.Name), Args: c.Agent.Args}
		s.Deps.Env = Component{Name: c.Env.Name, Args: c.Env.Args}
		// A mistake in env.args is reported where the env is resolved.
		if w, ok, err := env.WorkspacesFor(c.Env.Name, c.Env.Args); ok && err == nil {
			s.Deps.Workspaces = w
		}
	}
	return s
}

// AgentFor is the agent a config runs: agent.name when set, else the
// env's own agent (the agent registered under the env's name, as the
// built-in tasks have), else the generic chat agent.
func AgentFor(agentName, envName string) string {
	if agentName != "" {
		return agentName
	}
	if _, err := agent.Registry.Lookup(envName); err == nil {
		return envName
	}
	return "chat"
}

// String names the workflow and its agent and env.
func (s Spec) String() string {
	if s.Deps.Agent.Name == "" && s.Deps.Env.Name == "" {
		return s.Name
	}
	return fmt.Sprintf("%s (agent %s, env %s)", s.Name, s.Deps.Agent.Name, s.Deps.Env.Name)
}

// New builds one workflow sampling from smp with params.
func (s Spec) New(smp sampler.Sampler, params sampler.Params) (Workflow, error) {
	d := s.Deps
	d.Sampler, d.Params = smp, params
	return New(s.Name, s.Args, d)
}

// Check builds one workflow with a sampler that refuses to sample, so
// that names and arguments are checked before any model is loaded.
func (s Spec) Check() error {
	_, err := s.New(refusingSampler{}, sampler.Params{})
	return err
}

type refusingSampler struct{}

func (refusingSampler) Sample(context.Context, sampler.Request) (sampler.Response, error) {
	return sampler.Response{}, errors.New("workflow check: this workflow was built only to check its configuration")
}

// FreshPrompts is the agent's agent.FreshPrompter answer: why its turns'
// prompts do not extend the previous ones, or "" (they do, or the
// workflow builds its own agents, or its arguments are wrong, which
// Check reports).
func (s Spec) FreshPrompts() string {
	if s.Deps.Agent.Name == "" {
		return ""
	}
	d, v, err := agent.Resolve(s.Deps.Agent.Name, s.Deps.Agent.Args)
	if err != nil {
		return ""
	}
	a, err := d.New(v)
	if err != nil {
		return ""
	}
	if fp, ok := a.(agent.FreshPrompter); ok {
		return fp.FreshPrompts()
	}
	return ""
}
