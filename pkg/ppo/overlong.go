package ppo

// OverlongPenalty is the reward DAPO's reward manager adds to a response
// of length tokens when its overlong buffer is enabled (verl
// verl/workers/reward_manager/dapo.py, DAPORewardManager.__call__, at
// verl commit b178a3cd56f58b2d502255daba591e92833930a7; Yu et al. 2025,
// "DAPO", arXiv:2503.14476, §3.4 soft overlong punishment):
//
//	expected = maxRespLen − bufferLen
//	penalty  = min(−(length − expected) / bufferLen · factor, 0)
//
// so 0 up to expected tokens, then falling linearly to −factor at
// maxRespLen. verl clips it at 0 from above only. A bufferLen below 1
// (which verl would divide by) gives 0; the config refuses it.
func OverlongPenalty(length, maxRespLen, bufferLen int, factor float64) float64 {
	if bufferLen < 1 {
		return 0
	}
	exceed := float64(length - (maxRespLen - bufferLen))
	return min(-exceed/float64(bufferLen)*factor, 0)
}
