package rollout

import (
	"maps"
	"slices"
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
	agg := NewEvalAggregator(k)
	for _, ep := range episodes {
		agg.Add(ep)
	}
	return agg.Summary()
}

// EvalAggregator is Summarize fed one episode at a time, for episodes
// streamed from the engine: it keeps counts per task, not episodes, so
// its memory does not grow with rollouts per task.
type EvalAggregator struct {
	k              int
	s              EvalSummary
	groups         map[string]*evalGroup
	order          []string
	rewardBySource map[string]float64
	rewardSum      float64
}

type evalGroup struct {
	source string
	n, c   int
}

// NewEvalAggregator starts an empty summary for pass@k.
func NewEvalAggregator(k int) *EvalAggregator {
	return &EvalAggregator{k: k, groups: map[string]*evalGroup{}, rewardBySource: map[string]float64{},
		s: EvalSummary{K: k, Terminations: map[episode.TerminationReason]int{}, BySource: map[string]*SourceSummary{}}}
}

// Add counts one episode; nil is ignored.
func (a *EvalAggregator) Add(ep *episode.Episode) {
	if ep == nil {
		return
	}
	s := &a.s
	s.Episodes++
	s.Terminations[ep.TerminationReason]++
	pt, rt := tokenCounts(ep)
	s.PromptTokens += pt
	s.ResponseTokens += rt
	task := ep.ID
	if i := strings.LastIndexByte(task, ':'); i >= 0 {
		task = task[:i]
	}
	g := a.groups[task]
	if g == nil {
		src, _ := ep.Task["data_source"].(string)
		if src == "" {
			src = "unknown"
		}
		g = &evalGroup{source: src}
		a.groups[task] = g
		a.order = append(a.order, task)
	}
	g.n++
	if ep.IsCorrect {
		g.c++
	}
	r := episodeReward(ep)
	a.rewardSum += r
	a.rewardBySource[g.source] += r
	src := s.BySource[g.source]
	if src == nil {
		src = &SourceSummary{}
		s.BySource[g.source] = src
	}
	src.Episodes++
}

// Summary is the summary of the episodes added so far.
func (a *EvalAggregator) Summary() EvalSummary {
	s := a.s
	s.Terminations = maps.Clone(a.s.Terminations)
	s.BySource = make(map[string]*SourceSummary, len(a.s.BySource))
	for name, src := range a.s.BySource {
		s.BySource[name] = &SourceSummary{Episodes: src.Episodes}
	}
	for _, task := range a.order {
		g := a.groups[task]
		src := s.BySource[g.source]
		src.Tasks++
		p1, pk := PassAtK(g.n, g.c, 1), PassAtK(g.n, g.c, a.k)
		src.PassAt1 += p1
		src.PassAtK += pk
		s.PassAt1 += p1
		s.PassAtK += pk
	}
	s.Tasks = len(a.order)
	if s.Tasks > 0 {
		s.PassAt1 /= float64(s.Tasks)
		s.PassAtK /= float64(s.Tasks)
		s.MeanReward = a.rewardSum / float64(s.Episodes)
	}
	for name, src := range s.BySource {
		src.PassAt1 /= float64(src.Tasks)
		src.PassAtK /= float64(src.Tasks)
		src.MeanReward = a.rewardBySource[name] / float64(src.Episodes)
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
	return slices.Sorted(maps.Keys(s.BySource))
}

