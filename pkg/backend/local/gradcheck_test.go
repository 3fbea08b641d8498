package local

import (
	"math"
	"math/rand/v2"
	"testing"
)

// tinyConfig is small enough to check every parameter by finite
// differences.
func tinyConfig() Config {
	return Config{Layers: 2, DModel: 8, Heads: 2, DFF: 12, Context: 8, Seed: 3}
}

// TestGradientsMatchFiniteDifferences checks the hand-written backward
// pass of every op against central differences of the float32 forward.
// The weights are drawn wider than the real initialisation (std 0.3) so
// every path carries a gradient well above float32 rounding noise.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	cfg := tinyConfig().withDefaults()
	_, n := layout(cfg)
	rng := rand.New(rand.NewPCG(7, 7))
	flat := make([]float32, n)
	for i := range flat {
		flat[i] = float32(rng.NormFloat64() * 0.3)
	}
	w := bindWeights(cfg, flat)
	grad := make([]float32, n)
	g := bindWeights(cfg, grad)

	tokens := []int{TokenImStart, 'a', '3', '+', '4', '=', TokenImEnd}
	targets := []int{'a', '3', '+', '4', '=', '7', TokenImEnd}
	coef := []float64{0.5, -1, 2, 0.25, -0.75, 1.5, -1.25}

	ws := newWorkspace(cfg)
	objective := func() float64 {
		ws.forward(w, tokens)
		lp := make([]float64, len(targets))
		ws.targetLogprobs(targets, lp)
		var s float64
		for i := range lp {
			s += coef[i] * lp[i]
		}
		return s
	}
	objective()
	ws.backward(w, g, tokens, targets, coef)

	const h = 1e-2
	checked, worst := 0, 0.0
	for i := range flat {
		orig := flat[i]
		flat[i] = orig + h
		up := objective()
		flat[i] = orig - h
		down := objective()
		flat[i] = orig
		num := (up - down) / (2 * h)
		ana := float64(grad[i])
		diff := math.Abs(num - ana)
		if diff > 2e-2*math.Max(math.Abs(num), math.Abs(ana))+2e-3 {
			t.Errorf("param %d (%s): backward %g, finite difference %g", i, paramName(cfg, i), ana, num)
		}
		if num != 0 {
			checked++
			worst = math.Max(worst, diff)
		}
	}
	if checked < n/4 {
		t.Fatalf("only %d of %d parameters had a nonzero gradient; the check is too weak", checked, n)
	}
	t.Logf("%d parameters with gradient, worst absolute difference %.2g", checked, worst)
}

func paramName(c Config, i int) string {
	specs, _ := layout(c)
	for _, s := range specs {
		if i >= s.Offset && i < s.Offset+s.Size {
			return s.Name
		}
	}
	return "?"
}
