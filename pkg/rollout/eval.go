package rollout

import (
	"bufio"
	"encoding/json"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// PassAtK is the unbiased pass@k estimator of the Codex paper (Chen et
// al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1):
// 1 − C(n−c, k) / C(n, k) for n attempts of which c are correct, computed
// as 1 − ∏_{i=n−c+1}^{n} (1 − k/i) to stay exact for large n. k above n
// is taken as n.
func PassAtK(n, c, k int) float64 {
	if n <= 0 || k <= 0 {
		return 0
	}
	k = min(k, n)
	c = max(0, min(c, n))
	if n-c < k {
		return 1
	}
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}

// EvalSummary is what `rllm eval` reports.
type EvalSummary struct {
	Tasks          int                               `json:"tasks"`
	Episodes       int                               `json:"episodes"`
	K              int                               `json:"k"`
	PassAt1        float64                           `json:"pass@1"`
	PassAtK        float64                           `json:"pass@k"`
	MeanReward     float64                           `json:"mean_reward"`
	Terminations   map[episode.TerminationReason]int `json:"termination_reasons"`
	PromptTokens   int                               `json:"prompt_tokens"`
	ResponseTokens int                               `json:"response_tokens"`
	Seconds        float64                           `json:"seconds"`
	BySource       map[string]*SourceSummary         `json:"by_data_source"`
}

// SourceSummary is the part of a summary for one data_source.
type SourceSummary struct {
	Tasks      int     `json:"tasks"`
	Episodes   int     `json:"episodes"`
	PassAt1    float64 `json:"pass@1"`
	PassAtK    float64 `json:"pass@k"`
	MeanReward float64 `json:"mean_reward"`
}

// Summarize scores episodes. Attempts are grouped by task (the part of the
// episode id before the last ':'); a task's data source is its
// "data_source" field ("unknown" when absent). pass@1 and pass@k are
// averaged over tasks, each task using its own number of attempts; an
// episode's reward is the mean of its trajectories' rewards.
func Summarize(episodes []*episode.Episode, k int) EvalSummary {
	type group struct {
		source string
		n, c   int
	}
	s := EvalSummary{K: k, Terminations: map[episode.TerminationReason]int{}, BySource: map[string]*SourceSummary{}}
	groups := map[string]*group{}
	var order []string
	rewardBySource := map[string]float64{}
	var rewardSum float64
	for _, ep := range episodes {
		if ep == nil {
			continue
		}
		s.Episodes++
		s.Terminations[ep.TerminationReason]++
		pt, rt := tokenCounts(ep)
		s.PromptTokens += pt
		s.ResponseTokens += rt
		task := ep.ID
		if i := strings.LastIndexByte(task, ':'); i >= 0 {
			task = task[:i]
		}
		g := groups[task]
		if g == nil {
			src, _ := ep.Task["data_source"].(string)
			if src == "" {
				src = "unknown"
			}
			g = &group{source: src}
			groups[task] = g
			order = append(order, task)
		}
		g.n++
		if ep.IsCorrect {
			g.c++
		}
		r := episodeReward(ep)
		rewardSum += r
		rewardBySource[g.source] += r
		src := s.BySource[g.source]
		if src == nil {
			src = &SourceSummary{}
			s.BySource[g.source] = src
		}
		src.Episodes++
	}
	for _, task := range order {
		g := groups[task]
		src := s.BySource[g.source]
		src.Tasks++
		p1, pk := PassAtK(g.n, g.c, 1), PassAtK(g.n, g.c, k)
		src.PassAt1 += p1
		src.PassAtK += pk
		s.PassAt1 += p1
		s.PassAtK += pk
	}
	s.Tasks = len(order)
	if s.Tasks > 0 {
		s.PassAt1 /= float64(s.Tasks)
		s.PassAtK /= float64(s.Tasks)
		s.MeanReward = rewardSum / float64(s.Episodes)
	}
	for name, src := range s.BySource {
		src.PassAt1 /= float64(src.Tasks)
		src.PassAtK /= float64(src.Tasks)
		src.MeanReward = rewardBySource[name] / float64(src.Episodes)
	}
	return s
}

func episodeReward(ep *episode.Episode) float64 {
	if len(ep.Trajectories) == 0 {
		return 0
	}
	var sum float64
	for _, tr := range ep.Trajectories {
		sum += tr.Reward
	}
	return sum / float64(len(ep.Trajectories))
}

// Sources lists a summary's data sources in name order.
func (s EvalSummary) Sources() []string {
	names := make([]string, 0, len(s.BySource))
	for n := range s.BySource {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// WriteEpisodes writes one JSON object per line. JSON has no infinities,
// so -inf logprobs are written as -9999.0, vLLM's own convention, which
// the decoders read back as -inf.
func WriteEpisodes(w io.Writer, episodes []*episode.Episode) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, ep := range episodes {
		if ep == nil {
			continue
		}
		if err := enc.Encode(finiteLogprobs(ep)); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// finiteLogprobs returns ep, or a copy whose non-finite logprobs are
// replaced, leaving the caller's episode untouched.
func finiteLogprobs(ep *episode.Episode) *episode.Episode {
	clean := true
	for _, tr := range ep.Trajectories {
		for _, st := range tr.Steps {
			for _, lp := range st.Logprobs {
				if math.IsInf(lp, 0) || math.IsNaN(lp) {
					clean = false
				}
			}
		}
	}
	if clean {
		return ep
	}
	cp := *ep
	cp.Trajectories = make([]episode.Trajectory, len(ep.Trajectories))
	for i, tr := range ep.Trajectories {
		tr.Steps = append([]episode.Step(nil), tr.Steps...)
		for j := range tr.Steps {
			lps := make([]float64, len(tr.Steps[j].Logprobs))
			for k, lp := range tr.Steps[j].Logprobs {
				if math.IsInf(lp, 0) || math.IsNaN(lp) {
					lp = wireNegInf
				}
				lps[k] = lp
			}
			tr.Steps[j].Logprobs = lps
		}
		cp.Trajectories[i] = tr
	}
	return &cp
}
