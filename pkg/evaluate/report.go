package evaluate

import (
	"fmt"

	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// Report is what an evaluation found, and what was evaluated and how;
// rllm eval prints it as a table or, with --output json, as this object.
type Report struct {
	rollout.EvalSummary
	Model       string   `json:"model"`
	Sampler     string   `json:"sampler"`
	Data        []string `json:"data"`
	Temperature float64  `json:"temperature"`
	TopP        float64  `json:"top_p"`
	TopK        int      `json:"top_k"`
	// Failed counts the episodes that ended in error or timeout, or
	// whose first request was refused (a prompt longer than the
	// context): with a server, the calls the server table counts as
	// failed.
	Failed int `json:"failed"`
	// SkippedLong counts rows whose question is too long for
	// data.max_prompt_length by its size alone; they were not run.
	SkippedLong int          `json:"skipped_long_prompts,omitempty"`
	Client      *ClientStats `json:"client,omitempty"`
	EpisodesOut string       `json:"episodes_file,omitempty"`
	// Interrupted marks a partial report: the run was stopped (Ctrl-C)
	// and these figures cover the episodes that finished.
	Interrupted bool `json:"interrupted,omitempty"`
}

// ClientStats are the server client's counters: a run that completes
// may still have needed retries, and this is where they show.
type ClientStats struct {
	Requests int64 `json:"requests"` // model calls
	// Sent counts the HTTP requests the server saw: every attempt of
	// every call.
	Sent     int64 `json:"sent"`
	Retries  int64 `json:"retries"`
	Failures int64 `json:"failures"`
	// Refused counts the failures the server answered with an error it
	// will give again (a prompt longer than its context, a bad request).
	Refused int64 `json:"refused"`
}

func clientStats(c *rollout.Client) *ClientStats {
	if c == nil {
		return nil
	}
	st := c.Stats()
	return &ClientStats{Requests: st.Requests, Sent: st.Attempts, Retries: st.Retries, Failures: st.Failures, Refused: st.Refused}
}

// Metrics are an eval's numbers as one tracker row: pass@1, pass@k and
// mean reward overall and per data source.
func Metrics(s rollout.EvalSummary) map[string]float64 {
	m := map[string]float64{"eval/pass@1": s.PassAt1, fmt.Sprintf("eval/pass@%d", s.K): s.PassAtK, "eval/mean_reward": s.MeanReward,
		"eval/tasks": float64(s.Tasks), "eval/episodes": float64(s.Episodes), "eval/seconds": s.Seconds}
	for src, ss := range s.BySource {
		m["eval/"+src+"/pass@1"] = ss.PassAt1
		m[fmt.Sprintf("eval/%s/pass@%d", src, s.K)] = ss.PassAtK
		m["eval/"+src+"/mean_reward"] = ss.MeanReward
	}
	return m
}
