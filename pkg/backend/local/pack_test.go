package local

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// group is one prompt with rollouts: the datums' inputs are the prompt
// followed by replies of the given lengths.
type group struct {
	prompt  int
	replies []int
}

// grpoBatch builds the datums of groups with random tokens. Prompts are
// distinct except for their first three tokens (the common start a chat
// template gives every prompt); replies start with distinct tokens so
// each group's common prefix is exactly its prompt. With extras set every
// datum carries a mask and entropy weights.
func grpoBatch(rng *rand.Rand, groups []group, extras bool) []backend.Datum {
	var data []backend.Datum
	for gi, g := range groups {
		prompt := []int{TokenImStart, 'u', '\n'}
		for len(prompt) < g.prompt {
			prompt = append(prompt, rng.IntN(256))
		}
		prompt = prompt[:g.prompt]
		for ri, n := range g.replies {
			full := slices.Clone(prompt)
			for k := range n + 1 {
				tok := rng.IntN(256)
				if k == 0 {
					tok = (gi*31 + ri) % 256
				}
				full = append(full, tok)
			}
			m := len(full) - 1
			in := backend.LossFnInputs{TargetTokens: full[1:], Logprobs: make([]float64, m), Advantages: make([]float64, m)}
			adv := rng.NormFloat64()
			for t := range m {
				in.Logprobs[t] = -rng.Float64() * 6
				if t >= len(prompt)-1 {
					in.Advantages[t] = adv
				}
			}
			if extras {
				in.Mask, in.EntropyWeights = make([]float64, m), make([]float64, m)
				for t := range m {
					if rng.IntN(4) > 0 {
						in.Mask[t] = 1
					}
					in.EntropyWeights[t] = rng.Float64() - 0.3
				}
			}
			data = append(data, backend.Datum{Input: full[:m], LossFnInputs: in})
		}
	}
	return data
}

// wideBackend is a backend whose weights are drawn wider than the real
// initialisation, so every output and gradient sits well above float32
// rounding and a wrong mask or a missing term shows.
func wideBackend(t testing.TB, cfg Config, workers int, unpacked bool) *Backend {
	t.Helper()
	b, err := New(Options{Config: cfg, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range b.params {
		b.params[i] = float32(rng.NormFloat64() * 0.3)
	}
	b.unpacked = unpacked
	return b
}

func packConfig() Config {
	return Config{Layers: 2, DModel: 16, Heads: 2, DFF: 24, Context: 48, Seed: 9}
}

func TestPackedMatchesUnpacked(t *testing.T) {
	eights := func(lens ...int) []int { return lens }
	cases := []struct {
		name   string
		groups []group
		extras bool
		loss   backend.Loss
		packs  int // packs planned; each group of two or more is one
	}{
		{"groups of 8 with varying replies", []group{{20, eights(1, 4, 2, 7, 3, 3, 5, 1)}, {26, eights(6, 2, 1, 1, 3, 8, 2, 4)}}, false, backend.Loss{Name: backend.LossImportanceSampling}, 2},
		{"a member whose input is the prefix", []group{{15, eights(3, 0, 2, 0, 5, 1, 2, 2)}}, false, backend.Loss{Name: backend.LossPPO}, 1},
		{"masks and entropy weights", []group{{18, eights(2, 5, 1, 3, 4, 2, 6, 1)}, {22, eights(3, 3, 0, 2, 1, 4, 2, 5)}}, true, backend.Loss{Name: backend.LossCISPO}, 2},
		{"groups mixed with singletons", []group{{12, eights(4)}, {20, eights(2, 3, 1, 5)}, {9, eights(3)}, {30, eights(1, 2, 1, 2, 1, 2, 1, 2)}, {16, eights(6)}}, true, backend.Loss{Name: backend.LossImportanceSampling}, 5},
		{"cross-entropy on long shared prompts", []group{{40, eights(7, 1, 3, 2, 5, 4, 6, 2)}}, false, backend.Loss{Name: backend.LossCrossEntropy}, 1},
	}
	ctx := context.Background()
	cfg := packConfig()
	for ci, c := range cases {
		data := grpoBatch(rand.New(rand.NewPCG(uint64(ci), 3)), c.groups, c.extras)
		if got := len(planPacks(data, maxPackRows(cfg))); got != c.packs {
			t.Fatalf("%s: %d packs planned, want %d", c.name, got, c.packs)
		}
		ref := wideBackend(t, cfg, 1, true)
		want, err := ref.ForwardBackward(ctx, data, c.loss).Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, workers := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/%d workers", c.name, workers), func(t *testing.T) {
				b := wideBackend(t, cfg, workers, false)
				fwd, err := b.Forward(ctx, data, c.loss).Result(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got, err := b.ForwardBackward(ctx, data, c.loss).Result(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, out := range []backend.ForwardBackwardOutput{fwd, got} {
					compareOutputs(t, data, want, out)
				}
				if b.gradTokens != ref.gradTokens {
					t.Errorf("gradient tokens %d, unpacked %d", b.gradTokens, ref.gradTokens)
				}
				compareGradients(t, cfg, ref.grad, b.grad)
			})
		}
	}
}

func compareOutputs(t *testing.T, data []backend.Datum, want, got backend.ForwardBackwardOutput) {
	t.Helper()
	close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-5*(1+math.Abs(a)) }
	for i, d := range data {
		w, g := want.LossFnOutputs[i], got.LossFnOutputs[i]
		n := len(d.Input)
		if len(g.Logprobs) != n || len(g.ElementwiseLoss) != n || len(g.Entropies) != n {
			t.Fatalf("datum %d: %d logprobs, %d losses, %d entropies for %d tokens", i, len(g.Logprobs), len(g.ElementwiseLoss), len(g.Entropies), n)
		}
		for k := range n {
			if !close(w.Logprobs[k], g.Logprobs[k]) || !close(w.ElementwiseLoss[k], g.ElementwiseLoss[k]) || !close(w.Entropies[k], g.Entropies[k]) {
				t.Fatalf("datum %d position %d: packed (lp %g, loss %g, H %g), unpacked (lp %g, loss %g, H %g)",
					i, k, g.Logprobs[k], g.ElementwiseLoss[k], g.Entropies[k], w.Logprobs[k], w.ElementwiseLoss[k], w.Entropies[k])
			}
		}
	}
	for _, m := range []string{"loss:sum", "tokens:sum"} {
		if !close(want.Metrics[m], got.Metrics[m]) {
			t.Errorf("%s: packed %g, unpacked %g", m, got.Metrics[m], want.Metrics[m])
		}
	}
}

// compareGradients allows float32 rounding: the packed pass sums a shared
// row's terms before the weight products, the unpacked one after.
func compareGradients(t *testing.T, cfg Config, want, got []float32) {
	t.Helper()
	var scale float64
	for _, v := range want {
		scale = max(scale, math.Abs(float64(v)))
	}
	if scale == 0 {
		t.Fatal("the reference gradient is zero; the comparison is vacuous")
	}
	worst := 0.0
	for i := range want {
		diff := math.Abs(float64(want[i]) - float64(got[i]))
		worst = max(worst, diff)
		if diff > 1e-4*scale+1e-3*math.Abs(float64(want[i])) {
			t.Fatalf("param %d (%s): packed gradient %g, unpacked %g (largest %g)", i, paramName(cfg, i), got[i], want[i], scale)
		}
	}
	t.Logf("largest gradient %.3g, worst difference %.2g", scale, worst)
}

// A member's suffix rows share a packed sequence with the other members'
// rows; the mask must keep them apart. Rewriting one member's reply must
// leave every other member's outputs unchanged to the bit, and must
// change its own.
func TestPackMaskIsolatesMembers(t *testing.T) {
	ctx := context.Background()
	cfg := packConfig()
	b := wideBackend(t, cfg, 1, false)
	data := grpoBatch(rand.New(rand.NewPCG(5, 5)), []group{{14, []int{4, 6, 3, 5}}}, true)
	if packs := planPacks(data, maxPackRows(cfg)); len(packs) != 1 {
		t.Fatalf("%d packs, want the group in one", len(packs))
	}
	loss := backend.Loss{Name: backend.LossImportanceSampling}
	base, err := b.Forward(ctx, data, loss).Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for changed := range data {
		alt := slices.Clone(data)
		alt[changed].Input = slices.Clone(alt[changed].Input)
		for k := 15; k < len(alt[changed].Input); k++ {
			alt[changed].Input[k] = (alt[changed].Input[k] + 101) % 256
		}
		out, err := b.Forward(ctx, alt, loss).Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range data {
			same := slices.Equal(base.LossFnOutputs[i].Logprobs, out.LossFnOutputs[i].Logprobs) &&
				slices.Equal(base.LossFnOutputs[i].Entropies, out.LossFnOutputs[i].Entropies)
			if i != changed && !same {
				t.Errorf("rewriting member %d's reply changed member %d's outputs: the mask leaks", changed, i)
			}
			if i == changed && same {
				t.Errorf("rewriting member %d's reply left its own outputs unchanged: the test is vacuous", i)
			}
		}
	}
}

func TestPlanPacks(t *testing.T) {
	seq := func(prefix []int, tail ...int) []int { return append(slices.Clone(prefix), tail...) }
	p20 := make([]int, 20)
	for i := range p20 {
		p20[i] = i + 1
	}
	q20 := seq(p20[:3], make([]int, 17)...) // shares only 3 tokens with p20
	long := make([]int, 40)
	cases := []struct {
		name    string
		inputs  [][]int
		maxRows int
		want    []pack
	}{
		{"one group", [][]int{seq(p20, 1, 2), seq(p20, 3), seq(p20, 4, 5, 6)}, 512,
			[]pack{{0, 3, 20, 26}}},
		{"longest common prefix, not the prompt", [][]int{seq(p20, 1, 2), seq(p20, 1, 3)}, 512,
			[]pack{{0, 2, 21, 23}}},
		{"a member equal to the prefix", [][]int{seq(p20), seq(p20, 7, 8)}, 512,
			[]pack{{0, 2, 20, 22}}},
		{"groups sharing only a template start stay apart", [][]int{seq(p20, 1), seq(p20, 2), seq(q20, 1), seq(q20, 2)}, 512,
			[]pack{{0, 2, 20, 22}, {2, 4, 20, 22}}},
		{"a singleton before a group stays alone", [][]int{seq(q20, 9), seq(p20, 1), seq(p20, 2)}, 512,
			[]pack{{0, 1, 21, 21}, {1, 3, 20, 22}}},
		{"a suffix longer than the prefix is not packed", [][]int{seq(p20[:4], long...), seq(p20[:4], 1)}, 512,
			[]pack{{0, 1, 44, 44}, {1, 2, 5, 5}}},
		{"identical inputs", [][]int{seq(p20), seq(p20), seq(p20)}, 512,
			[]pack{{0, 3, 20, 20}}},
		{"the row bound splits a group", [][]int{seq(p20, 1, 2), seq(p20, 3, 4), seq(p20, 5, 6), seq(p20, 7, 8)}, 25,
			[]pack{{0, 2, 20, 24}, {2, 4, 20, 24}}},
		{"one-token prefixes are not packed", [][]int{{5, 1}, {5, 2}}, 512,
			[]pack{{0, 1, 2, 2}, {1, 2, 2, 2}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := make([]backend.Datum, len(c.inputs))
			for i, in := range c.inputs {
				data[i].Input = in
			}
			if got := planPacks(data, c.maxRows); !slices.Equal(got, c.want) {
				t.Fatalf("packs %v, want %v", got, c.want)
			}
		})
	}
}
