package rollout

import (
	"math"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func TestPassAtK(t *testing.T) {
	// Expected values from the definition 1 − C(n−c,k)/C(n,k), by hand.
	for _, tc := range []struct {
		n, c, k int
		want    float64
	}{
		{5, 2, 1, 0.4},           // c/n
		{5, 2, 2, 1 - 3.0/10},    // C(3,2)=3, C(5,2)=10
		{10, 3, 5, 1 - 21.0/252}, // C(7,5)=21, C(10,5)=252
		{4, 3, 2, 1},             // n−c < k
		{10, 0, 5, 0},
		{3, 1, 8, 1}, // k capped at n
		{0, 0, 1, 0},
	} {
		if got := PassAtK(tc.n, tc.c, tc.k); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("PassAtK(%d,%d,%d) = %v, want %v", tc.n, tc.c, tc.k, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	mk := func(id, src string, correct bool, reward float64, term episode.TerminationReason) *episode.Episode {
		return &episode.Episode{ID: id, Task: episode.Task{"data_source": src}, IsCorrect: correct, TerminationReason: term,
			Trajectories: []episode.Trajectory{{Reward: reward, Steps: []episode.Step{{PromptIDs: []int{1, 2}, ResponseIDs: []int{3}}}}}}
	}
	eps := []*episode.Episode{
		mk("a:0", "math", true, 1, episode.TerminationEnvDone), mk("a:1", "math", false, 0, episode.TerminationEnvDone),
		mk("b:0", "math", false, 0, episode.TerminationTimeout), mk("b:1", "math", false, 0, episode.TerminationEnvDone),
		mk("c:0", "code", true, 1, episode.TerminationEnvDone), mk("c:1", "code", true, 0.5, episode.TerminationEnvDone),
	}
	s := Summarize(eps, 2)
	// math: a has 1/2 (pass@1 .5, pass@2 1), b 0/2 → pass@1 .25, pass@2 .5
	// code: c has 2/2 → 1, 1. Overall over 3 tasks: pass@1 (.5+0+1)/3, pass@2 (1+0+1)/3.
	if s.Tasks != 3 || s.Episodes != 6 || math.Abs(s.PassAt1-0.5) > 1e-12 || math.Abs(s.PassAtK-2.0/3) > 1e-12 {
		t.Errorf("summary %+v", s)
	}
	if m := s.BySource["math"]; m.Tasks != 2 || m.PassAt1 != 0.25 || m.PassAtK != 0.5 || m.MeanReward != 0.25 {
		t.Errorf("math %+v", m)
	}
	if c := s.BySource["code"]; c.PassAt1 != 1 || c.MeanReward != 0.75 {
		t.Errorf("code %+v", c)
	}
	if s.Terminations[episode.TerminationTimeout] != 1 || s.PromptTokens != 12 || s.ResponseTokens != 6 || math.Abs(s.MeanReward-2.5/6) > 1e-12 {
		t.Errorf("summary %+v", s)
	}
	if got := s.Sources(); len(got) != 2 || got[0] != "code" {
		t.Errorf("sources %v", got)
	}
}
