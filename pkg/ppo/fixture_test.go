package ppo

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// The fixtures in testdata hold inputs and outputs worked out independently
// (plain-Python float64 from the published formulas; each case names its
// source). These tests check this package against them.

func loadCases[T any](t *testing.T, file string) []T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []T `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(doc.Cases) == 0 {
		t.Fatalf("%s holds no cases", file)
	}
	return doc.Cases
}

func close(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

func assertSlice(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !close(got[i], want[i], tol) {
			t.Errorf("%s[%d] = %.17g, want %.17g", what, i, got[i], want[i])
		}
	}
}

type outcomeCase struct {
	Name         string    `json:"name"`
	Estimator    string    `json:"estimator"`
	Reference    string    `json:"reference"`
	NormAdvByStd bool      `json:"norm_adv_by_std"`
	Rewards      []float64 `json:"rewards"`
	Groups       []string  `json:"groups"`
	Lengths      []float64 `json:"lengths"`
	Expected     []float64 `json:"expected"`
}

func TestOutcomeFixtures(t *testing.T) {
	for _, c := range loadCases[outcomeCase](t, "outcome.json") {
		t.Run(c.Name, func(t *testing.T) {
			est, err := Lookup(c.Estimator)
			if err != nil {
				t.Fatal(err)
			}
			if est.Level != Outcome {
				t.Fatalf("%s is not an outcome estimator", c.Estimator)
			}
			cfg := DefaultConfig()
			cfg.NormAdvByStd = c.NormAdvByStd
			if c.Reference == "rllm" {
				cfg.Reference = ReferenceRLLM
			}
			groups := make([]int, len(c.Groups))
			ng, err := groupIndex(c.Groups, groups)
			if err != nil {
				t.Fatal(err)
			}
			in := Input{Rewards: c.Rewards, Groups: groups, NumGroups: ng, Lengths: c.Lengths}
			out := Output{Sequence: make([]float64, len(c.Rewards))}
			var ws Workspace
			if err := est.Compute(&in, &cfg, &ws, &out); err != nil {
				t.Fatal(err)
			}
			assertSlice(t, "advantages", out.Sequence, c.Expected, 1e-12)
		})
	}
}

type tokenCase struct {
	Name       string    `json:"name"`
	Estimator  string    `json:"estimator"`
	Offsets    []int     `json:"offsets"`
	Rewards    []float64 `json:"rewards"`
	Values     []float64 `json:"values"`
	Mask       []float64 `json:"mask"`
	Gamma      float64   `json:"gamma"`
	Lam        *float64  `json:"lam"`
	Whiten     *bool     `json:"whiten"`
	KLCoef     float64   `json:"kl_coef"`
	KLType     string    `json:"kl_type"`
	Old        []float64 `json:"old_logprobs"`
	Ref        []float64 `json:"ref_logprobs"`
	Advantages []float64 `json:"advantages"`
	Returns    []float64 `json:"returns"`
}

func TestTokenFixtures(t *testing.T) {
	for _, c := range loadCases[tokenCase](t, "token.json") {
		t.Run(c.Name, func(t *testing.T) {
			est, err := Lookup(c.Estimator)
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.Gamma = c.Gamma
			if c.Lam != nil {
				cfg.Lam = *c.Lam
			}
			if c.Whiten != nil {
				cfg.Whiten = *c.Whiten
			}
			cfg.KLInRewardCoef = c.KLCoef
			if c.KLType != "" {
				cfg.KLInRewardType = KLType(c.KLType)
			}
			in := Input{Tokens: TokenInput{Offsets: c.Offsets, Rewards: c.Rewards, Mask: c.Mask, Values: c.Values, OldLogprobs: c.Old, RefLogprobs: c.Ref}}
			out := Output{Advantages: make([]float64, len(c.Rewards)), Returns: make([]float64, len(c.Rewards))}
			if err := est.Compute(&in, &cfg, nil, &out); err != nil {
				t.Fatal(err)
			}
			assertSlice(t, "advantages", out.Advantages, c.Advantages, 1e-12)
			assertSlice(t, "returns", out.Returns, c.Returns, 1e-12)
		})
	}
}

type lossCase struct {
	Name          string    `json:"name"`
	LossMode      string    `json:"loss_mode"`
	AggMode       string    `json:"agg_mode"`
	ClipRatioLow  float64   `json:"clip_ratio_low"`
	ClipRatioHigh float64   `json:"clip_ratio_high"`
	ClipRatioC    float64   `json:"clip_ratio_c"`
	NormLength    float64   `json:"norm_length"`
	KLCoef        float64   `json:"kl_coef"`
	KLType        string    `json:"kl_type"`
	EntropyCoeff  float64   `json:"entropy_coeff"`
	Offsets       []int     `json:"offsets"`
	Logprobs      []float64 `json:"logprobs"`
	Old           []float64 `json:"old_logprobs"`
	Advantages    []float64 `json:"advantages"`
	Mask          []float64 `json:"mask"`
	Ref           []float64 `json:"ref_logprobs"`
	Entropies     []float64 `json:"entropies"`
	Loss          float64   `json:"loss"`
	Gradient      []float64 `json:"gradient"`
	Metrics       struct {
		PGLoss        float64  `json:"pg_loss"`
		ClipFrac      float64  `json:"clipfrac"`
		ClipFracLower float64  `json:"clipfrac_lower"`
		PPOKL         float64  `json:"ppo_kl"`
		RatioMean     float64  `json:"ratio_mean"`
		KLLoss        *float64 `json:"kl_loss"`
		Entropy       *float64 `json:"entropy"`
	} `json:"metrics"`
}

func (c *lossCase) config(t *testing.T) LossConfig {
	t.Helper()
	kind, err := ParsePolicyLoss(c.LossMode)
	if err != nil {
		t.Fatal(err)
	}
	mode, err := ParseAggMode(c.AggMode)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultLossConfig()
	cfg.Loss, cfg.AggMode = kind, mode
	cfg.ClipRatioLow, cfg.ClipRatioHigh, cfg.ClipRatioC = c.ClipRatioLow, c.ClipRatioHigh, c.ClipRatioC
	cfg.NormLength, cfg.KLCoef, cfg.EntropyCoeff = c.NormLength, c.KLCoef, c.EntropyCoeff
	if c.KLType != "" {
		k, err := ParseKLType(c.KLType)
		if err != nil {
			t.Fatal(err)
		}
		cfg.KLType = k
	}
	return cfg
}

func TestLossFixtures(t *testing.T) {
	for _, c := range loadCases[lossCase](t, "loss.json") {
		t.Run(c.Name, func(t *testing.T) {
			cfg := c.config(t)
			in := LossInput{Offsets: c.Offsets, Logprobs: c.Logprobs, OldLogprobs: c.Old, Advantages: c.Advantages, Mask: c.Mask, RefLogprobs: c.Ref, Entropies: c.Entropies}
			grad := make([]float64, len(c.Logprobs))
			res, err := PolicyLoss(&in, &cfg, grad)
			if err != nil {
				t.Fatal(err)
			}
			if !close(res.Loss, c.Loss, 1e-12) {
				t.Errorf("loss = %.17g, want %.17g", res.Loss, c.Loss)
			}
			assertSlice(t, "gradient", grad, c.Gradient, 1e-12)
			m := res.Metrics
			for _, x := range []struct {
				name      string
				got, want float64
			}{
				{"pg_loss", m.PGLoss, c.Metrics.PGLoss},
				{"clipfrac", m.ClipFrac, c.Metrics.ClipFrac},
				{"clipfrac_lower", m.ClipFracLower, c.Metrics.ClipFracLower},
				{"ppo_kl", m.PPOKL, c.Metrics.PPOKL},
				{"ratio_mean", m.RatioMean, c.Metrics.RatioMean},
			} {
				if !close(x.got, x.want, 1e-12) {
					t.Errorf("%s = %.17g, want %.17g", x.name, x.got, x.want)
				}
			}
			if c.Metrics.KLLoss != nil && !close(m.KLLoss, *c.Metrics.KLLoss, 1e-12) {
				t.Errorf("kl_loss = %.17g, want %.17g", m.KLLoss, *c.Metrics.KLLoss)
			}
			if c.Metrics.Entropy != nil && !close(m.Entropy, *c.Metrics.Entropy, 1e-12) {
				t.Errorf("entropy = %.17g, want %.17g", m.Entropy, *c.Metrics.Entropy)
			}
		})
	}
}

// groupIndex maps ids (task ids: rLLM groups the rollouts of one task) to
// dense group numbers 0..G-1 in order of first appearance, writes them into
// dst (len(ids)) and returns G.
func groupIndex(ids []string, dst []int) (int, error) {
	if err := sameLen("groups", len(dst), "ids", len(ids)); err != nil {
		return 0, err
	}
	seen := make(map[string]int, len(ids)/4+1)
	for i, id := range ids {
		g, ok := seen[id]
		if !ok {
			g = len(seen)
			seen[id] = g
		}
		dst[i] = g
	}
	return len(seen), nil
}
