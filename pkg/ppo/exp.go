package ppo

import "math"

// ratioExp is e^x for the clamped log-ratios of the losses (|x| ≤ 20). It
// replaces math.Exp in the per-token loops, where math.Exp alone took more
// than twice the memory-bandwidth bound of the whole loss. It agrees with math.Exp to within 2 ulp on [−20, 20]
// (TestRatioExpAccuracy), far inside the float32 precision verl computes
// ratios in.
//
// Method (the textbook table-driven reduction; Tang, "Table-driven
// implementation of the exponential function", ACM TOMS 1989): write
// x = (128k + j)·ln2/128 + r with |r| ≤ ln2/256, so
// e^x = 2^k · 2^(j/128) · e^r, take 2^(j/128) from a table built with
// math.Exp2 and e^r − 1 from its degree-5 Taylor polynomial (the next
// term is below 1e-18).
func ratioExp(x float64) float64 {
	const (
		invLn2 = 128 / math.Ln2
		// ln2/128 split so that k·ln2Hi is exact for |k| < 2^12 (|x| ≤ 20
		// gives |k| < 3700).
		ln2Hi = 0x1.62e42fefa3p-8 // its low 12 mantissa bits are 0
		ln2Lo = math.Ln2/128 - ln2Hi
		shift = 0x1.8p52 // adding it rounds to an integer held in the low bits
	)
	z := x*invLn2 + shift
	k := math.Float64bits(z)
	z -= shift
	r := (x - z*ln2Hi) - z*ln2Lo
	r2 := r * r
	// e^r − 1, kept apart from the 1 so only the last addition rounds at
	// full scale; Estrin's scheme keeps the dependency chain short.
	q := r + r2*(0.5+r*(1.0/6)+r2*(1.0/24+r*(1.0/120)))
	t := math.Float64frombits(exp2Bits[k&127] + (k>>7)<<52) // 2^(k/128), exact
	return t + t*q
}

// exp2Bits holds the bits of 2^(j/128); adding k<<52 to them scales by 2^k.
var exp2Bits = func() (t [128]uint64) {
	for j := range t {
		t[j] = math.Float64bits(math.Exp2(float64(j) / 128))
	}
	return t
}()
