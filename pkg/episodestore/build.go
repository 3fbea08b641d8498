package episodestore

import (
	"slices"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// Decoder turns one token id into its text (a tokenizer's Decode of one
// id, special tokens kept).
type Decoder func(ids []int, skipSpecial bool) (string, error)

// Compact returns a copy of ep fit for a record that carries samples:
// its steps without their token arrays (the samples hold them) and
// without the conversation of every step but a trajectory's last, which
// holds the whole conversation. ep is left untouched.
func Compact(ep *episode.Episode) episode.Episode {
	cp := *ep
	cp.Trajectories = make([]episode.Trajectory, len(ep.Trajectories))
	for i, tr := range ep.Trajectories {
		tr.Steps = slices.Clone(tr.Steps)
		for j := range tr.Steps {
			st := &tr.Steps[j]
			st.PromptIDs, st.ResponseIDs, st.Logprobs, st.LossMask = nil, nil, nil, nil
			if j < len(tr.Steps)-1 && len(tr.Steps[len(tr.Steps)-1].ChatCompletions) >= len(st.ChatCompletions) {
				st.ChatCompletions = nil
			}
		}
		cp.Trajectories[i] = tr
	}
	return cp
}

// AddPieces fills rec.Pieces with the text of every token id of its
// samples, or of its steps when it has none. A decoder error leaves the
// id without a piece.
func AddPieces(rec *Record, decode Decoder) {
	if decode == nil {
		return
	}
	if rec.Pieces == nil {
		rec.Pieces = map[int]string{}
	}
	one := make([]int, 1)
	add := func(ids []int) {
		for _, id := range ids {
			if _, ok := rec.Pieces[id]; ok {
				continue
			}
			one[0] = id
			if s, err := decode(one, false); err == nil {
				rec.Pieces[id] = s
			}
		}
	}
	for _, s := range rec.Samples {
		add(s.PromptIDs)
		add(s.ResponseIDs)
	}
	if len(rec.Samples) == 0 {
		for _, tr := range rec.Trajectories {
			for _, st := range tr.Steps {
				add(st.PromptIDs)
				add(st.ResponseIDs)
			}
		}
	}
}

// TokenSamples are the record's token sequences: its samples, or, for a
// record without (validation and eval episodes), one per step.
func TokenSamples(rec *Record) []Sample {
	if len(rec.Samples) > 0 {
		return rec.Samples
	}
	var out []Sample
	for ti, tr := range rec.Trajectories {
		for si, st := range tr.Steps {
			if len(st.PromptIDs) == 0 && len(st.ResponseIDs) == 0 {
				continue
			}
			s := Sample{Trajectory: ti, Step: si, PromptIDs: st.PromptIDs, ResponseIDs: st.ResponseIDs,
				Logprobs: st.Logprobs, LossMask: st.LossMask, Advantage: st.Advantage, Reward: st.Reward}
			if st.FinishReason == "length" {
				s.Termination = episode.TerminationMaxResponseLength
			}
			out = append(out, s)
		}
	}
	return out
}
