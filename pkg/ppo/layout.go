package ppo

// ValidateOffsets checks that offsets describe n sequences over tokens
// values: len(offsets) = n+1, offsets[0] = 0, non-decreasing, last = tokens.
func ValidateOffsets(offsets []int, tokens int) error {
	if len(offsets) == 0 {
		return &InputError{Name: "offsets", Index: 0, Msg: "must hold at least one value (0); a batch of n sequences has n+1 offsets"}
	}
	if offsets[0] != 0 {
		return &InputError{Name: "offsets", Index: 0, Msg: "must be 0"}
	}
	for i := 1; i < len(offsets); i++ {
		if offsets[i] < offsets[i-1] {
			return &InputError{Name: "offsets", Index: i, Msg: "is smaller than the offset before it; offsets must not decrease"}
		}
	}
	if last := offsets[len(offsets)-1]; last != tokens {
		return &LengthError{Name: "tokens (last offset)", Len: last, OtherName: "per-token inputs", OtherLen: tokens}
	}
	return nil
}

// OffsetsFromLengths writes the offsets of sequences with the given token
// counts into dst (len(lengths)+1) and returns it.
func OffsetsFromLengths(lengths []int, dst []int) ([]int, error) {
	if err := sameLen("offsets", len(dst), "lengths+1", len(lengths)+1); err != nil {
		return nil, err
	}
	dst[0] = 0
	for i, l := range lengths {
		if l < 0 {
			return nil, &InputError{Name: "lengths", Index: i, Msg: "is negative"}
		}
		dst[i+1] = dst[i] + l
	}
	return dst, nil
}

// GroupIndex maps ids (task ids: rLLM groups the rollouts of one task) to
// dense group numbers 0..G-1 in order of first appearance, writes them into
// dst (len(ids)) and returns G. Dense numbers let estimators keep per-group
// statistics in arrays rather than maps.
func GroupIndex(ids []string, dst []int) (int, error) {
	if err := sameLen("groups", len(dst), "ids", len(ids)); err != nil {
		return 0, err
	}
	seen := make(map[string]int, len(ids)/4+1)
	for i, id := range ids {
		g, ok := seen[id]
		if !ok {
			g = len(seen)
			seen[id] = g
		}
		dst[i] = g
	}
	return len(seen), nil
}

// Broadcast spreads one value per sequence over that sequence's tokens:
// dst[t] = seq[i]·mask[t] for t in sequence i. This is how verl turns an
// outcome advantage into token advantages (scores.unsqueeze(-1) *
// response_mask in compute_grpo_outcome_advantage).
func Broadcast(seq []float64, offsets []int, mask []float64, dst []float64) error {
	if err := sameLen("dst", len(dst), "mask", len(mask)); err != nil {
		return err
	}
	if err := sameLen("offsets", len(offsets), "sequences+1", len(seq)+1); err != nil {
		return err
	}
	if err := ValidateOffsets(offsets, len(mask)); err != nil {
		return err
	}
	if err := checkFinite("sequence values", seq); err != nil {
		zero(dst)
		return err
	}
	var chk float64
	for i, a := range seq {
		lo, hi := offsets[i], offsets[i+1]
		m := mask[lo:hi]
		d := dst[lo:hi]
		for t := range m {
			chk += m[t] * 0
			d[t] = a * m[t]
		}
	}
	if chk != 0 {
		zero(dst)
		return checkFinite("mask", mask)
	}
	return nil
}
