package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// shapingArgs are accepted by both built-in workflows (rLLM's
// workflow_args).
var shapingArgs = []registry.Arg{
	{Name: "agent_cls", Type: "string", Default: "", Doc: "registered agent (rLLM's workflow_args spelling); empty: agent.name"},
	{Name: "agent_args", Type: "map", Default: map[string]any(nil), Doc: "arguments of agent_cls; used with agent_cls"},
	{Name: "env_cls", Type: "string", Default: "", Doc: "registered env; empty: env.name"},
	{Name: "env_args", Type: "map", Default: map[string]any(nil), Doc: "arguments of env_cls; used with env_cls"},
	{Name: "gamma", Type: "float", Default: 1.0, Doc: "discount of the Monte Carlo return stored in each step"},
	{Name: "reward_bonus_coeff", Type: "float", Default: 0.0, Doc: "step-reward shaping: r_i += c·(r_i − r_{i−1})"},
}

func init() {
	Register(Definition{
		Name:        "single_turn",
		Description: "one model call: the agent answers the env's first observation and the env scores it",
		Args:        shapingArgs,
		New: func(args registry.Values, deps Deps) (Workflow, error) {
			return newAgentEnv(args, deps, 1)
		},
	})
	Register(Definition{
		Name:        "multi_turn",
		Description: "agent ⇄ env turns until the env is done or max_steps (agent.max_steps) is reached",
		Args: append([]registry.Arg{
			{Name: "max_steps", Type: "int", Default: 0, Doc: "turn budget; 0 takes agent.max_steps (default 20)"},
		}, shapingArgs...),
		New: func(args registry.Values, deps Deps) (Workflow, error) {
			steps := args.Int("max_steps")
			if steps == 0 {
				steps = deps.MaxSteps
			}
			if steps == 0 {
				steps = DefaultMaxSteps
			}
			if steps < 0 {
				return nil, &registry.ConfigError{Key: "workflow.args.max_steps", Msg: fmt.Sprintf("workflow.args.max_steps must be positive, got %d", steps)}
			}
			return newAgentEnv(args, deps, steps)
		},
	})
}

// AgentEnv is the built-in workflow: an agent and an env taking turns.
type AgentEnv struct {
	deps     Deps
	maxSteps int
	gamma    float64
	bonus    float64
	newAgent func() (agent.Agent, error)
	newEnv   func(episode.Task) (env.Env, error)
	name     string
}

func newAgentEnv(args registry.Values, deps Deps, maxSteps int) (*AgentEnv, error) {
	if deps.Sampler == nil {
		return nil, errors.New("workflow: Deps.Sampler is nil")
	}
	// rLLM's workflow mode names agent and env inside workflow_args.
	if n := args.String("agent_cls"); n != "" {
		deps.Agent = Component{Name: n, Args: args.Map("agent_args")}
	}
	if n := args.String("env_cls"); n != "" {
		deps.Env = Component{Name: n, Args: args.Map("env_args")}
	}
	w := &AgentEnv{
		deps: deps, maxSteps: maxSteps,
		gamma: args.Float("gamma"), bonus: args.Float("reward_bonus_coeff"),
		newAgent: deps.NewAgent, newEnv: deps.NewEnv, name: deps.Agent.Name,
	}
	if w.newAgent == nil {
		d, err := agent.Lookup(deps.Agent.Name)
		if err != nil {
			return nil, err
		}
		v, err := d.Resolve("agent.args", deps.Agent.Args)
		if err != nil {
			return nil, err
		}
		w.newAgent = func() (agent.Agent, error) { return d.New(v) }
	}
	if w.newEnv == nil {
		d, v, err := env.Resolve(deps.Env.Name, deps.Env.Args)
		if err != nil {
			return nil, err
		}
		w.newEnv = func(task episode.Task) (env.Env, error) { return env.Build(d, v, task) }
	}
	if w.name == "" {
		w.name = "agent"
	}
	return w, nil
}

// Run plays one episode: reset the env, then up to maxSteps turns of
// prompt → sample → action → env step.
func (w *AgentEnv) Run(ctx context.Context, task episode.Task, episodeID string) (ep *episode.Episode, err error) {
	ep = &episode.Episode{ID: episodeID, Task: task, TerminationReason: episode.TerminationUnknown}
	ag, err := w.newAgent()
	if err != nil {
		return fail(ep, nil, fmt.Errorf("building agent: %w", err))
	}
	ag.Reset()
	traj := ag.Trajectory()
	defer func() { w.finish(ep, ag, task, episodeID) }()

	e, err := w.newEnv(task)
	if err != nil {
		return fail(ep, ctx, fmt.Errorf("building env: %w", err))
	}
	defer func() {
		if cerr := e.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing env: %w", cerr)
			ep.TerminationReason, ep.Error = episode.TerminationError, err.Error()
		}
	}()
	obs, info, err := e.Reset(ctx)
	if err != nil {
		return fail(ep, ctx, fmt.Errorf("env reset: %w", err))
	}
	ag.UpdateFromEnv(obs, 0, false, info)

	for turn := 0; turn < w.maxSteps; turn++ {
		if err := ctx.Err(); err != nil {
			return fail(ep, ctx, err)
		}
		msgs := ag.Messages()
		req := sampler.Request{
			Messages:           append([]episode.Message(nil), msgs...),
			Tools:              w.deps.Tools,
			Params:             w.deps.Params,
			ChatTemplateKwargs: w.deps.ChatTemplateKwargs,
		}
		resp, err := w.deps.Sampler.Sample(ctx, req)
		if errors.Is(err, sampler.ErrPromptTooLong) {
			// The conversation outgrew the model: an ending, not a failure.
			ep.TerminationReason = episode.TerminationMaxPromptLength
			return ep, nil
		}
		if err != nil {
			return fail(ep, ctx, fmt.Errorf("sampling turn %d: %w", turn+1, err))
		}
		before := len(traj.Steps)
		action := ag.UpdateFromModel(resp)
		traj = ag.Trajectory()
		if len(traj.Steps) == before {
			// The agent kept no step of its own; record one for it.
			traj.Steps = append(traj.Steps, episode.Step{
				ChatCompletions: append(append([]episode.Message(nil), msgs...), episode.Message{Role: "assistant", Content: resp.Text, Reasoning: resp.Reasoning, ToolCalls: resp.ToolCalls}),
				Thought:         resp.Reasoning,
				ModelResponse:   resp.Text,
				Action:          action,
			})
		}
		st := &traj.Steps[len(traj.Steps)-1]
		recordSample(st, resp)
		if st.Observation == nil {
			st.Observation = obs
		}

		res, err := e.Step(ctx, action)
		if err != nil {
			return fail(ep, ctx, fmt.Errorf("env step %d: %w", turn+1, err))
		}
		ag.UpdateFromEnv(res.Observation, res.Reward, res.Done, res.Info)
		traj = ag.Trajectory()
		st = &traj.Steps[len(traj.Steps)-1]
		st.Reward, st.Done = res.Reward, res.Done
		if len(res.Info) > 0 {
			if st.Info == nil {
				st.Info = map[string]any{}
			}
			for k, v := range res.Info {
				st.Info[k] = v
			}
		}
		obs = res.Observation
		switch {
		case resp.FinishReason == "length":
			ep.TerminationReason = episode.TerminationMaxResponseLength
			return ep, nil
		case res.Done:
			ep.TerminationReason = episode.TerminationEnvDone
			return ep, nil
		}
	}
	ep.TerminationReason = episode.TerminationMaxTurns
	return ep, nil
}

// recordSample copies the token bookkeeping of one model call into its
// step: every sampled token is trained on (loss mask 1).
func recordSample(st *episode.Step, resp sampler.Response) {
	st.PromptIDs = resp.PromptIDs
	st.ResponseIDs = resp.CompletionIDs
	st.Logprobs = resp.Logprobs
	st.FinishReason = resp.FinishReason
	if len(resp.CompletionIDs) > 0 {
		st.LossMask = make([]int8, len(resp.CompletionIDs))
		for i := range st.LossMask {
			st.LossMask[i] = 1
		}
	}
}

// finish attaches the trajectory, its reward (the sum of raw step
// rewards, as rLLM computes it), correctness and the shaped returns.
func (w *AgentEnv) finish(ep *episode.Episode, ag agent.Agent, task episode.Task, episodeID string) {
	traj := *ag.Trajectory()
	traj.Steps = append([]episode.Step(nil), traj.Steps...)
	if traj.ID == "" {
		traj.ID = episodeID
	}
	if traj.Name == "" {
		traj.Name = w.name
	}
	if traj.Task == nil {
		traj.Task = task
	}
	total := 0.0
	for _, s := range traj.Steps {
		total += s.Reward
	}
	traj.Reward = total
	if err := ShapeRewards(traj.Steps, w.bonus, w.gamma); err != nil {
		ep.TerminationReason, ep.Error = episode.TerminationError, "step rewards: "+err.Error()
	}
	ep.Trajectories = []episode.Trajectory{traj}
	ep.IsCorrect = total > 0
	if n := len(traj.Steps); n > 0 {
		if c, ok := traj.Steps[n-1].Info["is_correct"].(bool); ok {
			ep.IsCorrect = c
		}
	}
	if ep.TerminationReason == episode.TerminationError || ep.TerminationReason == episode.TerminationTimeout {
		ep.IsCorrect = false
	}
	if ep.Metrics == nil {
		ep.Metrics = map[string]float64{}
	}
	ep.Metrics["steps"] = float64(len(traj.Steps))
	ep.Metrics["reward"] = total
}

// fail marks ep as ended by err: timeout when the context's deadline
// passed, error otherwise.
func fail(ep *episode.Episode, ctx context.Context, err error) (*episode.Episode, error) {
	ep.TerminationReason = episode.TerminationError
	if ctx != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		ep.TerminationReason = episode.TerminationTimeout
	}
	ep.Error = err.Error()
	return ep, err
}
