package ppo

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

func randomGroups(rng *rand.Rand, n, numGroups int) []int {
	g := make([]int, n)
	for i := range g {
		g[i] = rng.IntN(numGroups)
	}
	// make every group non-empty so numGroups is exact
	for i := 0; i < numGroups && i < n; i++ {
		g[i] = i
	}
	return g
}

func TestGRPOZeroMeanAndShiftInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var ws Workspace
	for _, ref := range []Reference{ReferenceVerl, ReferenceRLLM} {
		for _, norm := range []bool{true, false} {
			for trial := 0; trial < 50; trial++ {
				n, ng := 1+rng.IntN(60), 1+rng.IntN(8)
				groups := randomGroups(rng, n, ng)
				r := make([]float64, n)
				for i := range r {
					r[i] = rng.NormFloat64() * 3
				}
				a := make([]float64, n)
				if err := GRPO(r, groups, ng, norm, 1e-6, ref, &ws, a); err != nil {
					t.Fatal(err)
				}
				sum := make([]float64, ng)
				count := make([]int, ng)
				for i, g := range groups {
					sum[g] += a[i]
					count[g]++
				}
				for g := range sum {
					if count[g] > 1 && math.Abs(sum[g]) > 1e-9 {
						t.Fatalf("group %d advantages sum to %g, want 0", g, sum[g])
					}
				}
				shift := rng.NormFloat64() * 10
				rs := make([]float64, n)
				for i := range r {
					rs[i] = r[i] + shift
				}
				b := make([]float64, n)
				if err := GRPO(rs, groups, ng, norm, 1e-6, ref, &ws, b); err != nil {
					t.Fatal(err)
				}
				for i := range a {
					if count[groups[i]] > 1 && math.Abs(a[i]-b[i]) > 1e-8*math.Max(1, math.Abs(a[i])) {
						t.Fatalf("shift by %g changed advantage %d from %g to %g", shift, i, a[i], b[i])
					}
				}
			}
		}
	}
}

// Contiguous groups take a fast path; it must agree with the scattered one.
func TestGRPOContiguousMatchesScattered(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n, size = 64, 8
	r := make([]float64, n)
	groups := make([]int, n)
	for i := range r {
		r[i], groups[i] = rng.Float64(), i/size
	}
	perm := rng.Perm(n)
	pr, pg := make([]float64, n), make([]int, n)
	for i, p := range perm {
		pr[i], pg[i] = r[p], groups[p]
	}
	var ws Workspace
	a, b := make([]float64, n), make([]float64, n)
	if err := GRPO(r, groups, n/size, true, 1e-6, ReferenceVerl, &ws, a); err != nil {
		t.Fatal(err)
	}
	if err := GRPO(pr, pg, n/size, true, 1e-6, ReferenceVerl, &ws, b); err != nil {
		t.Fatal(err)
	}
	for i, p := range perm {
		if math.Abs(b[i]-a[p]) > 1e-12 {
			t.Fatalf("scattered %g != contiguous %g", b[i], a[p])
		}
	}
}

func TestRLOOIsRewardMinusMeanOfOthers(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var ws Workspace
	for trial := 0; trial < 50; trial++ {
		n, ng := 2+rng.IntN(40), 1+rng.IntN(5)
		groups := randomGroups(rng, n, ng)
		r := make([]float64, n)
		for i := range r {
			r[i] = rng.NormFloat64()
		}
		a := make([]float64, n)
		if err := RLOO(r, groups, ng, &ws, a); err != nil {
			t.Fatal(err)
		}
		for i := range r {
			var others float64
			k := 0
			for j := range r {
				if j != i && groups[j] == groups[i] {
					others += r[j]
					k++
				}
			}
			want := r[i]
			if k > 0 {
				want = r[i] - others/float64(k)
			}
			if math.Abs(a[i]-want) > 1e-12 {
				t.Fatalf("rloo[%d] = %g, want %g", i, a[i], want)
			}
		}
	}
}

// lossAt evaluates the loss with logprob t replaced by x (and, when
// shiftOld, the old logprob moved by the same amount).
func lossAt(t *testing.T, in LossInput, cfg *LossConfig, tok int, h float64, shiftOld bool) float64 {
	t.Helper()
	lp := append([]float64(nil), in.Logprobs...)
	lp[tok] += h
	in.Logprobs = lp
	if shiftOld {
		old := append([]float64(nil), in.OldLogprobs...)
		old[tok] += h
		in.OldLogprobs = old
	}
	res, err := PolicyLoss(&in, cfg, make([]float64, len(lp)))
	if err != nil {
		t.Fatal(err)
	}
	return res.Loss
}

// TestGradientMatchesFiniteDifferences checks every loss's gradient against
// central differences of its value. CISPO's ratio carries a stop-gradient,
// so its check moves the old logprob with the new one (the ratio stays put
// and only the lp factor changes); GSPO's token form equals the gradient of
// its value when advantages are constant over a sequence, as outcome
// advantages are.
func TestGradientMatchesFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	offsets := []int{0, 5, 9, 16, 18}
	n := offsets[len(offsets)-1]
	type variant struct {
		name string
		cfg  func(*LossConfig)
	}
	var variants []variant
	for _, agg := range []AggMode{AggTokenMean, AggSeqMeanTokenSum, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm} {
		for _, loss := range []PolicyLossKind{LossPPO, LossImportanceSampling, LossCISPO, LossGSPO} {
			variants = append(variants, variant{string(loss) + "/" + string(agg), func(c *LossConfig) { c.Loss, c.AggMode = loss, agg }})
		}
		for _, kl := range []KLType{KLK1, KLAbs, KLK2, KLK3} {
			variants = append(variants, variant{"ppo+kl " + string(kl) + "/" + string(agg), func(c *LossConfig) {
				c.AggMode, c.KLCoef, c.KLType, c.EntropyCoeff = agg, 0.3, kl, 0.01
			}})
		}
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for trial := 0; trial < 5; trial++ {
				cfg := DefaultLossConfig()
				cfg.ClipRatioLow, cfg.ClipRatioHigh = 0.2, 0.28
				v.cfg(&cfg)
				in := LossInput{Offsets: offsets, Logprobs: make([]float64, n), OldLogprobs: make([]float64, n), Advantages: make([]float64, n), Mask: make([]float64, n), RefLogprobs: make([]float64, n), Entropies: make([]float64, n)}
				for i := 0; i+1 < len(offsets); i++ {
					a := rng.NormFloat64()
					for t := offsets[i]; t < offsets[i+1]; t++ {
						in.Logprobs[t] = -rng.ExpFloat64()
						in.OldLogprobs[t] = in.Logprobs[t] + rng.NormFloat64()*0.3
						in.RefLogprobs[t] = in.Logprobs[t] + rng.NormFloat64()*0.5
						in.Entropies[t] = rng.Float64()
						in.Advantages[t] = a
						if cfg.Loss != LossGSPO {
							in.Advantages[t] = rng.NormFloat64()
						}
						if rng.Float64() < 0.8 {
							in.Mask[t] = 1
						}
					}
				}
				grad := make([]float64, n)
				if _, err := PolicyLoss(&in, &cfg, grad); err != nil {
					t.Fatal(err)
				}
				const h = 1e-6
				for tok := 0; tok < n; tok++ {
					shift := cfg.Loss == LossCISPO
					fd := (lossAt(t, in, &cfg, tok, h, shift) - lossAt(t, in, &cfg, tok, -h, shift)) / (2 * h)
					if nearKink(&in, &cfg, tok, 1e-4) {
						continue
					}
					if math.Abs(fd-grad[tok]) > 1e-6*math.Max(math.Abs(grad[tok]), 1e-3) {
						t.Fatalf("token %d: gradient %.12g, finite difference %.12g", tok, grad[tok], fd)
					}
				}
			}
		})
	}
}

// nearKink reports tokens whose ratio sits within d of a clip boundary,
// where a finite difference straddles the kink.
func nearKink(in *LossInput, cfg *LossConfig, tok int, d float64) bool {
	r := math.Exp(in.Logprobs[tok] - in.OldLogprobs[tok])
	if cfg.Loss == LossGSPO {
		i := 0
		for in.Offsets[i+1] <= tok {
			i++
		}
		var m, x float64
		for t := in.Offsets[i]; t < in.Offsets[i+1]; t++ {
			m += in.Mask[t]
			x += (in.Logprobs[t] - in.OldLogprobs[t]) * in.Mask[t]
		}
		r = math.Exp(x / math.Max(m, 1))
	}
	for _, b := range []float64{1 - cfg.ClipRatioLow, 1 + cfg.ClipRatioHigh, cfg.ClipRatioC} {
		if math.Abs(r-b) < d {
			return true
		}
	}
	return math.Abs(in.Logprobs[tok]-in.RefLogprobs[tok]) < d // abs KL's kink
}

func TestAllMaskedGivesZero(t *testing.T) {
	for _, loss := range []PolicyLossKind{LossPPO, LossImportanceSampling, LossCISPO, LossGSPO} {
		for _, agg := range []AggMode{AggTokenMean, AggSeqMeanTokenSum, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm} {
			cfg := DefaultLossConfig()
			cfg.Loss, cfg.AggMode, cfg.KLCoef, cfg.EntropyCoeff = loss, agg, 0.1, 0.1
			in := LossInput{Offsets: []int{0, 2, 3}, Logprobs: []float64{-1, -2, -3}, OldLogprobs: []float64{-1.5, -2, -2}, Advantages: []float64{1, -1, 2}, Mask: []float64{0, 0, 0}, RefLogprobs: []float64{-1, -1, -1}, Entropies: []float64{1, 1, 1}}
			grad := []float64{9, 9, 9}
			res, err := PolicyLoss(&in, &cfg, grad)
			if err != nil {
				t.Fatal(err)
			}
			if res.Loss != 0 || grad[0] != 0 || grad[1] != 0 || grad[2] != 0 {
				t.Errorf("%s/%s: loss %g grad %v, want all 0", loss, agg, res.Loss, grad)
			}
			if math.IsNaN(res.Metrics.ClipFrac) || math.IsNaN(res.Metrics.PPOKL) || math.IsNaN(res.Metrics.RatioMean) {
				t.Errorf("%s/%s: NaN metric %+v", loss, agg, res.Metrics)
			}
		}
	}
}

func TestEdgeCases(t *testing.T) {
	var ws Workspace
	nan, inf := math.NaN(), math.Inf(1)
	t.Run("empty batch", func(t *testing.T) {
		for _, name := range Names() {
			est, _ := Lookup(name)
			cfg := DefaultConfig()
			in := Input{Tokens: TokenInput{Offsets: []int{0}}}
			if err := est.Compute(&in, &cfg, &ws, &Output{}); err != nil {
				t.Errorf("%s on an empty batch: %v", name, err)
			}
		}
		cfg := DefaultLossConfig()
		res, err := PolicyLoss(&LossInput{Offsets: []int{0}}, &cfg, nil)
		if err != nil || res.Loss != 0 {
			t.Errorf("empty loss: %v %v", res.Loss, err)
		}
	})
	t.Run("one episode", func(t *testing.T) {
		a := []float64{0}
		for _, name := range []string{"grpo", "rloo", "reinforce", "opo", "reinforce_plus_plus_baseline"} {
			est, _ := Lookup(name)
			cfg := DefaultConfig()
			in := Input{Rewards: []float64{1}, Groups: []int{0}, NumGroups: 1, Lengths: []float64{1}}
			if err := est.Compute(&in, &cfg, &ws, &Output{Sequence: a}); err != nil || math.IsNaN(a[0]) {
				t.Errorf("%s one episode: %v %v", name, a, err)
			}
		}
		cfg := DefaultConfig()
		adv, ret := []float64{7}, []float64{7}
		if err := GAE(&TokenInput{Offsets: []int{0, 1}, Rewards: []float64{1}, Mask: []float64{1}, Values: []float64{0.5}}, &cfg, adv, ret); err != nil || adv[0] != 0 || ret[0] != 1 {
			t.Errorf("gae of one token: adv %v ret %v err %v (whitening one value gives 0)", adv, ret, err)
		}
	})
	t.Run("non-finite rewards", func(t *testing.T) {
		for _, bad := range []float64{nan, inf, -inf} {
			a := []float64{5, 5, 5}
			err := GRPO([]float64{1, bad, 0}, []int{0, 0, 0}, 1, true, 1e-6, ReferenceVerl, &ws, a)
			var nf *NonFiniteError
			if !errors.As(err, &nf) || nf.Index != 1 || nf.Name != "rewards" {
				t.Errorf("GRPO with %v: %v", bad, err)
			}
			for _, x := range a {
				if x != 0 {
					t.Errorf("output not zeroed on error: %v", a)
				}
			}
			adv, ret := make([]float64, 3), make([]float64, 3)
			cfg := DefaultConfig()
			if err := GAE(&TokenInput{Offsets: []int{0, 3}, Rewards: []float64{0, 0, 1}, Mask: []float64{1, 1, 1}, Values: []float64{0, bad, 0}}, &cfg, adv, ret); !errors.As(err, &nf) || nf.Name != "values" || nf.Index != 1 {
				t.Errorf("GAE with value %v: %v", bad, err)
			}
			lcfg := DefaultLossConfig()
			grad := make([]float64, 2)
			_, err = PolicyLoss(&LossInput{Offsets: []int{0, 2}, Logprobs: []float64{-1, -1}, OldLogprobs: []float64{-1, -1}, Advantages: []float64{1, bad}, Mask: []float64{1, 1}}, &lcfg, grad)
			if !errors.As(err, &nf) || nf.Name != "advantages" || nf.Index != 1 {
				t.Errorf("loss with advantage %v: %v", bad, err)
			}
		}
	})
	t.Run("mismatched lengths", func(t *testing.T) {
		err := GRPO([]float64{1, 2}, []int{0, 0, 0}, 1, true, 1e-6, ReferenceVerl, &ws, make([]float64, 2))
		var le *LengthError
		if !errors.As(err, &le) || !strings.Contains(err.Error(), "2") || !strings.Contains(err.Error(), "3") {
			t.Errorf("got %v", err)
		}
		lcfg := DefaultLossConfig()
		_, err = PolicyLoss(&LossInput{Offsets: []int{0, 2}, Logprobs: []float64{-1, -1}, OldLogprobs: []float64{-1}, Advantages: []float64{1, 1}, Mask: []float64{1, 1}}, &lcfg, make([]float64, 2))
		if !errors.As(err, &le) || le.Len != 1 || le.OtherLen != 2 {
			t.Errorf("got %v", err)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		if _, err := Lookup("grpoo"); err == nil || !strings.Contains(err.Error(), "grpo") {
			t.Errorf("unknown estimator: %v", err)
		}
		lcfg := DefaultLossConfig()
		lcfg.ClipRatioC = 1
		_, err := PolicyLoss(&LossInput{Offsets: []int{0}}, &lcfg, nil)
		var ce *usererr.Error
		if !errors.As(err, &ce) || ce.ExitCode() != 2 || ce.Subject != "actor.clip_ratio_c" {
			t.Errorf("clip_ratio_c 1: %v", err)
		}
	})
	t.Run("overflow is an error, not NaN", func(t *testing.T) {
		lcfg := DefaultLossConfig()
		lcfg.Loss = LossCISPO
		grad := make([]float64, 1)
		_, err := PolicyLoss(&LossInput{Offsets: []int{0, 1}, Logprobs: []float64{-1e308}, OldLogprobs: []float64{-1e308}, Advantages: []float64{1e308}, Mask: []float64{1}}, &lcfg, grad)
		if err == nil || grad[0] != 0 {
			t.Errorf("got %v, grad %v", err, grad)
		}
	})
}

func TestStepwise(t *testing.T) {
	adv := []float64{2, -1}
	off := []int{0, 4, 5}
	dst := make([]float64, 5)
	if err := BroadcastSteps(adv, off, false, dst); err != nil {
		t.Fatal(err)
	}
	assertSlice(t, "broadcast", dst, []float64{2, 2, 2, 2, -1}, 0)
	if err := BroadcastSteps(adv, off, true, dst); err != nil {
		t.Fatal(err)
	}
	assertSlice(t, "broadcast/steps", dst, []float64{0.5, 0.5, 0.5, 0.5, -1}, 0)

	// Monte Carlo returns, worked by hand with γ = 0.5:
	// rewards 1, 0, 2 → G = 1 + 0.5·(0 + 0.5·2) = 1.5, 0 + 0.5·2 = 1, 2.
	ret := make([]float64, 4)
	if err := MonteCarloReturns([]float64{1, 0, 2, 3}, []int{0, 3, 4}, 0.5, ret); err != nil {
		t.Fatal(err)
	}
	assertSlice(t, "mc returns", ret, []float64{1.5, 1, 2, 3}, 1e-15)

	// per_step: task 0 has trajectories of 2 and 3 steps, task 1 one of 1.
	var ws Workspace
	ids := make([]int, 6)
	n, err := PerStepGroups([]int{0, 1, 0}, 2, []int{0, 2, 3, 6}, &ws, ids)
	if err != nil {
		t.Fatal(err)
	}
	want := []int{0, 1, 3, 0, 1, 2}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("per-step ids %v, want %v", ids, want)
		}
	}
	if n != 4 {
		t.Fatalf("%d step groups, want 4", n)
	}
}

func TestFilters(t *testing.T) {
	var ws Workspace
	groups := []int{0, 0, 1, 1, 2, 2}
	keep := []bool{true, true, true, true, true, true}
	st, err := RejectionSample(groups, 3, []bool{true, true, false, false, true, false}, &ws, keep)
	if err != nil {
		t.Fatal(err)
	}
	if st != (SolveStats{SolveNone: 1, SolveAll: 1, SolvePartial: 1}) {
		t.Errorf("stats %+v", st)
	}
	if keep[0] || keep[1] || keep[2] || keep[3] || !keep[4] || !keep[5] {
		t.Errorf("keep %v: only the partially solved group stays", keep)
	}
	none, all, partial := st.Fractions()
	if none != 1.0/3 || all != 1.0/3 || partial != 1.0/3 {
		t.Errorf("fractions %v %v %v", none, all, partial)
	}

	keep = []bool{true, true, true, true, true, true}
	dropped, err := DropZeroAdvantageGroups(groups, 3, []float64{0, 1e-9, 0.5, -0.5, 0, 0}, &ws, keep)
	if err != nil || dropped != 2 || keep[0] || !keep[2] || keep[4] {
		t.Errorf("zero advantage: dropped %d keep %v err %v", dropped, keep, err)
	}

	cf := CompactFilter{Enable: true, MaskTimeout: true, MaskError: true}
	keep = []bool{true, true, true, true}
	n, err := cf.Apply([]string{"env_done", "timeout", "error", "max_turns_exceeded"}, keep)
	if err != nil || n != 2 || !keep[0] || keep[1] || keep[2] || !keep[3] {
		t.Errorf("compact: %d %v %v", n, keep, err)
	}
	if (CompactFilter{MaskTimeout: true}).ShouldMask("timeout") {
		t.Error("a disabled compact filter masks nothing")
	}

}

func TestRoleEstimators(t *testing.T) {
	r := RoleEstimators{Default: "grpo", ByRole: map[string]string{"judge": "rloo"}}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if e, _ := r.For("solver"); e.Name != "grpo" {
		t.Errorf("solver uses %s", e.Name)
	}
	if e, _ := r.For("judge"); e.Name != "rloo" {
		t.Errorf("judge uses %s", e.Name)
	}
	bad := RoleEstimators{Default: "grpo", ByRole: map[string]string{"judge": "nope"}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "judge") {
		t.Errorf("got %v", err)
	}
	if err := Register(Estimator{Name: "grpo", Compute: func(*Input, *Config, *Workspace, *Output) error { return nil }}); err == nil {
		t.Error("registering grpo twice must fail")
	}
}

func TestTokenPathsDoNotAllocate(t *testing.T) {
	const n = 1000
	offsets := make([]int, 11)
	for i := range offsets {
		offsets[i] = i * n / 10
	}
	lp, old, adv, mask, grad, vals, rew, ret := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for i := range lp {
		lp[i], old[i], adv[i], mask[i], vals[i], rew[i] = -0.5, -0.6, 1, 1, 0.1, float64(i%3)
	}
	lcfg := DefaultLossConfig()
	in := LossInput{Offsets: offsets, Logprobs: lp, OldLogprobs: old, Advantages: adv, Mask: mask}
	cfg := DefaultConfig()
	tin := TokenInput{Offsets: offsets, Rewards: rew, Mask: mask, Values: vals}
	var ws Workspace
	groups := make([]int, n)
	for i := range groups {
		groups[i] = i / 8
	}
	seq := make([]float64, n)
	_ = GRPO(rew, groups, n/8, true, 1e-6, ReferenceVerl, &ws, seq)
	for name, f := range map[string]func(){
		"loss": func() { _, _ = PolicyLoss(&in, &lcfg, grad) },
		"gae":  func() { _ = GAE(&tin, &cfg, adv, ret) },
		"rf++": func() { _ = ReinforcePP(&tin, &cfg, adv, ret) },
		"grpo": func() { _ = GRPO(rew, groups, n/8, true, 1e-6, ReferenceVerl, &ws, seq) },
	} {
		if a := testing.AllocsPerRun(20, f); a != 0 {
			t.Errorf("%s allocates %v times per call", name, a)
		}
	}
}

// AggregationWeights are the derivative of Aggregate: Σ w·v equals the
// aggregate for every mode.
func TestAggregationWeightsMatchAggregate(t *testing.T) {
	offsets := []int{0, 3, 7, 8, 10}
	mask := []float64{1, 1, 0, 1, 1, 1, 1, 0, 1, 1}
	values := []float64{0.3, -1.2, 5, 0.7, 2.2, -0.4, 1.1, 9, 0.05, -2}
	for _, mode := range []AggMode{AggTokenMean, AggSeqMeanTokenSum, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm} {
		want, err := Aggregate(values, mask, offsets, mode, 16)
		if err != nil {
			t.Fatal(err)
		}
		w := make([]float64, len(mask))
		if err := AggregationWeights(mask, offsets, mode, 16, w); err != nil {
			t.Fatal(err)
		}
		got := 0.0
		for i := range w {
			got += w[i] * values[i]
		}
		if math.Abs(got-want) > 1e-12 {
			t.Errorf("%s: Σ w·v = %g, Aggregate = %g", mode, got, want)
		}
	}
}

// TestTokenEstimatorsZeroOnError: ReinforcePP and GAE leave adv and ret
// zeroed whatever stops them: a malformed input, a non-finite one, or a
// whitening that overflows.
func TestTokenEstimatorsZeroOnError(t *testing.T) {
	big := 1.7e308
	tests := []struct {
		name string
		in   TokenInput
		want string
	}{
		{"length", TokenInput{Offsets: []int{0, 3}, Rewards: []float64{1, 2, 3}, Mask: []float64{1, 1}, Values: []float64{0, 0, 0}}, "mask has length 2"},
		{"nan", TokenInput{Offsets: []int{0, 3}, Rewards: []float64{1, math.NaN(), 3}, Mask: []float64{1, 1, 1}, Values: []float64{0, 0, 0}}, "rewards[1] is NaN"},
		{"overflow", TokenInput{Offsets: []int{0, 1, 2, 3}, Rewards: []float64{big, -big, big}, Mask: []float64{1, 1, 1}, Values: []float64{0, 0, 0}}, "overflowed to ±Inf"},
	}
	estimators := map[string]func(*TokenInput, *Config, []float64, []float64) error{"reinforce_plus_plus": ReinforcePP, "gae": GAE}
	for _, tt := range tests {
		for name, est := range estimators {
			cfg := DefaultConfig()
			cfg.Whiten = true
			adv, ret := []float64{7, 7, 7}, []float64{7, 7, 7}
			err := est(&tt.in, &cfg, adv, ret)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s %s: err %v, want %q", name, tt.name, err, tt.want)
			}
			if slices.ContainsFunc(append(adv, ret...), func(x float64) bool { return x != 0 }) {
				t.Errorf("%s %s: adv %v ret %v not zeroed", name, tt.name, adv, ret)
			}
		}
	}
}
