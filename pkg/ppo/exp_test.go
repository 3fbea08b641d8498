package ppo

import (
	"math"
	"testing"
)

func TestRatioExpAccuracy(t *testing.T) {
	worst := 0.0
	check := func(x float64) {
		want, got := math.Exp(x), ratioExp(x)
		ulp := math.Nextafter(want, math.Inf(1)) - want
		if e := math.Abs(got-want) / ulp; e > worst {
			worst = e
		}
	}
	for i := 0; i <= 2_000_000; i++ {
		check(-20 + 40*float64(i)/2_000_000)
	}
	for _, x := range []float64{-20, 20, 0, math.SmallestNonzeroFloat64, -1e-300, math.Ln2, -math.Ln2, 10.397207708399179} {
		check(x)
	}
	if worst > 2 {
		t.Fatalf("ratioExp is %.2f ulp from math.Exp at worst, want ≤ 2", worst)
	}
	t.Logf("worst difference from math.Exp: %.0f ulp", worst)
	if ratioExp(0) != 1 {
		t.Fatalf("ratioExp(0) = %v", ratioExp(0))
	}
}
