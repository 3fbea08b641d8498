package local

import "testing"

// plainMatMul is the kernel gonum replaced: c[m,n] = a[m,k]·b[k,n] with
// a 4-way unrolled Go axpy per row. Kept to show what gonum buys.
func plainMatMul(c, a, b []float32, m, k, n int) {
	for i := range m {
		ci := c[i*n : (i+1)*n]
		clear(ci)
		for p, av := range a[i*k : (i+1)*k] {
			axpy(av, b[p*n:(p+1)*n], ci)
		}
	}
}

func benchSingleCore(b *testing.B, mul func(c, a, w []float32, m, k, n int)) {
	shapes := matmulShapes(DefaultConfig())
	flops := 0.0
	var as, ws, os [][]float32
	for _, s := range shapes {
		a, w := make([]float32, benchRows*s[0]), make([]float32, s[0]*s[1])
		for j := range a {
			a[j] = float32(j%7) * 0.1
		}
		for j := range w {
			w[j] = float32(j%5) * 0.1
		}
		as, ws, os = append(as, a), append(ws, w), append(os, make([]float32, benchRows*s[1]))
		flops += 2 * float64(benchRows*s[0]*s[1])
	}
	for b.Loop() {
		for i, s := range shapes {
			mul(os[i], as[i], ws[i], benchRows, s[0], s[1])
		}
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkMatMulOneCoreGonum(b *testing.B)   { benchSingleCore(b, matMul) }
func BenchmarkMatMulOneCorePlainGo(b *testing.B) { benchSingleCore(b, plainMatMul) }

func TestPlainMatMulAgreesWithGonum(t *testing.T) {
	a := []float32{1, 2, 3, 4, 5, 6}
	w := []float32{1, 0, 2, 1, 3, 1}
	want, got := make([]float32, 4), make([]float32, 4)
	plainMatMul(want, a, w, 2, 3, 2)
	matMul(got, a, w, 2, 3, 2)
	// [1 2 3; 4 5 6]·[1 0; 2 1; 3 1] = [14 5; 32 11]
	for i, v := range []float32{14, 5, 32, 11} {
		if got[i] != v || want[i] != v {
			t.Fatalf("products %v and %v, want [14 5 32 11]", got, want)
		}
	}
}
