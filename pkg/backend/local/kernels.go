package local

// Hand-written float32 kernels on row-major matrices. Each output row is
// computed by the same sequence of operations whatever the number of rows,
// so a one-row decode step and a full-sequence forward give bit-identical
// results: sampled logprobs equal training logprobs exactly.

// matMul sets c[m,n] = a[m,k]·b[k,n].
func matMul(c, a, b []float32, m, k, n int) {
	for i := range m {
		ci := c[i*n : (i+1)*n]
		clear(ci)
		ai := a[i*k : (i+1)*k]
		for p, av := range ai {
			if av != 0 {
				axpy(av, b[p*n:(p+1)*n], ci)
			}
		}
	}
}

// matMulTNAcc adds a[m,k]ᵀ·b[m,n] to c[k,n] (weight gradients).
func matMulTNAcc(c, a, b []float32, m, k, n int) {
	for i := range m {
		ai := a[i*k : (i+1)*k]
		bi := b[i*n : (i+1)*n]
		for p, av := range ai {
			if av != 0 {
				axpy(av, bi, c[p*n:(p+1)*n])
			}
		}
	}
}

// matMulNT sets c[m,p] = a[m,n]·b[p,n]ᵀ (input gradients), or adds to c
// when acc is set.
func matMulNT(c, a, b []float32, m, n, p int, acc bool) {
	for i := range m {
		ai := a[i*n : (i+1)*n]
		ci := c[i*p : (i+1)*p]
		for j := range ci {
			d := dot(ai, b[j*n:(j+1)*n])
			if acc {
				ci[j] += d
			} else {
				ci[j] = d
			}
		}
	}
}

// axpy adds a·x to y.
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		xs, ys := x[i:i+4:i+4], y[i:i+4:i+4]
		ys[0] += a * xs[0]
		ys[1] += a * xs[1]
		ys[2] += a * xs[2]
		ys[3] += a * xs[3]
	}
	for ; i < len(x); i++ {
		y[i] += a * x[i]
	}
}

// dot is Σ x·y with four partial sums.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		xs, ys := x[i:i+4:i+4], y[i:i+4:i+4]
		s0 += xs[0] * ys[0]
		s1 += xs[1] * ys[1]
		s2 += xs[2] * ys[2]
		s3 += xs[3] * ys[3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}
