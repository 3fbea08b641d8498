package ppo

// Filters decide which samples train. Each one only clears entries of keep
// (the caller starts it all true), so they compose in any order.

// SolveStats counts task groups by how many of their episodes were
// correct, rLLM's batch/solve_none, solve_all and solve_partial.
type SolveStats struct {
	SolveNone, SolveAll, SolvePartial int
}

// Fractions returns the three counts divided by their total, as rLLM logs
// them (0 for an empty batch).
func (s SolveStats) Fractions() (none, all, partial float64) {
	total := s.SolveNone + s.SolveAll + s.SolvePartial
	if total == 0 {
		return 0, 0, 0
	}
	t := float64(total)
	return float64(s.SolveNone) / t, float64(s.SolveAll) / t, float64(s.SolvePartial) / t
}

// RejectionSample implements rLLM's rejection sampling
// (agent_workflow_trainer, rllm.rejection_sample.enable): a task group
// whose episodes are all correct or all incorrect carries no learning
// signal and is dropped (keep cleared); the counts cover every group.
func RejectionSample(groups []int, numGroups int, correct []bool, ws *Workspace, keep []bool) (SolveStats, error) {
	if err := sameLen("correct", len(correct), "groups", len(groups)); err != nil {
		return SolveStats{}, err
	}
	if err := sameLen("keep", len(keep), "groups", len(groups)); err != nil {
		return SolveStats{}, err
	}
	ws.reset(numGroups)
	for i, g := range groups {
		if uint(g) >= uint(numGroups) {
			return SolveStats{}, badGroup(i, numGroups)
		}
		ws.count[g]++
		if correct[i] {
			ws.mean[g]++ // correct episodes
		}
	}
	var st SolveStats
	for g, n := range ws.count {
		switch c := ws.mean[g]; {
		case n == 0:
		case c == 0:
			st.SolveNone++
		case c == n:
			st.SolveAll++
		default:
			st.SolvePartial++
			ws.seen[g] = true // partial: keep
		}
	}
	for i, g := range groups {
		if !ws.seen[g] {
			keep[i] = false
		}
	}
	return st, nil
}

// DropZeroAdvantageGroups clears keep for every group whose advantages are
// all zero (|A| ≤ 1e-8), rLLM's rejection_sample.filter_uniform_groups as
// its buffer applies it after computing advantages. Returns the number of
// groups dropped.
func DropZeroAdvantageGroups(groups []int, numGroups int, advantages []float64, ws *Workspace, keep []bool) (int, error) {
	if err := sameLen("advantages", len(advantages), "groups", len(groups)); err != nil {
		return 0, err
	}
	if err := sameLen("keep", len(keep), "groups", len(groups)); err != nil {
		return 0, err
	}
	if err := checkFinite("advantages", advantages); err != nil {
		return 0, err
	}
	ws.reset(numGroups)
	for i, g := range groups {
		if uint(g) >= uint(numGroups) {
			return 0, badGroup(i, numGroups)
		}
		ws.count[g]++
		if advantages[i] > 1e-8 || advantages[i] < -1e-8 {
			ws.mean[g] = 1 // has signal
		}
	}
	return dropGroups(groups, ws, keep, func(g int) bool { return ws.mean[g] == 0 }), nil
}

func dropGroups(groups []int, ws *Workspace, keep []bool, drop func(g int) bool) int {
	dropped := 0
	for g, n := range ws.count {
		if n > 0 && drop(g) {
			ws.seen[g] = true
			dropped++
		}
	}
	for i, g := range groups {
		if ws.seen[g] {
			keep[i] = false
		}
	}
	return dropped
}

// CompactFilter is rLLM's rllm.compact_filtering: episodes that ended for
// a masked termination reason are left out of training. Reasons are rLLM's
// strings (max_prompt_length_exceeded, ...), the values of
// episode.TerminationReason.
type CompactFilter struct {
	Enable                        bool
	MaskMaxPromptLengthExceeded   bool
	MaskMaxResponseLengthExceeded bool
	MaskEnvDone                   bool
	MaskMaxTurnsExceeded          bool
	MaskTimeout                   bool
	MaskUnknown                   bool
	MaskError                     bool
}

// ShouldMask reports whether an episode that ended for reason is left out.
func (c CompactFilter) ShouldMask(reason string) bool {
	if !c.Enable {
		return false
	}
	switch reason {
	case "max_prompt_length_exceeded":
		return c.MaskMaxPromptLengthExceeded
	case "max_response_length_exceeded":
		return c.MaskMaxResponseLengthExceeded
	case "env_done":
		return c.MaskEnvDone
	case "max_turns_exceeded":
		return c.MaskMaxTurnsExceeded
	case "timeout":
		return c.MaskTimeout
	case "unknown":
		return c.MaskUnknown
	case "error":
		return c.MaskError
	}
	return false
}

// Apply clears keep for every masked reason and returns how many it
// cleared.
func (c CompactFilter) Apply(reasons []string, keep []bool) (int, error) {
	if err := sameLen("keep", len(keep), "termination reasons", len(reasons)); err != nil {
		return 0, err
	}
	n := 0
	for i, r := range reasons {
		if c.ShouldMask(r) {
			if keep[i] {
				n++
			}
			keep[i] = false
		}
	}
	return n, nil
}
