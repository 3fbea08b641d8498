package backend

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// The expected values are the formulas of the Tinker reference
// (shared reference tinker-api.md, "Built-in losses") worked by hand.
func TestLossTokenValues(t *testing.T) {
	in := &LossFnInputs{
		TargetTokens: []int{1, 2, 3},
		Logprobs:     []float64{-1, -1, -1},
		Advantages:   []float64{2, -1, 0.5},
		Weights:      []float64{0.5, 1, 2},
	}
	ppo := Loss{Name: LossPPO}
	cases := []struct {
		name     string
		loss     Loss
		i        int
		lp       float64
		wantLoss float64
		wantD    float64
	}{
		{"ce", Loss{Name: LossCrossEntropy}, 0, -2, 1, -0.5},
		{"ce weight 2", Loss{Name: LossCrossEntropy}, 2, -0.25, 0.5, -2},
		{"is ratio 1", Loss{Name: LossImportanceSampling}, 0, -1, -2, -2},
		{"is ratio e", Loss{Name: LossImportanceSampling}, 1, 0, math.E, math.E},
		// r = e^0.1 ≈ 1.105 inside [0.8, 1.2]: unclipped.
		{"ppo inside", ppo, 0, -0.9, -2 * math.Exp(0.1), -2 * math.Exp(0.1)},
		// r = e^0.5 ≈ 1.65 > 1.2 with A > 0: clipped to 1.2·A, no gradient.
		{"ppo clipped high", ppo, 0, -0.5, -2.4, 0},
		// r = e^0.5 with A < 0: min picks r·A (more pessimistic), gradient flows.
		{"ppo negative adv", ppo, 1, -0.5, math.Exp(0.5), math.Exp(0.5)},
		// r = e^-1 ≈ 0.37 < 0.8 with A < 0: clipped 0.8·A = -0.8 > r·A? r·A = -0.37 > -0.8 so min is -0.8 (clipped).
		{"ppo clipped low", ppo, 1, -2, 0.8, 0},
		{"ppo custom clip", Loss{Name: LossPPO, Config: map[string]float64{ClipHighThreshold: 2}}, 0, -0.5, -2 * math.Exp(0.5), -2 * math.Exp(0.5)},
		// cispo: −clip(r, 0, 4)·lp·A; r = e^3 ≈ 20 clips to 4.
		{"cispo clipped", Loss{Name: LossCISPO}, 2, 2, -4 * 2 * 0.5, -4 * 0.5},
		{"cispo inside", Loss{Name: LossCISPO}, 0, -1, -1 * -1 * 2, -2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, d := c.loss.Token(in, c.i, c.lp)
			if math.Abs(l-c.wantLoss) > 1e-12 || math.Abs(d-c.wantD) > 1e-12 {
				t.Fatalf("Token = (%g, %g), want (%g, %g)", l, d, c.wantLoss, c.wantD)
			}
		})
	}
}

// The derivative each loss reports must be the derivative of its value,
// except where a stop-gradient is part of the definition (cispo).
func TestLossTokenDerivativeMatchesFiniteDifference(t *testing.T) {
	in := &LossFnInputs{
		TargetTokens: []int{0, 0},
		Logprobs:     []float64{-1.3, -0.2},
		Advantages:   []float64{0.7, -1.1},
		Weights:      []float64{0.3, -2},
		Mask:         []float64{1, 0.5},
	}
	const h = 1e-6
	for _, name := range []string{LossCrossEntropy, LossImportanceSampling, LossPPO} {
		for i := range 2 {
			for _, lp := range []float64{-3, -1.25, -0.9, -0.1} {
				l := Loss{Name: name}
				_, d := l.Token(in, i, lp)
				up, _ := l.Token(in, i, lp+h)
				down, _ := l.Token(in, i, lp-h)
				if num := (up - down) / (2 * h); math.Abs(num-d) > 1e-5 {
					t.Errorf("%s token %d lp %g: derivative %g, finite difference %g", name, i, lp, d, num)
				}
			}
		}
	}
}

func TestMaskZeroDropsToken(t *testing.T) {
	in := &LossFnInputs{TargetTokens: []int{1}, Logprobs: []float64{-1}, Advantages: []float64{1}, Mask: []float64{0}}
	for _, name := range BuiltinLosses() {
		if l, d := (Loss{Name: name}).Token(in, 0, -0.5); l != 0 || d != 0 {
			t.Errorf("%s with mask 0 = (%g, %g), want (0, 0)", name, l, d)
		}
	}
}

func TestLossValidate(t *testing.T) {
	cases := []struct {
		loss Loss
		want string
	}{
		{Loss{Name: LossPPO}, ""},
		{Loss{Name: LossCISPO, Config: map[string]float64{ClipLowThreshold: 0.5}}, ""},
		{Loss{Name: "grpo"}, `unknown loss "grpo"`},
		{Loss{Name: LossCrossEntropy, Config: map[string]float64{ClipLowThreshold: 1}}, `takes no config key "clip_low_threshold"`},
		{Loss{Name: LossPPO, Config: map[string]float64{ClipLowThreshold: 1.5}}, "must not exceed"},
	}
	for _, c := range cases {
		err := c.loss.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: err = %v, want %q", c.loss, err, c.want)
		}
	}
}

func TestDatumValidate(t *testing.T) {
	ok := func() Datum {
		return Datum{Input: []int{1, 2}, LossFnInputs: LossFnInputs{TargetTokens: []int{2, 3}, Logprobs: []float64{0, -1}, Advantages: []float64{0, 1}}}
	}
	cases := []struct {
		name   string
		mutate func(*Datum)
		loss   string
		want   string
	}{
		{"ok", func(*Datum) {}, LossPPO, ""},
		{"empty", func(d *Datum) { d.Input = nil }, LossCrossEntropy, "no input tokens"},
		{"too long", func(d *Datum) { d.Input = make([]int, 9); d.LossFnInputs.TargetTokens = make([]int, 9) }, LossCrossEntropy, "more than the model's context of 8"},
		{"target count", func(d *Datum) { d.LossFnInputs.TargetTokens = []int{1} }, LossCrossEntropy, "but 1 target tokens"},
		{"vocab", func(d *Datum) { d.Input[1] = 10 }, LossCrossEntropy, "input token 1 is 10, outside the vocabulary [0, 10)"},
		{"negative target", func(d *Datum) { d.LossFnInputs.TargetTokens[0] = -1 }, LossCrossEntropy, "target token 0 is -1"},
		{"advantages length", func(d *Datum) { d.LossFnInputs.Advantages = []float64{1} }, LossPPO, "1 advantages for 2 target tokens"},
		{"missing logprobs", func(d *Datum) { d.LossFnInputs.Logprobs = nil }, LossImportanceSampling, "lacks logprobs"},
		{"missing advantages", func(d *Datum) { d.LossFnInputs.Advantages = nil }, LossCISPO, "lacks advantages"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := ok()
			c.mutate(&d)
			err := d.Validate(0, 10, 8, Loss{Name: c.loss})
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ie *InputError
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &ie) || ie.ExitCode() != 2 {
				t.Fatalf("err = %v, want an InputError containing %q", err, c.want)
			}
		})
	}
}

func TestAdamParamsValidate(t *testing.T) {
	good := DefaultAdamParams(1e-3)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mutate := range []func(*AdamParams){
		func(p *AdamParams) { p.LearningRate = math.NaN() },
		func(p *AdamParams) { p.Beta1 = 1 },
		func(p *AdamParams) { p.Beta2 = -0.1 },
		func(p *AdamParams) { p.GradClipNorm = -1 },
		func(p *AdamParams) { p.WeightDecay = math.Inf(1) },
	} {
		p := good
		mutate(&p)
		if p.Validate() == nil {
			t.Errorf("%+v validated", p)
		}
	}
}

func TestFuture(t *testing.T) {
	f, resolve := NewFuture[int]()
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := f.Result(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("pending future returned %v", err)
	}
	resolve(7, nil)
	resolve(8, errors.New("late"))
	if v, err := f.Result(context.Background()); v != 7 || err != nil {
		t.Fatalf("Result = %d, %v; want 7, nil (first resolve wins)", v, err)
	}
}
