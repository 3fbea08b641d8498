package rollout

import (
	"fmt"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// AssembleOptions say how episodes become training sequences. The names
// follow rLLM's config keys.
type AssembleOptions struct {
	// MaxPromptLength and MaxResponseLength (data.max_prompt_length,
	// data.max_response_length; 0: unlimited) bound each sequence. A
	// longer prompt keeps its last tokens (verl pads and cuts prompts on
	// the left) and the sequence ends with max_prompt_length_exceeded; a
	// longer response is cut and ends with max_response_length_exceeded.
	MaxPromptLength   int
	MaxResponseLength int
	// PerStep makes one sequence per step (stepwise advantages); otherwise
	// each trajectory is one sequence: the first prompt, then every reply
	// (mask 1) and, between replies, the environment's tokens (mask 0).
	PerStep bool
	// FilterTokenMismatch (rllm.filter_token_mismatch) zeroes the loss
	// mask of a trajectory whose turn prompts do not extend the previous
	// prompt and reply token for token.
	FilterTokenMismatch bool
	// OverlongFilter (rllm.agent.overlong_filter) zeroes the loss mask of
	// sequences that ended in max_response_length_exceeded,
	// max_turns_exceeded or timeout: they stay in the batch for
	// advantages but teach nothing.
	OverlongFilter bool
	// MaskTruncatedSamples (rllm.mask_truncated_samples) drops sequences
	// whose response fills MaxResponseLength.
	MaskTruncatedSamples bool
}

// Sequence is one training sequence with its bookkeeping.
type Sequence struct {
	EpisodeID      string
	TrajectoryID   string
	TrajectoryName string
	// Step is the step index in per-step mode, -1 for a whole trajectory.
	Step        int
	PromptIDs   []int
	ResponseIDs []int
	// LossMask and Logprobs have one entry per response token: 1 and the
	// sampling logprob for model tokens, 0 and 0 for environment tokens.
	LossMask []int8
	Logprobs []float64
	// Reward is the trajectory's reward, or the step's in per-step mode.
	Reward float64
	// Termination is the episode's reason, or the length limit this
	// sequence hit.
	Termination episode.TerminationReason
	// PromptCut says the sequence's own prompt (the first turn's, for a
	// whole trajectory) was longer than MaxPromptLength and kept its end.
	PromptCut bool
	// TokenMismatch says a turn's prompt did not extend the previous
	// prompt and reply (the chat template re-tokenized history).
	TokenMismatch bool
	// Masked says a filter zeroed the whole loss mask.
	Masked bool
}

// AssembleStats count what assembling did, for metrics.
type AssembleStats struct {
	Sequences         int
	TokenMismatches   int
	PromptTruncated   int
	ResponseTruncated int
	OverlongMasked    int
	MismatchMasked    int
	TruncatedDropped  int
}

// Assemble turns episodes into training sequences, in episode order.
// Episodes without steps contribute nothing. A step whose token arrays
// disagree in length is an error naming the episode and step.
func Assemble(episodes []*episode.Episode, opts AssembleOptions) ([]Sequence, AssembleStats, error) {
	var out []Sequence
	var st AssembleStats
	for _, ep := range episodes {
		if ep == nil {
			continue
		}
		for ti := range ep.Trajectories {
			tr := &ep.Trajectories[ti]
			if len(tr.Steps) == 0 {
				continue
			}
			if err := checkSteps(ep.ID, tr); err != nil {
				return nil, st, err
			}
			var seqs []Sequence
			if opts.PerStep {
				for si := range tr.Steps {
					seqs = append(seqs, stepSequence(ep, tr, si))
				}
			} else {
				seqs = []Sequence{trajectorySequence(ep, tr)}
			}
			for _, s := range seqs {
				if s.TokenMismatch {
					st.TokenMismatches++
				}
				s = limit(s, opts, &st)
				if opts.MaskTruncatedSamples && opts.MaxResponseLength > 0 && len(s.ResponseIDs) >= opts.MaxResponseLength {
					st.TruncatedDropped++
					continue
				}
				switch {
				case opts.FilterTokenMismatch && s.TokenMismatch:
					zeroMask(&s)
					st.MismatchMasked++
				case opts.OverlongFilter && overlong(s.Termination):
					zeroMask(&s)
					st.OverlongMasked++
				}
				out = append(out, s)
			}
		}
	}
	st.Sequences = len(out)
	return out, st, nil
}

func checkSteps(epID string, tr *episode.Trajectory) error {
	for i, s := range tr.Steps {
		switch {
		case len(s.PromptIDs) == 0:
			return fmt.Errorf("episode %s, trajectory %q, step %d has no prompt token ids; training needs a sampler that returns token ids", epID, tr.Name, i)
		case len(s.Logprobs) != 0 && len(s.Logprobs) != len(s.ResponseIDs):
			return fmt.Errorf("episode %s, trajectory %q, step %d has %d response tokens but %d logprobs", epID, tr.Name, i, len(s.ResponseIDs), len(s.Logprobs))
		case len(s.LossMask) != 0 && len(s.LossMask) != len(s.ResponseIDs):
			return fmt.Errorf("episode %s, trajectory %q, step %d has %d response tokens but a loss mask of %d", epID, tr.Name, i, len(s.ResponseIDs), len(s.LossMask))
		}
	}
	return nil
}

// modelTokens appends a step's reply: its own mask if it has one, else 1s.
func modelTokens(s *Sequence, st *episode.Step) {
	s.ResponseIDs = append(s.ResponseIDs, st.ResponseIDs...)
	for i := range st.ResponseIDs {
		m := int8(1)
		if len(st.LossMask) == len(st.ResponseIDs) {
			m = st.LossMask[i]
		}
		lp := 0.0
		if len(st.Logprobs) == len(st.ResponseIDs) {
			lp = st.Logprobs[i]
		}
		s.LossMask = append(s.LossMask, m)
		s.Logprobs = append(s.Logprobs, lp)
	}
}

func stepSequence(ep *episode.Episode, tr *episode.Trajectory, i int) Sequence {
	st := &tr.Steps[i]
	s := Sequence{EpisodeID: ep.ID, TrajectoryID: tr.ID, TrajectoryName: tr.Name, Step: i,
		PromptIDs: append([]int(nil), st.PromptIDs...), Reward: st.Reward, Termination: ep.TerminationReason}
	modelTokens(&s, st)
	return s
}

// trajectorySequence builds one sequence from a multi-turn trajectory:
// each turn's prompt must start with everything before it (previous
// prompt + reply); the new part is the environment's and is masked out.
// On a mismatch the sequence stops at the last good turn and is flagged.
func trajectorySequence(ep *episode.Episode, tr *episode.Trajectory) Sequence {
	first := &tr.Steps[0]
	s := Sequence{EpisodeID: ep.ID, TrajectoryID: tr.ID, TrajectoryName: tr.Name, Step: -1,
		PromptIDs: append([]int(nil), first.PromptIDs...), Reward: tr.Reward, Termination: ep.TerminationReason}
	modelTokens(&s, first)
	context := len(first.PromptIDs) + len(first.ResponseIDs)
	for i := 1; i < len(tr.Steps); i++ {
		st := &tr.Steps[i]
		if !extends(st.PromptIDs, s.PromptIDs, s.ResponseIDs) {
			s.TokenMismatch = true
			break
		}
		for _, id := range st.PromptIDs[context:] {
			s.ResponseIDs = append(s.ResponseIDs, id)
			s.LossMask = append(s.LossMask, 0)
			s.Logprobs = append(s.Logprobs, 0)
		}
		modelTokens(&s, st)
		context = len(st.PromptIDs) + len(st.ResponseIDs)
	}
	return s
}

// extends reports whether next starts with prompt followed by response.
func extends(next, prompt, response []int) bool {
	if len(next) < len(prompt)+len(response) {
		return false
	}
	for i, id := range prompt {
		if next[i] != id {
			return false
		}
	}
	for i, id := range response {
		if next[len(prompt)+i] != id {
			return false
		}
	}
	return true
}

func limit(s Sequence, opts AssembleOptions, st *AssembleStats) Sequence {
	if opts.MaxPromptLength > 0 && len(s.PromptIDs) > opts.MaxPromptLength {
		s.PromptIDs = s.PromptIDs[len(s.PromptIDs)-opts.MaxPromptLength:]
		s.Termination = episode.TerminationMaxPromptLength
		s.PromptCut = true
		st.PromptTruncated++
	}
	if opts.MaxResponseLength > 0 && len(s.ResponseIDs) > opts.MaxResponseLength {
		n := opts.MaxResponseLength
		s.ResponseIDs, s.LossMask, s.Logprobs = s.ResponseIDs[:n], s.LossMask[:n], s.Logprobs[:n]
		s.Termination = episode.TerminationMaxResponseLength
		st.ResponseTruncated++
	}
	return s
}

func overlong(r episode.TerminationReason) bool {
	return r == episode.TerminationMaxResponseLength || r == episode.TerminationMaxTurns || r == episode.TerminationTimeout
}

func zeroMask(s *Sequence) {
	s.LossMask = make([]int8, len(s.ResponseIDs))
	s.Masked = true
}
