package gateway

import (
	"slices"
	"strconv"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// Trajectories turns a session's traces (in arrival order) into
// trajectories of steps, one step per call, with the exact token ids the
// sampler returned: nothing is re-tokenized. A call whose prompt extends
// an earlier call's prompt plus completion continues that call's
// trajectory (the trainer lays it out as one multi-turn sequence where
// only sampled tokens train); any other call starts a trajectory of its
// own. Each trajectory is therefore token-consistent by construction and
// batch/token_mismatch stays 0. Calls without token ids are left out.
// Trajectories are named name and numbered id, id+"/1", id+"/2"...
func Trajectories(traces []Trace, id, name string) []episode.Trajectory {
	var out []episode.Trajectory
	// ends[i] is prompt+completion of the last call of trajectory i.
	var ends [][]int
	for _, t := range traces {
		if len(t.PromptIDs) == 0 || len(t.CompletionIDs) == 0 {
			continue
		}
		st := Step(t)
		k := -1
		// The most recent trajectory first: an agent loop extends its
		// last call; sub-agents interleave.
		for i := len(ends) - 1; i >= 0; i-- {
			if len(t.PromptIDs) >= len(ends[i]) && slices.Equal(t.PromptIDs[:len(ends[i])], ends[i]) {
				k = i
				break
			}
		}
		if k < 0 {
			tid := id
			if len(out) > 0 {
				tid = id + "/" + strconv.Itoa(len(out))
			}
			out = append(out, episode.Trajectory{ID: tid, Name: name})
			ends = append(ends, nil)
			k = len(out) - 1
		}
		out[k].Steps = append(out[k].Steps, st)
		ends[k] = append(append(make([]int, 0, len(t.PromptIDs)+len(t.CompletionIDs)), t.PromptIDs...), t.CompletionIDs...)
	}
	return out
}

// Step is one call as an episode step: its prompt and sampled ids, their
// logprobs, a loss mask of ones (every sampled token trains), the chat so
// far with the reply, and the weight version it was sampled with.
func Step(t Trace) episode.Step {
	st := episode.Step{
		PromptIDs:       t.PromptIDs,
		ResponseIDs:     t.CompletionIDs,
		LossMask:        make([]int8, len(t.CompletionIDs)),
		ChatCompletions: append(append([]episode.Message(nil), t.Messages...), t.Response),
		Thought:         t.Response.Reasoning,
		ModelResponse:   t.Response.Content,
		Action:          episode.Action{Content: t.Response.Content, ToolCalls: t.Response.ToolCalls},
		FinishReason:    t.FinishReason,
		WeightVersion:   t.WeightVersion,
		Info:            map[string]any{"trace_id": t.TraceID, "endpoint": t.Endpoint, "latency_ms": t.LatencyMS},
	}
	if len(t.Logprobs) == len(t.CompletionIDs) {
		st.Logprobs = t.Logprobs
	}
	for i := range st.LossMask {
		st.LossMask[i] = 1
	}
	return st
}
