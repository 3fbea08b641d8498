package ppo

// Multi-step episodes: a trajectory of k steps is k training sequences.
// stepOffsets (len trajectories+1, the layout of offsets one level up) says
// trajectory i owns steps stepOffsets[i]:stepOffsets[i+1].

// BroadcastSteps gives every step of a trajectory the advantage computed
// for the trajectory (its last step), rLLM's stepwise_advantage mode
// "broadcast" (agent_workflow_trainer._stepwise_advantage_broadcast):
//
//	A_step = A_traj            or, with normalizeBySteps,
//	A_step = A_traj / k        for a trajectory of k steps (the last step too).
func BroadcastSteps(trajAdv []float64, stepOffsets []int, normalizeBySteps bool, dst []float64) error {
	if err := sameLen("step offsets", len(stepOffsets), "trajectories+1", len(trajAdv)+1); err != nil {
		return err
	}
	if err := ValidateOffsets(stepOffsets, len(dst)); err != nil {
		return err
	}
	if err := checkFinite("trajectory advantages", trajAdv); err != nil {
		zero(dst)
		return err
	}
	for i, a := range trajAdv {
		lo, hi := stepOffsets[i], stepOffsets[i+1]
		if normalizeBySteps && hi > lo {
			a /= float64(hi - lo)
		}
		for s := lo; s < hi; s++ {
			dst[s] = a
		}
	}
	return nil
}

// PerStepGroups numbers the groups of rLLM's stepwise_advantage mode
// "per_step": step j of every trajectory of task group g forms group (g, j),
// so each step position is compared with the same position in the other
// rollouts of the task. groups holds the dense task group of each
// trajectory; dst (len = steps) receives the dense (g, j) id of each step;
// the number of step groups is returned. Run any outcome estimator on the
// step rewards (or Monte Carlo returns) with these ids.
func PerStepGroups(groups []int, numGroups int, stepOffsets []int, ws *Workspace, dst []int) (int, error) {
	if err := sameLen("step offsets", len(stepOffsets), "trajectories+1", len(groups)+1); err != nil {
		return 0, err
	}
	if len(stepOffsets) > 0 {
		if err := ValidateOffsets(stepOffsets, len(dst)); err != nil {
			return 0, err
		}
	}
	ws.reset(numGroups)
	longest := ws.count // steps of the longest trajectory per group
	for i, g := range groups {
		if uint(g) >= uint(numGroups) {
			return 0, badGroup(i, numGroups)
		}
		longest[g] = max(longest[g], float64(stepOffsets[i+1]-stepOffsets[i]))
	}
	base := ws.mean
	var next float64
	for g, k := range longest {
		base[g] = next
		next += k
	}
	for i, g := range groups {
		for j, s := 0, stepOffsets[i]; s < stepOffsets[i+1]; j, s = j+1, s+1 {
			dst[s] = int(base[g]) + j
		}
	}
	return int(next), nil
}

// MonteCarloReturns turns step rewards into discounted returns per
// trajectory, as rLLM's compute_mc_return does:
//
//	G_t = r_t + γ·G_{t+1},  G after the last step = 0.
func MonteCarloReturns(stepRewards []float64, stepOffsets []int, gamma float64, dst []float64) error {
	if err := sameLen("returns", len(dst), "step rewards", len(stepRewards)); err != nil {
		return err
	}
	if err := ValidateOffsets(stepOffsets, len(stepRewards)); err != nil {
		return err
	}
	if !finite(gamma) {
		return configError("gamma", "must be a finite number")
	}
	if err := checkFinite("step rewards", stepRewards); err != nil {
		zero(dst)
		return err
	}
	for i := 0; i+1 < len(stepOffsets); i++ {
		var g float64
		for s := stepOffsets[i+1] - 1; s >= stepOffsets[i]; s-- {
			g = stepRewards[s] + gamma*g
			dst[s] = g
		}
	}
	if err := checkFinite("returns", dst); err != nil {
		zero(dst)
		return &InputError{Name: "returns", Index: err.(*NonFiniteError).Index, Msg: "overflowed to ±Inf; step rewards are out of any sensible range"}
	}
	return nil
}
