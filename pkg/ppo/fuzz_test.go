package ppo

import (
	"encoding/binary"
	"math"
	"testing"
)

// floatsFrom turns fuzz bytes into float64s, NaN and ±Inf included.
func floatsFrom(b []byte, n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		if len(b) >= 8 {
			xs[i] = math.Float64frombits(binary.LittleEndian.Uint64(b))
			b = b[8:]
		}
	}
	return xs
}

func assertNoNaN(t *testing.T, what string, xs ...float64) {
	t.Helper()
	for i, x := range xs {
		if math.IsNaN(x) {
			t.Fatalf("%s[%d] is NaN", what, i)
		}
	}
}

func FuzzOutcomeEstimators(f *testing.F) {
	f.Add([]byte{}, uint8(3), uint8(2))
	f.Add(make([]byte, 64), uint8(8), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, n, ng uint8) {
		size := int(n % 32)
		numGroups := 1 + int(ng%5)
		rewards := floatsFrom(data, size)
		lengths := make([]float64, size)
		groups := make([]int, size)
		for i := range groups {
			groups[i] = i % numGroups
			lengths[i] = float64(1 + i%4)
		}
		var ws Workspace
		for _, name := range Names() {
			est, _ := Lookup(name)
			if est.Level != Outcome {
				continue
			}
			for _, ref := range []Reference{ReferenceVerl, ReferenceRLLM} {
				cfg := DefaultConfig()
				cfg.Reference = ref
				out := Output{Sequence: make([]float64, size)}
				in := Input{Rewards: rewards, Groups: groups, NumGroups: numGroups, Lengths: lengths}
				err := est.Compute(&in, &cfg, &ws, &out)
				assertNoNaN(t, name, out.Sequence...)
				if err == nil {
					for _, x := range out.Sequence {
						if math.IsInf(x, 0) && !hasHuge(rewards) {
							t.Fatalf("%s gave Inf from moderate rewards %v", name, rewards)
						}
					}
				}
			}
		}
	})
}

func hasHuge(xs []float64) bool {
	for _, x := range xs {
		if math.Abs(x) > 1e300 {
			return true
		}
	}
	return false
}

func FuzzTokenEstimators(f *testing.F) {
	f.Add([]byte{}, uint8(4), uint8(2), 0.9, 0.95)
	f.Fuzz(func(t *testing.T, data []byte, n, seqs uint8, gamma, lam float64) {
		size := int(n % 40)
		ns := 1 + int(seqs%4)
		offsets := make([]int, ns+1)
		for i := range offsets {
			offsets[i] = i * size / ns
		}
		rewards := floatsFrom(data, size)
		values := floatsFrom(data[min(len(data), 8*size):], size)
		mask := make([]float64, size)
		for i := range mask {
			mask[i] = float64((i / 3) % 2)
		}
		cfg := DefaultConfig()
		cfg.Gamma, cfg.Lam = gamma, lam
		adv, ret := make([]float64, size), make([]float64, size)
		in := TokenInput{Offsets: offsets, Rewards: rewards, Mask: mask, Values: values}
		_ = GAE(&in, &cfg, adv, ret)
		assertNoNaN(t, "gae advantages", adv...)
		assertNoNaN(t, "gae returns", ret...)
		_ = ReinforcePP(&in, &cfg, adv, ret)
		assertNoNaN(t, "rf++ advantages", adv...)
		assertNoNaN(t, "rf++ returns", ret...)
	})
}

func FuzzPolicyLoss(f *testing.F) {
	f.Add([]byte{}, uint8(5), uint8(0), uint8(0), 0.2, 0.28, 3.0)
	f.Add(make([]byte, 200), uint8(9), uint8(2), uint8(3), 0.1, 0.1, 1.5)
	f.Fuzz(func(t *testing.T, data []byte, n, lossKind, agg uint8, low, high, c float64) {
		size := int(n % 24)
		offsets := []int{0, size / 3, size}
		cfg := DefaultLossConfig()
		cfg.Loss = []PolicyLossKind{LossPPO, LossImportanceSampling, LossCISPO, LossGSPO}[lossKind%4]
		cfg.AggMode = []AggMode{AggTokenMean, AggSeqMeanTokenSum, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm}[agg%4]
		cfg.ClipRatioLow, cfg.ClipRatioHigh, cfg.ClipRatioC = low, high, c
		cfg.KLCoef, cfg.EntropyCoeff = 0.1, 0.01
		in := LossInput{
			Offsets:     offsets,
			Logprobs:    floatsFrom(data, size),
			OldLogprobs: floatsFrom(data[min(len(data), 8*size):], size),
			Advantages:  floatsFrom(data[min(len(data), 16*size):], size),
			Mask:        make([]float64, size),
			RefLogprobs: floatsFrom(data[min(len(data), 24*size):], size),
			Entropies:   make([]float64, size),
		}
		for i := range in.Mask {
			in.Mask[i] = float64(i % 2)
		}
		grad := make([]float64, size)
		res, err := PolicyLoss(&in, &cfg, grad)
		assertNoNaN(t, "gradient", grad...)
		assertNoNaN(t, "loss", res.Loss, res.Metrics.ClipFrac, res.Metrics.PPOKL, res.Metrics.RatioMean, res.Metrics.KLLoss)
		if err != nil && res.Loss != 0 {
			t.Fatalf("error %v with loss %g", err, res.Loss)
		}
	})
}
