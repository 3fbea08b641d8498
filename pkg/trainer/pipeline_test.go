package trainer

import (
	"fmt"
	"math"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/ppo"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// smp is a one-token sample of episode ep, trajectory traj (role name),
// with a reward.
func smp(ep, traj, role string, reward float64) Sample {
	return Sample{Sequence: rollout.Sequence{EpisodeID: ep, TrajectoryID: traj, TrajectoryName: role,
		Reward: reward, ResponseIDs: []int{7}, LossMask: []int8{1}, Logprobs: []float64{0}}}
}

// group builds a task group whose episodes carry one trajectory each with
// the given trajectory rewards (for broadcast), and the samples given.
func group(task string, trajRewards []float64, samples ...Sample) Group {
	g := Group{TaskID: task, Samples: samples}
	for i, r := range trajRewards {
		g.Episodes = append(g.Episodes, &episode.Episode{ID: fmt.Sprintf("%s:%d", task, i),
			Trajectories: []episode.Trajectory{{ID: "t", Reward: r}}})
	}
	return g
}

func advantagesOf(groups []Group) []float64 {
	var out []float64
	for _, s := range samples(groups) {
		out = append(out, s.Advantage)
	}
	return out
}

func near(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-5 {
			return false
		}
	}
	return true
}

// Expected values worked by hand with verl's definitions: GRPO divides by
// the unbiased group std plus 1e-6, RLOO is n/(n−1)·(r − mean).
func TestComputeAdvantages(t *testing.T) {
	grpo := ppo.RoleEstimators{Default: "grpo"}
	// two rewards {1, 0}: mean ½, unbiased std √½ → ±½/√½ = ±0.70711
	const a2 = 0.7071057
	// four rewards {1,0,0,1}: std √(1/3) → ±½/√(1/3) = ±0.86602
	const a4 = 0.8660239
	tests := []struct {
		name   string
		plan   AdvantagePlan
		groups []Group
		want   []float64
	}{
		{
			name: "outcome grpo within each task group",
			plan: AdvantagePlan{Estimators: grpo},
			groups: []Group{
				group("a", nil, smp("a:0", "t", "", 1), smp("a:1", "t", "", 0), smp("a:2", "t", "", 0), smp("a:3", "t", "", 1)),
				group("b", nil, smp("b:0", "t", "", 1), smp("b:1", "t", "", 1)),
			},
			want: []float64{a4, -a4, -a4, a4, 0, 0},
		},
		{
			name: "stepwise broadcast: the trajectory's advantage on every step",
			plan: AdvantagePlan{Estimators: grpo, Stepwise: StepwiseBroadcast},
			groups: []Group{group("a", []float64{1, 0},
				smp("a:0", "t", "", 0), smp("a:0", "t", "", 1), // two steps, step rewards ignored
				smp("a:1", "t", "", 0))},
			want: []float64{a2, a2, -a2},
		},
		{
			name: "stepwise broadcast normalized by the step count",
			plan: AdvantagePlan{Estimators: grpo, Stepwise: StepwiseBroadcast, NormalizeBySteps: true},
			groups: []Group{group("a", []float64{1, 0},
				smp("a:0", "t", "", 0), smp("a:0", "t", "", 1),
				smp("a:1", "t", "", 0))},
			want: []float64{a2 / 2, a2 / 2, -a2},
		},
		{
			name: "stepwise per_step: step j is compared with step j of the other rollouts",
			plan: AdvantagePlan{Estimators: grpo, Stepwise: StepwisePerStep},
			groups: []Group{group("a", nil,
				smp("a:0", "t", "", 1), smp("a:0", "t", "", 0),
				smp("a:1", "t", "", 0), smp("a:1", "t", "", 0))},
			want: []float64{a2, 0, -a2, 0},
		},
		{
			name: "per-role estimators: each role its own batch",
			plan: AdvantagePlan{Estimators: ppo.RoleEstimators{Default: "grpo", ByRole: map[string]string{"judge": "rloo"}}},
			groups: []Group{group("a", nil,
				smp("a:0", "s", "solver", 1), smp("a:0", "j", "judge", 1),
				smp("a:1", "s", "solver", 0), smp("a:1", "j", "judge", 0))},
			// solver grpo ±a2; judge rloo 2·(±½) = ±1
			want: []float64{a2, 1, -a2, -1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.plan.Config = ppo.DefaultConfig()
			var ws ppo.Workspace
			if err := computeAdvantages(tt.groups, &tt.plan, &ws); err != nil {
				t.Fatal(err)
			}
			if got := advantagesOf(tt.groups); !near(got, tt.want) {
				t.Errorf("advantages %v, want %v", got, tt.want)
			}
		})
	}
}

// reinforce_plus_plus puts the reward on the last trained token and
// discounts it back (γ = 1: every trained token gets the return), then
// whitens over the batch.
func TestTokenAdvantagesSkipMaskedTokens(t *testing.T) {
	s0 := Sample{Sequence: rollout.Sequence{EpisodeID: "a:0", Reward: 1, ResponseIDs: []int{1, 2, 3}, LossMask: []int8{1, 0, 1}}}
	s1 := Sample{Sequence: rollout.Sequence{EpisodeID: "a:1", Reward: 0, ResponseIDs: []int{1, 2}, LossMask: []int8{1, 1}}}
	groups := []Group{{Samples: []Sample{s0, s1}}}
	plan := AdvantagePlan{Estimators: ppo.RoleEstimators{Default: "reinforce_plus_plus"}, Config: ppo.DefaultConfig()}
	if err := computeAdvantages(groups, &plan, &ppo.Workspace{}); err != nil {
		t.Fatal(err)
	}
	a, b := groups[0].Samples[0].TokenAdvantages, groups[0].Samples[1].TokenAdvantages
	if len(a) != 3 || len(b) != 2 {
		t.Fatalf("token advantages %v %v", a, b)
	}
	// trained tokens: returns {1, 1, 0, 0} → whitened: mean ½ → positive for
	// the rewarded sample, negative for the other, equal within each.
	if !(a[0] > 0 && math.Abs(a[0]-a[2]) < 1e-9 && b[0] < 0 && math.Abs(b[0]-b[1]) < 1e-9) {
		t.Errorf("token advantages %v %v", a, b)
	}
}

func correctSample(ok bool) Sample {
	s := smp("x:0", "t", "", 0)
	s.Correct = ok
	return s
}

func TestRejectionSample(t *testing.T) {
	groups := []Group{
		{TaskID: "all", Samples: []Sample{correctSample(true), correctSample(true)}},
		{TaskID: "p1", Samples: []Sample{correctSample(true), correctSample(false)}},
		{TaskID: "none", Samples: []Sample{correctSample(false), correctSample(false)}},
		{TaskID: "p2", Samples: []Sample{correctSample(false), correctSample(true)}},
	}
	tests := []struct {
		limit int
		want  []string
	}{
		{4, []string{"p1", "p2"}},
		// a batch drawn with rejection_sample.multiplier=2 for 1 task per step
		{1, []string{"p1"}},
	}
	for _, tt := range tests {
		kept, st, err := rejectionSample(groups, tt.limit, &ppo.Workspace{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, g := range kept {
			ids = append(ids, g.TaskID)
		}
		if fmt.Sprint(ids) != fmt.Sprint(tt.want) {
			t.Errorf("limit %d: kept %v, want %v", tt.limit, ids, tt.want)
		}
		if st != (ppo.SolveStats{SolveNone: 1, SolveAll: 1, SolvePartial: 2}) {
			t.Errorf("stats %+v", st)
		}
	}
}

func TestCompactFilterMasksByReason(t *testing.T) {
	a, b, c := smp("a:0", "t", "", 1), smp("a:1", "t", "", 0), smp("a:2", "t", "", 0)
	a.Reason, b.Reason, c.Reason = episode.TerminationTimeout, episode.TerminationEnvDone, episode.TerminationMaxResponseLength
	groups := []Group{{Samples: []Sample{a, b, c}}}
	n, err := compactFilter(groups, ppo.CompactFilter{Enable: true, MaskTimeout: true, MaskMaxResponseLengthExceeded: true})
	if err != nil {
		t.Fatal(err)
	}
	got := []bool{groups[0].Samples[0].Masked, groups[0].Samples[1].Masked, groups[0].Samples[2].Masked}
	if n != 2 || fmt.Sprint(got) != "[true false true]" {
		t.Errorf("masked %d: %v", n, got)
	}
	// A masked sample stays in its group but trains nothing.
	if groups[0].Samples[0].Trains() || len(miniBatches(groups, 1)[0]) != 1 {
		t.Errorf("masked samples reached a mini-batch")
	}
}

func TestDropZeroAdvantageGroups(t *testing.T) {
	g := func(task string, adv ...float64) Group {
		gr := Group{TaskID: task}
		for _, a := range adv {
			s := smp(task+":0", "t", "", 0)
			s.Advantage = a
			gr.Samples = append(gr.Samples, s)
		}
		return gr
	}
	masked := g("masked", 0.5)
	masked.Samples[0].Masked = true // a masked sample's advantage carries no signal
	groups := []Group{g("flat", 0, 0), g("signal", 0.5, -0.5), masked, g("tiny", 1e-9, -1e-9)}
	kept, dropped, err := dropZeroAdvantage(groups, &ppo.Workspace{})
	if err != nil {
		t.Fatal(err)
	}
	if dropped != 3 || len(kept) != 1 || kept[0].TaskID != "signal" {
		t.Errorf("dropped %d, kept %+v", dropped, kept)
	}
}

func TestGroupEpisodes(t *testing.T) {
	eps := []*episode.Episode{{ID: "x:y:0"}, {ID: "x:y:1"}, {ID: "z:0"}, {ID: "z:1"}}
	groups, err := groupEpisodes(eps, 2)
	if err != nil || len(groups) != 2 || groups[0].TaskID != "x:y" || groups[1].TaskID != "z" {
		t.Fatalf("groups %+v err %v", groups, err)
	}
	if _, err := groupEpisodes(eps[:3], 2); err == nil {
		t.Error("3 episodes in groups of 2 accepted")
	}
}
