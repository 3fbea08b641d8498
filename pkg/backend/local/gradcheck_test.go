package local

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// tinyConfig is small enough to check every parameter by finite
// differences.
func tinyConfig() Config {
	return Config{Layers: 2, DModel: 8, Heads: 2, DFF: 12, Context: 8, Seed: 3}
}

// TestGradientsMatchFiniteDifferences checks the hand-written backward
// pass of every op against central differences of the float32 forward,
// for Σ coef·logprob and, with entropy weights, Σ coef·logprob + Σ e·H.
// The weights are drawn wider than the real initialisation (std 0.3) so
// every path carries a gradient well above float32 rounding noise.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	t.Run("logprobs", func(t *testing.T) { checkGradients(t, nil) })
	t.Run("logprobs and entropy", func(t *testing.T) { checkGradients(t, []float64{1, -0.5, 0, 2, 0.75, -1, 0.3}) })
	t.Run("packed", checkPackedGradients)
}

// wideRandomModel is the tiny config with weights of std 0.3 (wide enough
// that every term of the gradient matters), a zero gradient, and their
// views, and the random stream, to draw more from.
func wideRandomModel(seed1, seed2 uint64) (cfg Config, flat, grad []float32, w, g *weights, rng *rand.Rand) {
	cfg = tinyConfig().withDefaults()
	_, n := layout(cfg)
	rng = rand.New(rand.NewPCG(seed1, seed2))
	flat = make([]float32, n)
	for i := range flat {
		flat[i] = float32(rng.NormFloat64() * 0.3)
	}
	grad = make([]float32, n)
	return cfg, flat, grad, bindWeights(cfg, flat), bindWeights(cfg, grad), rng
}

func checkGradients(t *testing.T, dH []float64) {
	cfg, flat, grad, w, g, _ := wideRandomModel(7, 7)

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
			if dH != nil {
				s += dH[i] * ws.entropy(i)
			}
		}
		return s
	}
	objective()
	ws.backward(w, g, targets, coef, dH)
	compareFiniteDifferences(t, cfg, flat, grad, objective)
}

// checkPackedGradients checks the packed path end to end: four members
// (one whose input is the prefix) with weights, a mask and entropy
// weights, more rows than the context, the objective the sum of the
// elementwise losses.
func checkPackedGradients(t *testing.T) {
	cfg, flat, grad, w, g, rng := wideRandomModel(8, 8)

	prefix := []int{TokenImStart, 'a', '3'}
	var data []backend.Datum
	for _, tail := range [][]int{{'+', '4'}, {}, {'=', '7', 'x', 'y'}, {'-', '1', '2'}} {
		in := append(slices.Clone(prefix), tail...)
		m := len(in)
		li := backend.LossFnInputs{TargetTokens: make([]int, m), Weights: make([]float64, m), Mask: make([]float64, m), EntropyWeights: make([]float64, m)}
		for k := range m {
			li.TargetTokens[k] = rng.IntN(TokenizerVocab)
			li.Weights[k] = rng.Float64()*3 - 1.5
			li.Mask[k] = float64(min(1, rng.IntN(5)))
			li.EntropyWeights[k] = rng.Float64() - 0.5
		}
		data = append(data, backend.Datum{Input: in, LossFnInputs: li})
	}
	packs := planPacks(data, maxPackRows(cfg))
	if len(packs) != 1 || packs[0].rows <= cfg.Context {
		t.Fatalf("packs %v; want one pack longer than the context", packs)
	}
	loss := backend.Loss{Name: backend.LossCrossEntropy}
	outs := make([]backend.LossFnOutput, len(data))
	ws := newWorkspace(cfg)
	objective := func() float64 {
		ws.runPack(w, nil, data, packs[0], loss, outs)
		var s float64
		for _, o := range outs {
			for _, l := range o.ElementwiseLoss {
				s += l
			}
		}
		return s
	}
	ws.runPack(w, g, data, packs[0], loss, outs)
	compareFiniteDifferences(t, cfg, flat, grad, objective)
}

// compareFiniteDifferences checks grad, the backward pass's gradient of
// objective at flat, against central differences, parameter by parameter.
func compareFiniteDifferences(t *testing.T, cfg Config, flat, grad []float32, objective func() float64) {
	t.Helper()
	n := len(flat)
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

// Entropy against worked values: uniform logits give log V; two equal
// logits far above the rest give log 2; one dominant logit gives ≈ 0.
func TestEntropyWorkedValues(t *testing.T) {
	ws := newWorkspace(tinyConfig())
	V := TokenizerVocab
	set := func(row []float32) {
		copy(ws.logits[:V], row)
		ws.lse[0] = logSumExp(row)
	}
	tests := []struct {
		name string
		row  func([]float32)
		want float64
	}{
		{"uniform", func(r []float32) {}, math.Log(float64(V))},
		{"two of all", func(r []float32) { r[3], r[9] = 60, 60 }, math.Log(2)},
		{"one of all", func(r []float32) { r[5] = 80 }, 0},
	}
	for _, tt := range tests {
		row := make([]float32, V)
		tt.row(row)
		set(row)
		if got := ws.entropy(0); math.Abs(got-tt.want) > 1e-6 {
			t.Errorf("%s: entropy %g, want %g", tt.name, got, tt.want)
		}
	}
}
