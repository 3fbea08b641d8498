package trainer

import (
	"fmt"
	"sort"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/ppo"
)

// computeAdvantages fills in every sample's advantage with pkg/ppo: the
// estimator of the sample's role (ppo.RoleEstimators; each role is its
// own batch, as rLLM computes them role by role), over task groups, with
// stepwise trajectories handled by ppo.BroadcastSteps or
// ppo.PerStepGroups.
func computeAdvantages(groups []Group, p *AdvantagePlan, ws *ppo.Workspace) error {
	if err := p.Estimators.Validate(); err != nil {
		return err
	}
	for _, part := range byRole(groups) {
		est, err := p.Estimators.For(part.role)
		if err != nil {
			return err
		}
		switch {
		case est.Level == ppo.Token:
			err = tokenAdvantages(est, part.samples, &p.Config, ws)
		case p.Stepwise == StepwiseBroadcast:
			err = broadcastAdvantages(est, part, p, ws)
		case p.Stepwise == StepwisePerStep:
			err = perStepAdvantages(est, part, &p.Config, ws)
		default:
			err = outcomeAdvantages(est, part, &p.Config, ws)
		}
		if err != nil {
			return fmt.Errorf("advantages (%s): %w", est.Name, err)
		}
	}
	return nil
}

// rolePart is the samples of one role, with the task group of each as a
// dense id within the part.
type rolePart struct {
	role      string
	samples   []*Sample
	groups    []int
	numGroups int
	// episodes finds a sample's episode (trajectory rewards).
	episodes map[string]*episode.Episode
}

func byRole(groups []Group) []rolePart {
	index := map[string]int{}
	var parts []rolePart
	dense := map[[2]int]int{} // (part, group) → dense id
	for gi := range groups {
		for si := range groups[gi].Samples {
			s := &groups[gi].Samples[si]
			pi, ok := index[s.TrajectoryName]
			if !ok {
				pi = len(parts)
				index[s.TrajectoryName] = pi
				parts = append(parts, rolePart{role: s.TrajectoryName, episodes: map[string]*episode.Episode{}})
			}
			part := &parts[pi]
			id, ok := dense[[2]int{pi, gi}]
			if !ok {
				id = part.numGroups
				dense[[2]int{pi, gi}] = id
				part.numGroups++
				for _, ep := range groups[gi].Episodes {
					if ep != nil {
						part.episodes[ep.ID] = ep
					}
				}
			}
			part.samples = append(part.samples, s)
			part.groups = append(part.groups, id)
		}
	}
	sort.SliceStable(parts, func(i, j int) bool { return parts[i].role < parts[j].role })
	return parts
}

// outcomeAdvantages scores each sample as one unit: its reward within its
// task group.
func outcomeAdvantages(est ppo.Estimator, part rolePart, cfg *ppo.Config, ws *ppo.Workspace) error {
	in := ppo.Input{Rewards: make([]float64, len(part.samples)), Groups: part.groups, NumGroups: part.numGroups,
		Lengths: make([]float64, len(part.samples))}
	for i, s := range part.samples {
		in.Rewards[i], in.Lengths[i] = s.Reward, float64(len(s.ResponseIDs))
	}
	out := ppo.Output{Sequence: make([]float64, len(part.samples))}
	if err := est.Compute(&in, cfg, ws, &out); err != nil {
		return err
	}
	for i, s := range part.samples {
		s.Advantage = out.Sequence[i]
	}
	return nil
}

// trajectories finds the runs of consecutive samples that are the steps
// of one trajectory (rollout.Assemble emits a trajectory's steps in
// order) and returns their offsets (len trajectories+1) and the index of
// each run's first sample.
func trajectories(samples []*Sample) (offsets, first []int) {
	offsets = []int{0}
	for i, s := range samples {
		if i > 0 && (s.EpisodeID != samples[i-1].EpisodeID || s.TrajectoryID != samples[i-1].TrajectoryID) {
			offsets = append(offsets, i)
		}
		if i == 0 || offsets[len(offsets)-1] == i {
			first = append(first, i)
		}
	}
	if len(samples) > 0 {
		offsets = append(offsets, len(samples))
	} else {
		offsets = offsets[:1]
	}
	return offsets, first
}

// broadcastAdvantages scores each trajectory by its reward within its
// task group and gives the advantage to all its steps, divided by the
// step count with normalize_by_steps (rLLM's stepwise mode broadcast).
func broadcastAdvantages(est ppo.Estimator, part rolePart, p *AdvantagePlan, ws *ppo.Workspace) error {
	offsets, first := trajectories(part.samples)
	n := len(first)
	in := ppo.Input{Rewards: make([]float64, n), Groups: make([]int, n), NumGroups: part.numGroups, Lengths: make([]float64, n)}
	for t, i := range first {
		s := part.samples[i]
		in.Rewards[t] = trajectoryReward(part.episodes[s.EpisodeID], s.TrajectoryID, part.samples[offsets[t+1]-1].Reward)
		in.Groups[t] = part.groups[i]
		for _, x := range part.samples[offsets[t]:offsets[t+1]] {
			in.Lengths[t] += float64(len(x.ResponseIDs))
		}
	}
	out := ppo.Output{Sequence: make([]float64, n)}
	if err := est.Compute(&in, &p.Config, ws, &out); err != nil {
		return err
	}
	steps := make([]float64, len(part.samples))
	if err := ppo.BroadcastSteps(out.Sequence, offsets, p.NormalizeBySteps, steps); err != nil {
		return err
	}
	for i, s := range part.samples {
		s.Advantage = steps[i]
	}
	return nil
}

// perStepAdvantages compares step j of each trajectory with step j of the
// other rollouts of its task (ppo.PerStepGroups), on the step rewards
// (rLLM's stepwise mode per_step).
func perStepAdvantages(est ppo.Estimator, part rolePart, cfg *ppo.Config, ws *ppo.Workspace) error {
	offsets, first := trajectories(part.samples)
	trajGroups := make([]int, len(first))
	for t, i := range first {
		trajGroups[t] = part.groups[i]
	}
	stepGroups := make([]int, len(part.samples))
	numStepGroups, err := ppo.PerStepGroups(trajGroups, part.numGroups, offsets, ws, stepGroups)
	if err != nil {
		return err
	}
	return outcomeAdvantages(est, rolePart{samples: part.samples, groups: stepGroups, numGroups: numStepGroups}, cfg, ws)
}

// trajectoryReward is the trajectory's reward from its episode, falling
// back to the given one.
func trajectoryReward(ep *episode.Episode, trajID string, fallback float64) float64 {
	if ep == nil {
		return fallback
	}
	for _, tr := range ep.Trajectories {
		if tr.ID == trajID {
			return tr.Reward
		}
	}
	return fallback
}

// tokenAdvantages runs a token-level estimator (reinforce_plus_plus): the
// sample's reward sits on its last trained response token.
func tokenAdvantages(est ppo.Estimator, smps []*Sample, cfg *ppo.Config, ws *ppo.Workspace) error {
	lengths := make([]int, len(smps))
	total := 0
	for i, s := range smps {
		lengths[i] = len(s.ResponseIDs)
		total += lengths[i]
	}
	in := ppo.Input{Tokens: ppo.TokenInput{Rewards: make([]float64, total), Mask: make([]float64, total)}}
	var err error
	if in.Tokens.Offsets, err = ppo.OffsetsFromLengths(lengths, make([]int, len(lengths)+1)); err != nil {
		return err
	}
	for i, s := range smps {
		off, last := in.Tokens.Offsets[i], -1
		for j, m := range s.LossMask {
			if m != 0 && !s.Masked {
				in.Tokens.Mask[off+j] = 1
				last = j
			}
		}
		switch {
		case s.TokenRewards != nil: // the in-reward KL penalty is folded in
			copy(in.Tokens.Rewards[off:], s.TokenRewards)
		case last >= 0:
			in.Tokens.Rewards[off+last] = s.Reward
		}
	}
	out := ppo.Output{Advantages: make([]float64, total), Returns: make([]float64, total)}
	if err := est.Compute(&in, cfg, ws, &out); err != nil {
		return err
	}
	for i, s := range smps {
		off := in.Tokens.Offsets[i]
		s.TokenAdvantages = out.Advantages[off : off+lengths[i]]
	}
	return nil
}
