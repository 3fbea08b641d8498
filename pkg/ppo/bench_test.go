package ppo

import (
	"math/rand/v2"
	"testing"
)

// Benchmarks at the sizes of the issue. Each estimator or loss sits beside a
// plain copy of the same arrays (every input copied to an output-sized
// buffer), the memory-bandwidth bound it is compared with.

const (
	benchEpisodes = 1_000_000
	benchGroup    = 8
	benchTokens   = 10_000_000
	benchSeqLen   = 500 // tokens per sequence
)

type grpoData struct {
	rewards, adv []float64
	groups       []int
	ws           Workspace
}

func newGRPOData() *grpoData {
	rng := rand.New(rand.NewPCG(1, 1))
	d := &grpoData{rewards: make([]float64, benchEpisodes), adv: make([]float64, benchEpisodes), groups: make([]int, benchEpisodes)}
	for i := range d.rewards {
		d.rewards[i] = float64(rng.IntN(2))
		d.groups[i] = i / benchGroup
	}
	return d
}

func BenchmarkGRPO1MEpisodes(b *testing.B) {
	d := newGRPOData()
	b.SetBytes(int64(benchEpisodes * 8 * 3))
	b.ReportAllocs()
	_ = GRPO(d.rewards, d.groups, benchEpisodes/benchGroup, true, 1e-6, ReferenceVerl, &d.ws, d.adv) // size the workspace
	for b.Loop() {
		if err := GRPO(d.rewards, d.groups, benchEpisodes/benchGroup, true, 1e-6, ReferenceVerl, &d.ws, d.adv); err != nil {
			b.Fatal(err)
		}
	}
}

// Interleaved groups take the scattered path.
func BenchmarkGRPO1MEpisodesScattered(b *testing.B) {
	d := newGRPOData()
	for i := range d.groups {
		d.groups[i] = i % (benchEpisodes / benchGroup)
	}
	b.SetBytes(int64(benchEpisodes * 8 * 3))
	b.ReportAllocs()
	_ = GRPO(d.rewards, d.groups, benchEpisodes/benchGroup, true, 1e-6, ReferenceVerl, &d.ws, d.adv) // size the workspace
	for b.Loop() {
		if err := GRPO(d.rewards, d.groups, benchEpisodes/benchGroup, true, 1e-6, ReferenceVerl, &d.ws, d.adv); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGRPOCopyBound(b *testing.B) {
	d := newGRPOData()
	groups := make([]int, benchEpisodes)
	b.SetBytes(int64(benchEpisodes * 8 * 3))
	b.ReportAllocs()
	for b.Loop() {
		copy(d.adv, d.rewards)
		copy(groups, d.groups)
	}
}

type tokenData struct {
	offsets                               []int
	lp, old, adv, mask, grad, values, ret []float64
	rewards                               []float64
}

func newTokenData() *tokenData {
	rng := rand.New(rand.NewPCG(2, 2))
	n := benchTokens
	d := &tokenData{offsets: make([]int, n/benchSeqLen+1)}
	for _, p := range []*[]float64{&d.lp, &d.old, &d.adv, &d.mask, &d.grad, &d.values, &d.ret, &d.rewards} {
		*p = make([]float64, n)
	}
	for i := range d.offsets {
		d.offsets[i] = i * benchSeqLen
	}
	for t := 0; t < n; t++ {
		d.lp[t] = -rng.ExpFloat64()
		d.old[t] = d.lp[t] + rng.NormFloat64()*0.1
		d.adv[t] = rng.NormFloat64()
		d.values[t] = rng.NormFloat64()
		if t%benchSeqLen < benchSeqLen-20 { // padding at the end of each sequence
			d.mask[t] = 1
		}
		if t%benchSeqLen == benchSeqLen-21 {
			d.rewards[t] = float64(rng.IntN(2))
		}
	}
	return d
}

func BenchmarkPPOLoss10MTokens(b *testing.B) {
	d := newTokenData()
	cfg := DefaultLossConfig()
	in := LossInput{Offsets: d.offsets, Logprobs: d.lp, OldLogprobs: d.old, Advantages: d.adv, Mask: d.mask}
	b.SetBytes(int64(benchTokens * 8 * 5))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PolicyLoss(&in, &cfg, d.grad); err != nil {
			b.Fatal(err)
		}
	}
}

// The PPO loss reads logprobs, old logprobs, advantages and mask and writes
// the gradient: its bound copies the four inputs.
func BenchmarkPPOLossCopyBound(b *testing.B) {
	d := newTokenData()
	dst := [4][]float64{make([]float64, benchTokens), make([]float64, benchTokens), make([]float64, benchTokens), d.grad}
	b.SetBytes(int64(benchTokens * 8 * 5))
	b.ReportAllocs()
	for b.Loop() {
		copy(dst[0], d.lp)
		copy(dst[1], d.old)
		copy(dst[2], d.adv)
		copy(dst[3], d.mask)
	}
}

func BenchmarkGAE10MTokens(b *testing.B) {
	d := newTokenData()
	cfg := DefaultConfig()
	in := TokenInput{Offsets: d.offsets, Rewards: d.rewards, Mask: d.mask, Values: d.values}
	b.SetBytes(int64(benchTokens * 8 * 5))
	b.ReportAllocs()
	for b.Loop() {
		if err := GAE(&in, &cfg, d.adv, d.ret); err != nil {
			b.Fatal(err)
		}
	}
}

// GAE reads rewards, values and mask and writes advantages and returns: its
// bound copies the three inputs.
func BenchmarkGAECopyBound(b *testing.B) {
	d := newTokenData()
	b.SetBytes(int64(benchTokens * 8 * 5))
	b.ReportAllocs()
	for b.Loop() {
		copy(d.adv, d.rewards)
		copy(d.ret, d.values)
		copy(d.grad, d.mask)
	}
}
