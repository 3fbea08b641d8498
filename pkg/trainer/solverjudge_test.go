package trainer

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/episodestore"
	"github.com/rllm-org/rllm-go/pkg/ppo"
	"github.com/rllm-org/rllm-go/pkg/reward"
	"github.com/rllm-org/rllm-go/pkg/tasks/countdown"
	"github.com/rllm-org/rllm-go/pkg/workflow/solverjudge"
)

// The solver-judge workflow trains on the embedded policy: every episode
// holds n_solutions solver trajectories and one judge trajectory, each
// rewarded by the countdown reward of its answer (the judge's: of the
// candidate it picked), and each trajectory's advantage is GRPO's within
// the trajectories of its task and role, as rLLM groups them
// (task_id:trajectory.name), under both spellings of that grouping.
func TestSolverJudgeTrainsByTaskAndRole(t *testing.T) {
	rows, err := countdown.Generate(16, 3, countdown.Options{MinNumbers: 2, MaxNumbers: 2, MaxNumber: 9, MaxTarget: 20, NoInstructions: true})
	if err != nil {
		t.Fatal(err)
	}
	c := smallConfig(t, append([]string{"workflow.name=solver_judge", "env.name=countdown",
		"workflow.args.n_solutions=2", "workflow.args.format_score=0.5",
		"backend.local.context=640", "rollout.max_tokens=24", "backend.local.warmup_steps=60", "backend.local.warmup_lr=0.01",
		"trainer.episodes.max_groups=null", "algorithm.adv_estimator_by_role.judge=rloo"}, "algorithm.grouping_level=trajectory")...)
	tr, err := New(context.Background(), c, Options{TrainTasks: rows})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	res, err := tr.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg := tr.plan.Advantage.Config
	if res.Steps != 2 {
		t.Fatalf("steps = %d, want 2", res.Steps)
	}
	grade := reward.Countdown{Score: 1, FormatScore: 0.5}
	dir := episodestore.PhaseDir(c.Trainer.DefaultLocalDir, episodestore.PhaseTrain)
	varied := 0
	for _, step := range []int{1, 2} {
		recs, err := episodestore.ReadAll(episodestore.DataPath(dir, step))
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 4*4 {
			t.Fatalf("step %d kept %d episodes, want 16", step, len(recs))
		}
		// (task, role) → the rewards and advantages of its samples.
		type key struct{ task, role string }
		rewards, advs := map[key][]float64{}, map[key][]float64{}
		for _, r := range recs {
			if r.TerminationReason != episode.TerminationEnvDone && r.TerminationReason != episode.TerminationMaxResponseLength {
				t.Fatalf("episode %s ended %s (%s)", r.ID, r.TerminationReason, r.Error)
			}
			var names []string
			for _, tr := range r.Trajectories {
				names = append(names, tr.Name)
			}
			if !slices.Equal(names, []string{"solver", "solver", "judge"}) {
				t.Fatalf("episode %s has trajectories %v, want solver, solver, judge", r.ID, names)
			}
			var actions []string
			for i, tr := range r.Trajectories {
				st := tr.Steps[0]
				want := grade.Grade(r.Task, solverjudge.SolverAction(st.ModelResponse)).Reward
				if i == 2 {
					picked := ""
					if k := solverjudge.JudgeChoice(st.ModelResponse, 2); k > 0 {
						picked = actions[k-1]
					}
					want = grade.Grade(r.Task, picked).Reward
				}
				actions = append(actions, solverjudge.SolverAction(st.ModelResponse))
				if tr.Reward != want || st.Reward != want {
					t.Errorf("episode %s %s %d replied %q: reward %g (step %g), want %g", r.ID, tr.Name, i, st.ModelResponse, tr.Reward, st.Reward, want)
				}
			}
			if len(r.Samples) != 3 {
				t.Fatalf("episode %s trained %d samples, want one per trajectory", r.ID, len(r.Samples))
			}
			for _, s := range r.Samples {
				tr := r.Trajectories[s.Trajectory]
				k := key{episodestore.TaskOf(r.ID), tr.Name}
				rewards[k] = append(rewards[k], tr.Reward)
				advs[k] = append(advs[k], s.Advantage)
			}
		}
		if len(rewards) != 2*4 {
			t.Fatalf("step %d: %d (task, role) groups, want 8", step, len(rewards))
		}
		for k, rs := range rewards {
			n := 4
			if k.role == "solver" {
				n = 8
			}
			if len(rs) != n {
				t.Fatalf("step %d: %v has %d trajectories, want %d", step, k, len(rs), n)
			}
			est := "grpo"
			if k.role == "judge" {
				est = "rloo"
			}
			want := groupAdvantages(t, est, &cfg, rs)
			for i := range rs {
				if math.Abs(advs[k][i]-want[i]) > 1e-9 {
					t.Errorf("step %d %v: advantages %v of rewards %v, want %v (%s within the task and role)", step, k, advs[k], rs, want, est)
					break
				}
			}
			if slices.Min(rs) != slices.Max(rs) {
				varied++
			}
		}
	}
	if varied == 0 {
		t.Errorf("no (task, role) group had rewards that differ: the advantages were all 0 and showed nothing")
	}
}

// groupAdvantages is the estimator's advantages of one group's rewards,
// under the run's settings.
func groupAdvantages(t *testing.T, name string, cfg *ppo.Config, rewards []float64) []float64 {
	t.Helper()
	est, err := ppo.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	in := ppo.Input{Rewards: rewards, Groups: make([]int, len(rewards)), NumGroups: 1, Lengths: make([]float64, len(rewards))}
	out := ppo.Output{Sequence: make([]float64, len(rewards))}
	if err := est.Compute(&in, cfg, &ppo.Workspace{}, &out); err != nil {
		t.Fatal(fmt.Errorf("%s: %w", name, err))
	}
	return out.Sequence
}
