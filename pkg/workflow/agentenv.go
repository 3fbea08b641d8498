package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/tool"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// SingleTurnParams are the arguments of single_turn, and of multi_turn
// with MultiTurnParams (rLLM's workflow_args).
type SingleTurnParams struct {
	AgentCls         string         `arg:"agent_cls" doc:"registered agent (rLLM's workflow_args spelling); empty: agent.name"`
	AgentArgs        map[string]any `arg:"agent_args" doc:"arguments of agent_cls; used with agent_cls"`
	EnvCls           string         `arg:"env_cls" doc:"registered env; empty: env.name"`
	EnvArgs          map[string]any `arg:"env_args" doc:"arguments of env_cls; used with env_cls"`
	Gamma            float64        `arg:"gamma" default:"1" range:"[0,1]" doc:"discount of the Monte Carlo return stored in each step"`
	RewardBonusCoeff float64        `arg:"reward_bonus_coeff" default:"0" doc:"step-reward shaping: r_i += c·(r_i − r_{i−1})"`
}

// MultiTurnParams are the arguments of multi_turn.
type MultiTurnParams struct {
	MaxSteps int `arg:"max_steps" default:"0" range:"[0,)" doc:"turn budget; 0 takes agent.max_steps (default 20)"`
	SingleTurnParams
}

func init() {
	Register(Definition{
		Name:        "single_turn",
		Description: "one model call: the agent answers the env's first observation and the env scores it",
		Params:      SingleTurnParams{},
		New: func(args registry.Values, deps Deps) (Workflow, error) {
			return newAgentEnv(registry.As[SingleTurnParams](args), deps, 1)
		},
	})
	Register(Definition{
		Name:        "multi_turn",
		Description: "agent ⇄ env turns until the env is done or max_steps (agent.max_steps) is reached",
		Params:      MultiTurnParams{},
		New: func(args registry.Values, deps Deps) (Workflow, error) {
			p := registry.As[MultiTurnParams](args)
			steps := p.MaxSteps
			if steps == 0 {
				steps = deps.MaxSteps
			}
			if steps <= 0 {
				steps = DefaultMaxSteps
			}
			return newAgentEnv(p.SingleTurnParams, deps, steps)
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
	// toolbox runs tool calls; maxToolRounds bounds the model calls that
	// only call tools (agent.max_steps).
	toolbox       *tool.Set
	maxToolRounds int
}

func newAgentEnv(args SingleTurnParams, deps Deps, maxSteps int) (*AgentEnv, error) {
	if deps.Sampler == nil {
		return nil, errors.New("workflow: Deps.Sampler is nil")
	}
	// rLLM's workflow mode names agent and env inside workflow_args.
	if n := args.AgentCls; n != "" {
		deps.Agent = Component{Name: n, Args: args.AgentArgs}
	}
	if n := args.EnvCls; n != "" {
		deps.Env = Component{Name: n, Args: args.EnvArgs}
	}
	// Empty names come from workflow mode (workflow.use_workflow), where
	// agent.name and env.name are not read: the workflow's args name them.
	var missing []error
	if deps.Agent.Name == "" && deps.NewAgent == nil {
		missing = append(missing, &usererr.Error{Subject: "workflow.args.agent_cls", Msg: "is empty, and with workflow.use_workflow=true the workflow's args name its agent: set workflow.args.agent_cls (rllm list agents)"})
	}
	if deps.Env.Name == "" && deps.NewEnv == nil {
		missing = append(missing, &usererr.Error{Subject: "workflow.args.env_cls", Msg: "is empty, and with workflow.use_workflow=true the workflow's args name its env: set workflow.args.env_cls (rllm list envs)"})
	}
	if len(missing) > 0 {
		return nil, errors.Join(missing...)
	}
	w := &AgentEnv{
		deps: deps, maxSteps: maxSteps,
		gamma: args.Gamma, bonus: args.RewardBonusCoeff,
		newAgent: deps.NewAgent, newEnv: deps.NewEnv, name: deps.Agent.Name,
	}
	if w.newAgent == nil {
		d, v, err := agent.Resolve(deps.Agent.Name, deps.Agent.Args)
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
	if deps.Toolbox == nil && !deps.ToolConfig.Empty() {
		set, err := tool.Shared(context.Background(), deps.ToolConfig)
		if err != nil {
			return nil, err
		}
		deps.Toolbox = set
	}
	if err := CheckWorkspaceTools(deps); err != nil {
		return nil, err
	}
	if deps.Toolbox != nil {
		w.toolbox = deps.Toolbox
		w.deps.Tools = append(append([]sampler.Tool(nil), deps.Tools...), deps.Toolbox.Specs()...)
		w.maxToolRounds = deps.MaxSteps
		if w.maxToolRounds <= 0 {
			w.maxToolRounds = DefaultMaxSteps
		}
	}
	return w, nil
}

// runTools runs the calls of one reply, in order, and returns one tool
// message per call. Bad calls are error results the model reads; only a
// broken tool (or ctx) is an error.
func (w *AgentEnv) runTools(ctx context.Context, toolbox *tool.Set, calls []episode.ToolCall) ([]episode.Message, int, error) {
	out := make([]episode.Message, 0, len(calls))
	failed := 0
	for _, c := range calls {
		var res tool.Result
		if c.Function.Name == "" {
			res = tool.Errorf("error: the tool call could not be read; write <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> with valid JSON")
		} else {
			var err error
			res, err = toolbox.Call(ctx, c.Function.Name, c.Function.Arguments)
			if err != nil {
				return nil, failed, fmt.Errorf("tool %s: %w", c.Function.Name, err)
			}
		}
		if res.IsError {
			failed++
		}
		out = append(out, episode.Message{Role: "tool", ToolCallID: c.ID, Name: c.Function.Name, Content: res.Text})
	}
	return out, failed, nil
}

// Run plays one episode: reset the env, then up to maxSteps turns of
// prompt → sample → action → env step.
func (w *AgentEnv) Run(ctx context.Context, task episode.Task, episodeID string) (ep *episode.Episode, err error) {
	ep = &episode.Episode{ID: episodeID, Task: task, TerminationReason: episode.TerminationUnknown}
	ag, err := w.newAgent()
	if err != nil {
		return Fail(ep, nil, fmt.Errorf("building agent: %w", err))
	}
	ag.Reset()
	traj := ag.Trajectory()
	defer func() { w.finish(ep, ag, task, episodeID) }()

	e, err := w.newEnv(task)
	if err != nil {
		return Fail(ep, ctx, fmt.Errorf("building env: %w", err))
	}
	defer func() {
		if cerr := e.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing env: %w", cerr)
			ep.TerminationReason, ep.Error = episode.TerminationError, err.Error()
		}
	}()
	obs, info, err := e.Reset(ctx)
	if err != nil {
		return Fail(ep, ctx, fmt.Errorf("env reset: %w", err))
	}
	ag.UpdateFromEnv(obs, 0, false, info)
	// Tools that work in a workspace (bash) work in this episode's.
	toolbox := w.toolbox
	if toolbox != nil && len(toolbox.NeedsWorkspace()) > 0 {
		if we, ok := e.(env.WorkspaceEnv); ok {
			if tw, ok := we.ToolWorkspace(); ok {
				toolbox = toolbox.Bind(tw)
			}
		}
	}

	toolRounds := 0
	for turn := 0; turn < w.maxSteps; turn++ {
		if err := ctx.Err(); err != nil {
			return Fail(ep, ctx, err)
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
			// The refusal is kept so that a report can say who refused.
			ep.TerminationReason = episode.TerminationMaxPromptLength
			ep.Error = fmt.Sprintf("sampling turn %d: %v", turn+1, err)
			return ep, nil
		}
		if err != nil {
			return Fail(ep, ctx, fmt.Errorf("sampling turn %d: %w", turn+1, err))
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
		RecordSample(st, resp)
		if st.Observation == nil {
			st.Observation = obs
		}
		if tu, ok := ag.(agent.ToolUser); ok && w.toolbox != nil && len(action.ToolCalls) > 0 {
			// A reply that calls tools: run them and ask again. The env
			// only sees the final answer; these calls do not count as
			// env turns, but are bounded by agent.max_steps.
			if resp.FinishReason == "length" {
				ep.TerminationReason = episode.TerminationMaxResponseLength
				return ep, nil
			}
			results, failed, err := w.runTools(ctx, toolbox, action.ToolCalls)
			if err != nil {
				return Fail(ep, ctx, err)
			}
			if st.Info == nil {
				st.Info = map[string]any{}
			}
			st.Info["tool_calls"], st.Info["tool_errors"] = len(action.ToolCalls), failed
			tu.UpdateFromTools(results)
			toolRounds++
			if toolRounds >= w.maxToolRounds {
				ep.TerminationReason = episode.TerminationMaxTurns
				return ep, nil
			}
			turn--
			continue
		}

		res, err := e.Step(ctx, action)
		if err != nil {
			return Fail(ep, ctx, fmt.Errorf("env step %d: %w", turn+1, err))
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

// RecordSample copies the token bookkeeping of one model call into its
// step: every sampled token is trained on (loss mask 1). Workflows that
// make their own model calls (solverjudge) record them with it.
func RecordSample(st *episode.Step, resp sampler.Response) {
	st.PromptIDs = resp.PromptIDs
	st.ResponseIDs = resp.CompletionIDs
	st.Logprobs = resp.Logprobs
	st.FinishReason = resp.FinishReason
	st.WeightVersion = resp.WeightVersion
	if st.WeightVersion == "" {
		st.WeightVersion = resp.Model
	}
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

// Fail marks ep as ended by err: timeout when the context's deadline
// passed, error otherwise, and returns ep and err.
func Fail(ep *episode.Episode, ctx context.Context, err error) (*episode.Episode, error) {
	ep.TerminationReason = episode.TerminationError
	if errors.Is(err, env.ErrTimeout) || (ctx != nil && errors.Is(ctx.Err(), context.DeadlineExceeded)) {
		ep.TerminationReason = episode.TerminationTimeout
	}
	ep.Error = err.Error()
	return ep, err
}

// CheckWorkspaceTools refuses tools that run in an episode's workspace
// (tools.builtin bash) with an env whose episodes have none: there would
// be nowhere to run them. An env a Go program builds itself (NewEnv) is
// checked when its episode starts.
func CheckWorkspaceTools(deps Deps) error {
	if deps.NewEnv != nil || env.HasWorkspace(deps.Env.Name) {
		return nil
	}
	need := tool.WorkspaceTools(deps.ToolConfig.Builtin)
	if deps.Toolbox != nil {
		need = deps.Toolbox.NeedsWorkspace()
	}
	if len(need) == 0 {
		return nil
	}
	return &usererr.Error{Subject: "tools.builtin", Msg: fmt.Sprintf("%s runs in the episode's workspace, and env %q has none", strings.Join(need, ", "), deps.Env.Name),
		Fix: "use env.name=task (a task's container), or drop " + strings.Join(need, ", ")}
}
