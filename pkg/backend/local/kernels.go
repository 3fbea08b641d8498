package local

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// Matrix products go through gonum's pure-Go float32 BLAS, whose vector
// kernels have assembly for amd64: 2.5× the rate of the plain Go loops
// measured at this model's shapes (docs/benchmarks.md). Its no-transpose
// product updates each output row with element-wise axpys in k order,
// whatever the number of rows, so a one-row decode step and a
// full-sequence forward give identical logits: sampled logprobs equal
// training logprobs. axpy and dot below serve the short per-head vectors
// of attention.

// matMul sets c[m,n] = a[m,k]·b[k,n].
func matMul(c, a, b []float32, m, k, n int) {
	blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, general(a, m, k), general(b, k, n), 0, general(c, m, n))
}

// matMulTNAcc adds a[m,k]ᵀ·b[m,n] to c[k,n] (weight gradients).
func matMulTNAcc(c, a, b []float32, m, k, n int) {
	blas32.Gemm(blas.Trans, blas.NoTrans, 1, general(a, m, k), general(b, m, n), 1, general(c, k, n))
}

// matMulNT sets c[m,p] = a[m,n]·b[p,n]ᵀ (input gradients), or adds to c
// when acc is set.
func matMulNT(c, a, b []float32, m, n, p int, acc bool) {
	var beta float32
	if acc {
		beta = 1
	}
	blas32.Gemm(blas.NoTrans, blas.Trans, 1, general(a, m, n), general(b, p, n), beta, general(c, m, p))
}

func general(x []float32, rows, cols int) blas32.General {
	return blas32.General{Rows: rows, Cols: cols, Stride: cols, Data: x[:rows*cols]}
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
