package trainer

import (
	"fmt"
	"slices"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/ppo"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// Group is one task's rollouts: the unit that group-relative estimators
// compare within, that rejection sampling keeps or drops, and that
// mini-batches keep together (as verl keeps a prompt's n responses).
type Group struct {
	TaskID   string
	Episodes []*episode.Episode
	// Samples are the training sequences of the episodes, in episode
	// order: one per trajectory, or one per step with stepwise advantages.
	Samples []Sample
}

// Sample is one training sequence and what the pipeline decided about it.
type Sample struct {
	rollout.Sequence
	// Correct is the episode's is_correct; Reason the termination that
	// compact filtering looks at (the sequence's own length limit, else
	// the episode's).
	Correct bool
	Reason  episode.TerminationReason
	// Masked leaves the sample in its group for advantages but out of the
	// loss (compact filtering, overlong and mismatch filters).
	Masked bool
	// Advantage is the outcome advantage; TokenAdvantages, when set (token
	// estimators), one per response token.
	Advantage       float64
	TokenAdvantages []float64
	// RefLogprobs are the reference policy's logprobs of the response
	// tokens (KL terms only); TokenRewards the per-token rewards once an
	// in-reward KL penalty has been folded in (Reward is then their sum).
	RefLogprobs  []float64
	TokenRewards []float64
}

// AdvantageAt is the advantage of response token j.
func (s *Sample) AdvantageAt(j int) float64 {
	if s.TokenAdvantages != nil {
		return s.TokenAdvantages[j]
	}
	return s.Advantage
}

// Trains reports whether any of the sample's tokens reach the loss.
func (s *Sample) Trains() bool {
	if s.Masked {
		return false
	}
	for _, m := range s.LossMask {
		if m != 0 {
			return true
		}
	}
	return false
}

// groupEpisodes splits the engine's output (task by task, n episodes
// each) into groups.
func groupEpisodes(eps []*episode.Episode, n int) ([]Group, error) {
	if n <= 0 || len(eps)%n != 0 {
		return nil, fmt.Errorf("trainer: %d episodes do not split into groups of %d", len(eps), n)
	}
	groups := make([]Group, 0, len(eps)/n)
	for lo := 0; lo < len(eps); lo += n {
		g := Group{Episodes: eps[lo : lo+n]}
		if ep := g.Episodes[0]; ep != nil {
			g.TaskID = taskOf(ep.ID)
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// taskOf is the task part of an episode id "task_id:rollout_index".
func taskOf(episodeID string) string {
	for i := len(episodeID) - 1; i >= 0; i-- {
		if episodeID[i] == ':' {
			return episodeID[:i]
		}
	}
	return episodeID
}

// assemble turns each group's episodes into samples (rollout.Assemble:
// token layout, length limits, overlong, mismatch and truncation filters)
// and returns the counts of what it did. Samples with no response tokens
// carry nothing to train on and are left out.
func assemble(groups []Group, opts rollout.AssembleOptions) (rollout.AssembleStats, error) {
	var total rollout.AssembleStats
	for gi := range groups {
		g := &groups[gi]
		seqs, st, err := rollout.Assemble(g.Episodes, opts)
		if err != nil {
			return total, err
		}
		byID := make(map[string]*episode.Episode, len(g.Episodes))
		for _, ep := range g.Episodes {
			if ep != nil {
				byID[ep.ID] = ep
			}
		}
		g.Samples = g.Samples[:0]
		for _, s := range seqs {
			if len(s.ResponseIDs) == 0 {
				continue
			}
			smp := Sample{Sequence: s, Masked: s.Masked, Reason: s.Termination}
			if ep := byID[s.EpisodeID]; ep != nil {
				smp.Correct = ep.IsCorrect
				if smp.Reason == "" {
					smp.Reason = ep.TerminationReason
				}
			}
			g.Samples = append(g.Samples, smp)
		}
		total.Sequences += st.Sequences
		total.TokenMismatches += st.TokenMismatches
		total.PromptTruncated += st.PromptTruncated
		total.ResponseTruncated += st.ResponseTruncated
		total.OverlongMasked += st.OverlongMasked
		total.MismatchMasked += st.MismatchMasked
		total.TruncatedDropped += st.TruncatedDropped
	}
	return total, nil
}

// flatGroups lays the samples of groups out as pkg/ppo wants them: one
// dense group id per sample.
func flatGroups(groups []Group) (ids []int, n int) {
	for gi := range groups {
		for range groups[gi].Samples {
			ids = append(ids, gi)
		}
	}
	return ids, len(groups)
}

// rejectionSample keeps the groups whose episodes are partly solved
// (ppo.RejectionSample), at most limit of them in batch order (the
// batch drawn with rejection_sample.multiplier holds more). It returns
// the kept groups and the solve counts over all groups.
func rejectionSample(groups []Group, limit int, ws *ppo.Workspace) ([]Group, ppo.SolveStats, error) {
	ids, n := flatGroups(groups)
	correct := make([]bool, len(ids))
	keep := make([]bool, len(ids))
	k := 0
	for gi := range groups {
		for _, s := range groups[gi].Samples {
			correct[k], keep[k] = s.Correct, true
			k++
		}
	}
	stats, err := ppo.RejectionSample(ids, n, correct, ws, keep)
	if err != nil {
		return nil, stats, err
	}
	return keepGroups(groups, ids, keep, limit), stats, nil
}

// solveStats counts groups by how many episodes solved the task, for
// metrics, without filtering.
func solveStats(groups []Group, ws *ppo.Workspace) (ppo.SolveStats, error) {
	_, st, err := rejectionSample(groups, len(groups), ws)
	return st, err
}

// keepGroups returns the groups with at least one kept sample, at most
// limit of them (limit < 0: all).
func keepGroups(groups []Group, ids []int, keep []bool, limit int) []Group {
	kept := make([]bool, len(groups))
	for k, g := range ids {
		if keep[k] {
			kept[g] = true
		}
	}
	var out []Group
	for gi := range groups {
		if kept[gi] && (limit < 0 || len(out) < limit) {
			out = append(out, groups[gi])
		}
	}
	return out
}

// dropOverlongPrompts drops the groups of tasks whose prompt was longer
// than data.max_prompt_length (any sample's own prompt cut), as verl's
// data.filter_overlong_prompts leaves such tasks out of the dataset, and
// returns the rest and how many it dropped.
func dropOverlongPrompts(groups []Group) ([]Group, int) {
	kept := groups[:0:0]
	for _, g := range groups {
		if !slices.ContainsFunc(g.Samples, func(s Sample) bool { return s.PromptCut }) {
			kept = append(kept, g)
		}
	}
	return kept, len(groups) - len(kept)
}

// compactFilter masks samples whose termination reason the filter names
// (rLLM's compact filtering) and returns how many it masked.
func compactFilter(groups []Group, cf ppo.CompactFilter) (int, error) {
	var reasons []string
	for gi := range groups {
		for _, s := range groups[gi].Samples {
			reasons = append(reasons, string(s.Reason))
		}
	}
	live := make([]bool, len(reasons))
	for i := range live {
		live[i] = true
	}
	n, err := cf.Apply(reasons, live)
	if err != nil {
		return 0, err
	}
	k := 0
	for gi := range groups {
		for si := range groups[gi].Samples {
			if !live[k] {
				groups[gi].Samples[si].Masked = true
			}
			k++
		}
	}
	return n, nil
}

// dropZeroAdvantage drops the groups whose every advantage is zero
// (ppo.DropZeroAdvantageGroups, rLLM's filter_uniform_groups applied
// after the estimators) and returns the rest and how many it dropped.
func dropZeroAdvantage(groups []Group, ws *ppo.Workspace) ([]Group, int, error) {
	ids, n := flatGroups(groups)
	adv := make([]float64, len(ids))
	keep := make([]bool, len(ids))
	k := 0
	for gi := range groups {
		for si := range groups[gi].Samples {
			s := &groups[gi].Samples[si]
			adv[k], keep[k] = maxAbsAdvantage(s), true
			k++
		}
	}
	dropped, err := ppo.DropZeroAdvantageGroups(ids, n, adv, ws, keep)
	if err != nil {
		return nil, 0, err
	}
	return keepGroups(groups, ids, keep, -1), dropped, nil
}

// maxAbsAdvantage is the largest |advantage| over the sample's trained
// tokens (0 for a masked sample, which carries no signal).
func maxAbsAdvantage(s *Sample) float64 {
	if !s.Trains() {
		return 0
	}
	if s.TokenAdvantages == nil {
		return s.Advantage
	}
	m := 0.0
	for j, a := range s.TokenAdvantages {
		if s.LossMask[j] != 0 && max(a, -a) > max(m, -m) {
			m = a
		}
	}
	return m
}

// samples lists every sample of groups, in order.
func samples(groups []Group) []*Sample {
	var out []*Sample
	for gi := range groups {
		for si := range groups[gi].Samples {
			out = append(out, &groups[gi].Samples[si])
		}
	}
	return out
}
