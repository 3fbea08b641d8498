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
