// Package episode is the vocabulary every part of rllm shares: chat
// messages, actions, steps, trajectories and episodes, with the
// termination reasons rLLM uses. All of it round-trips through JSON,
// because episodes are logged, replayed and inspected by users.
package episode

import "fmt"

// Task is one dataset row as the workflow sees it (question, ground truth,
// data_source, env settings...). Keys are the dataset's column names.
type Task map[string]any

// Message is one OpenAI-style chat message.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	Reasoning  string     `json:"reasoning,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is a call the model asked for, in the OpenAI format.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // always "function" today
	Function FunctionCall `json:"function"`
}

// FunctionCall names a tool and carries its arguments as the model wrote
// them: a JSON string that is untrusted and may not parse.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Action is what an agent hands its environment after a model turn.
// Content is the action as text (an answer, a move, code); ToolCalls the
// calls to run; Fields a structured action for environments that take
// objects (OpenEnv actions such as {"code": ...}).
type Action struct {
	Content   string         `json:"content,omitempty"`
	ToolCalls []ToolCall     `json:"tool_calls,omitempty"`
	Fields    map[string]any `json:"fields,omitempty"`
}

// Step is one agent turn: the model call that produced it and what the
// environment answered.
type Step struct {
	// Token bookkeeping of the model call, exactly as sampled.
	PromptIDs   []int     `json:"prompt_ids,omitempty"`
	ResponseIDs []int     `json:"response_ids,omitempty"`
	Logprobs    []float64 `json:"logprobs,omitempty"`  // one per response token
	LossMask    []int8    `json:"loss_mask,omitempty"` // one per response token: 1 model token, 0 env/tool/user token

	ChatCompletions []Message `json:"chat_completions,omitempty"` // the messages so far, this turn's reply included
	Observation     any       `json:"observation,omitempty"`
	Thought         string    `json:"thought,omitempty"`
	Action          Action    `json:"action"`
	ModelResponse   string    `json:"model_response,omitempty"`
	FinishReason    string    `json:"finish_reason,omitempty"` // stop, length, tool_calls, abort, error
	// WeightVersion names the policy weights the reply was sampled with
	// (the server's weight version, or the model name of a versioned
	// adapter), so stale samples can be told apart.
	WeightVersion string         `json:"weight_version,omitempty"`
	Reward        float64        `json:"reward"`
	Done          bool           `json:"done"`
	Info          map[string]any `json:"info,omitempty"`
	MCReturn      float64        `json:"mc_return"`
	Advantage     float64        `json:"advantage"`
}

// Trajectory is the sequence of steps one agent (one role) took in an
// episode. Name tells roles apart in multi-agent workflows.
type Trajectory struct {
	ID     string  `json:"uid"`
	Name   string  `json:"name"`
	Task   Task    `json:"task,omitempty"`
	Steps  []Step  `json:"steps"`
	Reward float64 `json:"reward"`
}

// Episode is one rollout of one task: ID is "task_id:rollout_index".
type Episode struct {
	ID                string             `json:"id"`
	Task              Task               `json:"task,omitempty"`
	TerminationReason TerminationReason  `json:"termination_reason"`
	IsCorrect         bool               `json:"is_correct"`
	Trajectories      []Trajectory       `json:"trajectories"`
	Metrics           map[string]float64 `json:"metrics,omitempty"`
	// Error keeps the message of whatever ended the episode with
	// TerminationError, so a user can see why, and the sampler's refusal
	// of a prompt that ended it with TerminationMaxPromptLength.
	Error string `json:"error,omitempty"`
}

// EpisodeID builds the "task_id:rollout_index" identifier rLLM uses.
func EpisodeID(taskID string, rolloutIndex int) string {
	return fmt.Sprintf("%s:%d", taskID, rolloutIndex)
}

// TerminationReason says why an episode ended; the names are rLLM's.
type TerminationReason string

// The termination reasons, spelled as rLLM spells them.
const (
	TerminationMaxPromptLength   TerminationReason = "max_prompt_length_exceeded"
	TerminationMaxResponseLength TerminationReason = "max_response_length_exceeded"
	TerminationEnvDone           TerminationReason = "env_done"
	TerminationMaxTurns          TerminationReason = "max_turns_exceeded"
	TerminationTimeout           TerminationReason = "timeout"
	TerminationUnknown           TerminationReason = "unknown"
	TerminationError             TerminationReason = "error"
)

// TerminationReasons lists every reason, in rLLM's order.
var TerminationReasons = []TerminationReason{
	TerminationMaxPromptLength, TerminationMaxResponseLength, TerminationEnvDone,
	TerminationMaxTurns, TerminationTimeout, TerminationUnknown, TerminationError,
}

// Valid reports whether r is one of the known reasons.
func (r TerminationReason) Valid() bool {
	for _, known := range TerminationReasons {
		if r == known {
			return true
		}
	}
	return false
}

// UnmarshalText refuses unknown reasons so a replayed log cannot smuggle
// in a reason no filter knows about.
func (r *TerminationReason) UnmarshalText(b []byte) error {
	v := TerminationReason(b)
	if v != "" && !v.Valid() {
		return fmt.Errorf("unknown termination reason %q (known: %v)", string(b), TerminationReasons)
	}
	*r = v
	return nil
}
