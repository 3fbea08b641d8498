package ppo

import (
	"math"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// The expected values below are worked by hand from verl's formulas
// (rollout_corr_helper.py: ρ_t = exp(old − rollout) per token, or the
// exponentiated masked sum per sequence, capped at rollout_is_threshold;
// 0 on masked tokens).
func TestRolloutISWeightsByHand(t *testing.T) {
	old := []float64{-1, -2, -0.5, -0.1, -0.2}
	rollout := []float64{-1.5, -1, -0.5, -1.1, -1.2}
	mask := []float64{1, 1, 0, 1, 1}
	offsets := []int{0, 3, 5}
	e := math.E
	for _, tc := range []struct {
		name      string
		mode      RolloutISMode
		want      []float64
		mean, cut float64
	}{
		// seq 0: log ratios 0.5, −1 (third token masked); seq 1: 1, 1 → e > 2, capped.
		{"token", RolloutISToken, []float64{math.Sqrt(e), 1 / e, 0, 2, 2}, (math.Sqrt(e) + 1/e + 4) / 4, 0.5},
		// seq 0: Σ = −0.5 → e^−0.5 on both unmasked tokens; seq 1: Σ = 2 → e² capped at 2.
		{"sequence", RolloutISSequence, []float64{1 / math.Sqrt(e), 1 / math.Sqrt(e), 0, 2, 2}, (2/math.Sqrt(e) + 4) / 4, 0.5},
		{"none", RolloutISNone, []float64{1, 1, 0, 1, 1}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]float64, len(old))
			m, err := RolloutISWeights(old, rollout, mask, offsets, tc.mode, 2, dst)
			if err != nil {
				t.Fatal(err)
			}
			assertSlice(t, "weights", dst, tc.want, 1e-15)
			if !close(m.Mean, tc.mean, 1e-15) || !close(m.Truncated, tc.cut, 1e-15) {
				t.Errorf("metrics %+v, want mean %g truncated %g", m, tc.mean, tc.cut)
			}
			if !close(m.LogRatioMean, 0.375, 1e-15) { // (0.5 − 1 + 1 + 1) / 4
				t.Errorf("log-ratio mean %g, want 0.375", m.LogRatioMean)
			}
		})
	}
}

// Decoupled PPO (three policies): the ratio is π_θ/π_old and the truncated
// weight π_old/π_rollout multiplies the token's loss. Applying it through
// the advantages gives, worked by hand for two tokens of one sequence
// (token-mean, clip 0.2, weight 0.5 on both):
//
//	token 0: lp −1,   old −1.2, A 1: r = e^0.2 = 1.2214 > 1.2, clipped: l = 0.5·(−1.2) = −0.6, ∂l/∂lp = 0
//	token 1: lp −1.1, old −1.2, A 2: r = e^0.1 = 1.10517, inside: l = 0.5·(−2·1.10517) = −1.10517, ∂l/∂lp = −1.10517
//
// loss = (−0.6 − 1.10517)/2, gradient (0, −1.10517/2).
func TestDecoupledPPOByHand(t *testing.T) {
	w := []float64{0.5, 0.5}
	adv := []float64{1, 2}
	for i := range adv {
		adv[i] *= w[i]
	}
	in := LossInput{Offsets: []int{0, 2}, Logprobs: []float64{-1, -1.1}, OldLogprobs: []float64{-1.2, -1.2}, Advantages: adv, Mask: []float64{1, 1}}
	cfg := DefaultLossConfig()
	grad := make([]float64, 2)
	res, err := PolicyLoss(&in, &cfg, grad)
	if err != nil {
		t.Fatal(err)
	}
	r1 := math.Exp(0.1)
	if want := (-0.6 - r1) / 2; !close(res.Loss, want, 1e-12) {
		t.Errorf("loss %.17g, want %.17g", res.Loss, want)
	}
	assertSlice(t, "gradient", grad, []float64{0, -r1 / 2}, 1e-12)
	if !close(res.Metrics.ClipFrac, 0.5, 1e-6) {
		t.Errorf("clip fraction %g, want 0.5 (the weight does not change what clips)", res.Metrics.ClipFrac)
	}
}

func TestRolloutISWeightsBadInput(t *testing.T) {
	dst := make([]float64, 2)
	for _, tc := range []struct {
		name         string
		old, rollout []float64
		mode         RolloutISMode
		threshold    float64
	}{
		{"length", []float64{0, 0}, []float64{0}, RolloutISToken, 2},
		{"nan", []float64{0, math.NaN()}, []float64{0, 0}, RolloutISToken, 2},
		{"threshold below 1", []float64{0, 0}, []float64{0, 0}, RolloutISToken, 0.5},
		{"threshold NaN", []float64{0, 0}, []float64{0, 0}, RolloutISToken, math.NaN()},
		{"mode", []float64{0, 0}, []float64{0, 0}, "geometric", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst[0], dst[1] = 7, 7
			if _, err := RolloutISWeights(tc.old, tc.rollout, []float64{1, 1}, []int{0, 2}, tc.mode, tc.threshold, dst); err == nil {
				t.Fatal("accepted")
			}
			if dst[0] != 0 || dst[1] != 0 {
				t.Errorf("weights not zeroed on error: %v", dst)
			}
		})
	}
}

func TestParseRolloutIS(t *testing.T) {
	for in, want := range map[string]RolloutISMode{"": RolloutISNone, "null": RolloutISNone, "token": RolloutISToken, "sequence": RolloutISSequence} {
		if got, err := ParseRolloutIS(in); err != nil || got != want {
			t.Errorf("ParseRolloutIS(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseRolloutIS("geo"); err == nil {
		t.Error("accepted geo")
	}
}

// TestParseNames pins every accepted spelling (verl's and Tinker's
// aliases) of the named settings and the words of their errors.
func TestParseNames(t *testing.T) {
	parse := map[string]func(string) (string, error){
		"loss": func(s string) (string, error) { k, err := ParsePolicyLoss(s); return string(k), err },
		"agg":  func(s string) (string, error) { k, err := ParseAggMode(s); return string(k), err },
		"is":   func(s string) (string, error) { k, err := ParseRolloutIS(s); return string(k), err },
	}
	tests := []struct{ kind, in, want, wantErr string }{
		{"loss", "vanilla", "vanilla", ""},
		{"loss", "ppo", "vanilla", ""},
		{"loss", "importance_sampling", "importance_sampling", ""},
		{"loss", "cispo", "cispo", ""},
		{"loss", "gspo", "gspo", ""},
		{"loss", "PPO", "", `policy_loss.loss_mode: unknown policy loss "PPO"; use vanilla (ppo), importance_sampling, cispo or gspo`},
		{"agg", "token-mean", "token-mean", ""},
		{"agg", "seq-mean-token-sum", "seq-mean-token-sum", ""},
		{"agg", "seq-mean-token-mean", "seq-mean-token-mean", ""},
		{"agg", "seq-mean-token-sum-norm", "seq-mean-token-sum-norm", ""},
		{"agg", "", "", `actor.loss_agg_mode: unknown aggregation ""; use token-mean, seq-mean-token-sum, seq-mean-token-mean or seq-mean-token-sum-norm`},
		{"is", "", "", ""},
		{"is", "null", "", ""},
		{"is", "token", "token", ""},
		{"is", "sequence", "sequence", ""},
		{"is", "geo", "", `algorithm.rollout_correction.rollout_is: unknown level "geo"; use token, sequence or null`},
	}
	for _, tt := range tests {
		got, err := parse[tt.kind](tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr || !usererr.Is(err) {
				t.Errorf("%s %q: %q, %v; want the user error %q", tt.kind, tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s %q: %q, %v; want %q", tt.kind, tt.in, got, err, tt.want)
		}
	}
}
