package rollout

import (
	"fmt"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// FirstTurnEndings counts the episodes that ended abnormally before their
// first reply (max_prompt_length_exceeded, error, timeout): when most of
// a batch ends one such way, nothing was sampled and the cause is that
// ending, not the policy. The zero value is ready to use.
type FirstTurnEndings struct {
	total int
	count map[episode.TerminationReason]int
	first map[episode.TerminationReason]string // the first message of each
}

// Add counts one episode.
func (f *FirstTurnEndings) Add(ep *episode.Episode) {
	if ep == nil {
		return
	}
	f.total++
	if !endedBeforeReply(ep) {
		return
	}
	if f.count == nil {
		f.count, f.first = map[episode.TerminationReason]int{}, map[episode.TerminationReason]string{}
	}
	f.count[ep.TerminationReason]++
	if _, ok := f.first[ep.TerminationReason]; !ok || f.first[ep.TerminationReason] == "" {
		f.first[ep.TerminationReason] = ep.Error
	}
}

// endedBeforeReply reports whether ep ended abnormally with no reply
// sampled.
func endedBeforeReply(ep *episode.Episode) bool {
	switch ep.TerminationReason {
	case episode.TerminationMaxPromptLength, episode.TerminationError, episode.TerminationTimeout:
	default:
		return false
	}
	for _, tr := range ep.Trajectories {
		for _, st := range tr.Steps {
			if len(st.ResponseIDs) > 0 || st.ModelResponse != "" {
				return false
			}
		}
	}
	return true
}

// Failed reports whether an episode counts as failed in a report: it
// ended in error or timeout, or its first request was refused as longer
// than the model's context (a request the server refused is a failed
// request, whatever the episode's ending is called).
func Failed(ep *episode.Episode) bool {
	switch ep.TerminationReason {
	case episode.TerminationError, episode.TerminationTimeout:
		return true
	}
	return ep.TerminationReason == episode.TerminationMaxPromptLength && ep.Error != "" && endedBeforeReply(ep)
}

// Failed is Failed for the episode an EventFinished or EventFailed
// reports.
func (ev Event) Failed() bool {
	switch ev.Termination {
	case episode.TerminationError, episode.TerminationTimeout:
		return true
	}
	return ev.Termination == episode.TerminationMaxPromptLength && ev.Err != "" && ev.ResponseTokens == 0
}

// FirstTurnFailure is a batch most of whose episodes ended the same
// abnormal way before their first reply.
type FirstTurnFailure struct {
	Reason          episode.TerminationReason
	Episodes, Total int
	// Message is the first such episode's error: the server's own
	// message when a server answered.
	Message string
}

// Dominant returns the abnormal ending of more than half the episodes
// counted, if there is one.
func (f *FirstTurnEndings) Dominant() (FirstTurnFailure, bool) {
	for _, r := range []episode.TerminationReason{episode.TerminationMaxPromptLength, episode.TerminationError, episode.TerminationTimeout} {
		if n := f.count[r]; f.total > 0 && 2*n > f.total {
			return FirstTurnFailure{Reason: r, Episodes: n, Total: f.total, Message: f.first[r]}, true
		}
	}
	return FirstTurnFailure{}, false
}

// maxMessage bounds the server message quoted in a warning.
const maxMessage = 1000

// String is the warning: how many episodes ended how, the message, and
// the keys that change it.
func (f FirstTurnFailure) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d episodes ended %s before their first reply, so nothing was sampled", f.Episodes, f.Total, f.Reason)
	if m := strings.TrimRight(strings.TrimSpace(f.Message), "."); m != "" {
		if len(m) > maxMessage {
			m = m[:maxMessage] + "..."
		}
		fmt.Fprintf(&b, "; the first said: %s", m)
	}
	switch f.Reason {
	case episode.TerminationMaxPromptLength:
		b.WriteString(". The prompt does not fit the model's context: shorten the prompts (data.max_prompt_length filters them, the agent's system prompt adds to them) " +
			"or give the model a larger context (rllm serve and the embedded policy: backend.local.context; vLLM: --max-model-len)")
	case episode.TerminationError:
		b.WriteString(". Fix what the message names: the server (rollout.endpoints, rollout.model, rollout.api_key_env) or the agent and env (agent.name, env.name, their args); " +
			"rollout.retry.max_attempts and workflow.retry_limit set how often a failing request is tried")
	case episode.TerminationTimeout:
		b.WriteString(". Raise agent.trajectory_timeout_s or rollout.request_timeout_s, or ask for shorter replies (data.max_response_length)")
	}
	return b.String()
}
