package ppo

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// The batch of the hand-worked tests: two sequences, the third token
// masked. Log-ratios x = train − rollout: 0.5, −1, (0), 1, 1; per
// sequence Σ m·x = −0.5 and 2.
var (
	corrTrain   = []float64{-1, -2, -0.5, -0.1, -0.2}
	corrRollout = []float64{-1.5, -1, -0.5, -1.1, -1.2}
	corrMask    = []float64{1, 1, 0, 1, 1}
	corrOffsets = []int{0, 3, 5}
)

// The expected values below are worked by hand from verl's formulas
// (rollout_corr_helper.py compute_rollout_correction_weights: w = exp(x)
// per token, or exp(Σ m·x) per sequence, capped at rollout_is_threshold,
// 0 on masked tokens; compute_is_metrics takes its statistics before the
// cap).
func TestRolloutCorrectionWeightsByHand(t *testing.T) {
	e, se := math.E, math.Sqrt(math.E)
	const eps = 1e-8 // verl's masked_mean adds it to the denominator
	for _, tc := range []struct {
		name    string
		c       Correction
		want    []float64
		metrics map[string]float64
	}{
		// seq 1: e > 2, capped.
		{"token", Correction{IS: RolloutISToken, Threshold: 2}, []float64{se, 1 / e, 0, 2, 2}, map[string]float64{
			"rollout_is_mean": (se + 1/e + 2*e) / (4 + eps), "rollout_is_ratio_fraction_high": 2 / (4 + eps),
			"rollout_is_ratio_fraction_low": 1 / (4 + eps), // 1/e < 1/2
			"rollout_is_max":                e, "rollout_is_min": 1 / e,
		}},
		// seq 0: e^−0.5 on both tokens; seq 1: e² capped at 2.
		{"sequence", Correction{IS: RolloutISSequence, Threshold: 2}, []float64{1 / se, 1 / se, 0, 2, 2}, map[string]float64{
			"rollout_is_mean": (2/se + 2*e*e) / (4 + eps), "rollout_is_ratio_fraction_high": 0.5, "rollout_is_ratio_fraction_low": 0,
			"rollout_is_max": e * e, "rollout_is_min": 1 / se,
		}},
		// Normalised over the batch: the capped token mean (√e + 1/e + 4)/4.
		{"token normalised", Correction{IS: RolloutISToken, Threshold: 2, BatchNormalize: true},
			[]float64{se / ((se + 1/e + 4) / (4 + eps)), 1 / e / ((se + 1/e + 4) / (4 + eps)), 0, 2 / ((se + 1/e + 4) / (4 + eps)), 2 / ((se + 1/e + 4) / (4 + eps))},
			map[string]float64{"rollout_is_batch_norm_factor": (se + 1/e + 4) / (4 + eps)}},
		// Sequence level: the mean of the two sequences' weights
		// (each its masked mean, 2w/(2 + 1e-8)).
		{"sequence normalised", Correction{IS: RolloutISSequence, Threshold: 2, BatchNormalize: true},
			func() []float64 {
				f := (2/se/(2+eps) + 4/(2+eps)) / 2
				return []float64{1 / se / f, 1 / se / f, 0, 2 / f, 2 / f}
			}(),
			map[string]float64{"rollout_is_batch_norm_factor": (2/se/(2+eps) + 4/(2+eps)) / 2}},
		{"none", Correction{Threshold: 2}, []float64{1, 1, 0, 1, 1}, map[string]float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, keep := make([]float64, 5), make([]float64, 5)
			m, err := RolloutCorrection(corrTrain, corrRollout, corrMask, corrOffsets, &tc.c, w, keep)
			if err != nil {
				t.Fatal(err)
			}
			assertSlice(t, "weights", w, tc.want, 1e-12)
			assertSlice(t, "keep", keep, corrMask, 0)
			for k, want := range tc.metrics {
				if got, ok := m["rollout_corr/"+k]; !ok || !close(got, want, 1e-12) {
					t.Errorf("%s = %.17g (present %t), want %.17g", k, got, ok, want)
				}
			}
			if _, ok := m["rollout_corr/rollout_is_mean"]; ok != (tc.c.IS != RolloutISNone) {
				t.Errorf("rollout_is metrics present %t with rollout_is %q", ok, tc.c.IS)
			}
			if _, ok := m["rollout_corr/rollout_is_batch_norm_factor"]; ok != tc.c.BatchNormalize {
				t.Errorf("batch_norm_factor present %t with batch normalisation %t", ok, tc.c.BatchNormalize)
			}
		})
	}
}

// Rejection sampling on the same batch (compute_rollout_rejection_mask):
// k1 = −x, k2 = x²/2; a k1 criterion keeps log(lower) ≤ k1 ≤ log(upper).
func TestRolloutRejectionByHand(t *testing.T) {
	for _, tc := range []struct {
		options, threshold string
		keep               []float64
		masked, seqMasked  float64
	}{
		// "2": ratio bounds 0.5_2, so |x| ≤ log 2 = 0.693: only x = 0.5 passes.
		{"token_k1", "2", []float64{1, 0, 0, 0, 0}, 0.75, 1},
		// verl's bounds apply to −x: 0.1_1.2 keeps x in [−log 1.2, log 10].
		{"token_k1", "0.1_1.2", []float64{1, 0, 0, 1, 1}, 0.25, 0.5},
		// Sequence means of x²/2: (0.125 + 0.5)/2 = 0.3125 and 0.5.
		{"seq_mean_k2", "0.4", []float64{1, 1, 0, 0, 0}, 0.5, 0.5},
		// Sums: −x summed is 0.5 and −2; 0.5_2 ratio bounds are [−0.693, 0.693].
		{"seq_sum_k1", "0.5_2.0", []float64{1, 1, 0, 0, 0}, 0.5, 0.5},
		// Both must pass; seq_max_k2 is 0.5 for both sequences.
		{"token_k1, seq_max_k2", "0.1_1.2,0.6", []float64{1, 0, 0, 1, 1}, 0.25, 0.5},
		{"token_k1,seq_max_k2", "0.1_1.2,0.4", []float64{0, 0, 0, 0, 0}, 1, 1},
		// k3 = eˣ − 1 − x: e^0.5 − 1.5 = 0.1487, 1/e = 0.3679, e − 2 = 0.7183.
		{"token_k3", "0.5", []float64{1, 1, 0, 0, 0}, 0.5, 0.5},
	} {
		t.Run(tc.options+"@"+tc.threshold, func(t *testing.T) {
			thr := tc.threshold
			rs, err := ParseRolloutRS(tc.options, &thr)
			if err != nil {
				t.Fatal(err)
			}
			c := Correction{Threshold: 2, RS: rs}
			w, keep := make([]float64, 5), make([]float64, 5)
			m, err := RolloutCorrection(corrTrain, corrRollout, corrMask, corrOffsets, &c, w, keep)
			if err != nil {
				t.Fatal(err)
			}
			assertSlice(t, "keep", keep, tc.keep, 0)
			assertSlice(t, "weights", w, corrMask, 0) // no rollout_is: the mask
			if got := m["rollout_corr/rollout_rs_masked_fraction"]; !close(got, tc.masked, 1e-8) {
				t.Errorf("masked fraction %g, want %g", got, tc.masked)
			}
			if got := m["rollout_corr/rollout_rs_seq_masked_fraction"]; !close(got, tc.seqMasked, 1e-12) {
				t.Errorf("sequence masked fraction %g, want %g", got, tc.seqMasked)
			}
		})
	}
}

// The off-policy diagnostics (compute_offpolicy_metrics) on the batch.
func TestRolloutOffPolicyMetricsByHand(t *testing.T) {
	c := Correction{Threshold: 2}
	w, keep := make([]float64, 5), make([]float64, 5)
	m, err := RolloutCorrection(corrTrain, corrRollout, corrMask, corrOffsets, &c, w, keep)
	if err != nil {
		t.Fatal(err)
	}
	e := math.E
	// Per-sequence mean logprobs: train (−3/2, −0.3/2), rollout (−2.5/2, −2.3/2).
	mt := []float64{-1.5 / (1 + 5e-9), -0.15 / (1 + 5e-9)}
	mr := []float64{-1.25 / (1 + 5e-9), -1.15 / (1 + 5e-9)}
	for k, want := range map[string]float64{
		"kl":               -1.5 / (4 + 1e-8),
		"k3_kl":            ((math.Exp(0.5) - 1.5) + (math.Exp(-1) + 0) + 2*(e-2)) / (4 + 1e-8),
		"chi2_token":       (e+1/(e*e)+2*e*e)/(4+1e-8) - 1,
		"chi2_seq":         (math.Exp(-1)+math.Exp(4))/2 - 1,
		"training_ppl":     (math.Exp(-mt[0]) + math.Exp(-mt[1])) / 2,
		"rollout_log_ppl":  -(mr[0] + mr[1]) / 2,
		"log_ppl_diff":     ((mr[0] - mt[0]) + (mr[1] - mt[1])) / 2,
		"log_ppl_diff_max": mr[0] - mt[0],
		"log_ppl_diff_min": mr[1] - mt[1],
	} {
		if got := m["rollout_corr/"+k]; !close(got, want, 1e-9) {
			t.Errorf("%s = %.12g, want %.12g", k, got, want)
		}
	}
}

func TestParseRolloutRS(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		options   string
		threshold *string
		want      []RSCriterion
		err       string
	}{
		{"", nil, nil, ""},
		{"null", str("2"), nil, ""},
		{"token_k1", str("2"), []RSCriterion{{"token_k1", 0.5, 2}}, ""},
		{"token_k1,token_k1", str("0.9_1.1"), []RSCriterion{{"token_k1", 0.9, 1.1}}, ""},
		{"seq_mean_k3,token_k1", str("0.01"), []RSCriterion{{"seq_mean_k3", 0, 0.01}, {"token_k1", 100, 0.01}}, ""},
		{"seq_mean_k3, token_k1", str("0.01, 0.5_2"), []RSCriterion{{"seq_mean_k3", 0, 0.01}, {"token_k1", 0.5, 2}}, ""},
		{"geometric", str("2"), nil, `algorithm.rollout_correction.rollout_rs: unknown criterion "geometric"`},
		{"token_k1", nil, nil, "algorithm.rollout_correction.rollout_rs_threshold: must be set when rollout_rs is"},
		{"token_k1", str("null"), nil, "algorithm.rollout_correction.rollout_rs_threshold: must be set when rollout_rs is"},
		{"token_k1,token_k2,token_k3", str("1,2"), nil, "algorithm.rollout_correction.rollout_rs_threshold: has 2 thresholds for 3 rollout_rs criteria"},
		{"token_k2", str("0.5_2"), nil, `algorithm.rollout_correction.rollout_rs_threshold: "0.5_2" for token_k2 must be one upper bound`},
		{"token_k2", str("-1"), nil, `algorithm.rollout_correction.rollout_rs_threshold: "-1" for token_k2 must be a positive number`},
		{"token_k1", str("0_2"), nil, `algorithm.rollout_correction.rollout_rs_threshold: "0" for token_k1 must be a positive number`},
		{",", str("2"), nil, "algorithm.rollout_correction.rollout_rs: names no criterion"},
	} {
		got, err := ParseRolloutRS(tc.options, tc.threshold)
		if tc.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.err) || !usererr.Is(err) {
				t.Errorf("%q %v: %v, %v; want the user error %q…", tc.options, tc.threshold, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.options, got, err, tc.want)
		}
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

func TestRolloutCorrectionBadInput(t *testing.T) {
	for _, tc := range []struct {
		name           string
		train, rollout []float64
		c              Correction
	}{
		{"length", []float64{0, 0}, []float64{0}, Correction{IS: RolloutISToken, Threshold: 2}},
		{"nan", []float64{0, math.NaN()}, []float64{0, 0}, Correction{IS: RolloutISToken, Threshold: 2}},
		{"threshold below 1", []float64{0, 0}, []float64{0, 0}, Correction{IS: RolloutISToken, Threshold: 0.5}},
		{"threshold NaN", []float64{0, 0}, []float64{0, 0}, Correction{IS: RolloutISToken, Threshold: math.NaN()}},
		{"mode", []float64{0, 0}, []float64{0, 0}, Correction{IS: "geometric", Threshold: 2}},
		{"criterion", []float64{0, 0}, []float64{0, 0}, Correction{Threshold: 2, RS: []RSCriterion{{Option: "geo", Upper: 1}}}},
		{"bounds", []float64{0, 0}, []float64{0, 0}, Correction{Threshold: 2, RS: []RSCriterion{{Option: "token_k1", Upper: 2}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, keep := []float64{7, 7}, []float64{7, 7}
			if _, err := RolloutCorrection(tc.train, tc.rollout, []float64{1, 1}, []int{0, 2}, &tc.c, w, keep); err == nil {
				t.Fatal("accepted")
			}
			if w[0] != 0 || w[1] != 0 || keep[0] != 0 || keep[1] != 0 {
				t.Errorf("outputs not zeroed on error: %v %v", w, keep)
			}
		})
	}
	// No unmasked token: zero outputs and no metrics, where verl raises.
	w, keep := []float64{7, 7}, []float64{7, 7}
	c := Correction{IS: RolloutISSequence, Threshold: 2}
	m, err := RolloutCorrection([]float64{0, 1}, []float64{0, 0}, []float64{0, 0}, []int{0, 2}, &c, w, keep)
	if err != nil || m != nil || w[0] != 0 || w[1] != 0 || keep[0] != 0 || keep[1] != 0 {
		t.Errorf("empty mask: %v %v %v %v", m, err, w, keep)
	}
}

// verl's compute_policy_loss_reinforce worked by hand: lp (−1, −2), the
// sampler's (−1.5, −1), advantages (1, −2) times bypass weights (0.5, 1),
// token-mean: l = −A'·lp = (0.5, −4), loss −1.75, ∂/∂lp = −A'/2.
func TestReinforceLossByHand(t *testing.T) {
	in := LossInput{Offsets: []int{0, 2}, Logprobs: []float64{-1, -2}, OldLogprobs: []float64{-1.5, -1},
		Advantages: []float64{1 * 0.5, -2 * 1}, Mask: []float64{1, 1}}
	cfg := DefaultLossConfig()
	cfg.Loss = LossReinforce
	grad := make([]float64, 2)
	res, err := PolicyLoss(&in, &cfg, grad)
	if err != nil {
		t.Fatal(err)
	}
	if !close(res.Loss, -1.75, 1e-12) {
		t.Errorf("loss %g, want −1.75", res.Loss)
	}
	assertSlice(t, "gradient", grad, []float64{-0.25, 1}, 1e-12)
	if want := 0.5 / (2 + 1e-8); !close(res.Metrics.PPOKL, want, 1e-12) { // mean(old − lp) = (−0.5 + 1)/2
		t.Errorf("ppo_kl %g, want %g", res.Metrics.PPOKL, want)
	}
	if _, err := ParsePolicyLoss("reinforce"); err == nil {
		t.Error("actor.policy_loss takes reinforce; it is loss_type's")
	}
}

// PGMask masks the policy-gradient term alone: the entropy (and KL) terms
// keep the response mask, as verl's bypass mode rejects inside the
// policy loss only.
func TestPGMask(t *testing.T) {
	in := LossInput{Offsets: []int{0, 2}, Logprobs: []float64{-1, -1}, OldLogprobs: []float64{-1, -1},
		Advantages: []float64{1, 3}, Mask: []float64{1, 1}, PGMask: []float64{1, 0}, Entropies: []float64{0.2, 0.4}}
	cfg := DefaultLossConfig()
	cfg.Loss = LossImportanceSampling
	grad := make([]float64, 2)
	res, err := PolicyLoss(&in, &cfg, grad)
	if err != nil {
		t.Fatal(err)
	}
	if !close(res.Metrics.PGLoss, -1, 1e-12) { // the first token alone, ratio 1
		t.Errorf("pg loss %g, want −1", res.Metrics.PGLoss)
	}
	assertSlice(t, "gradient", grad, []float64{-1, 0}, 1e-12)
	if !close(res.Metrics.Entropy, 0.3, 1e-12) {
		t.Errorf("entropy %g, want 0.3 (both tokens)", res.Metrics.Entropy)
	}
	in.PGMask = []float64{1}
	if _, err := PolicyLoss(&in, &cfg, grad); err == nil {
		t.Error("accepted a policy-gradient mask of the wrong length")
	}
}

// verl's dapo reward manager: expected = 8 − 4 = 4 tokens, then −(L − 4)/4
// × factor, clipped at 0 from above only.
func TestOverlongPenalty(t *testing.T) {
	for _, tc := range []struct {
		length, maxLen, buf int
		factor, want        float64
	}{
		{3, 8, 4, 1, 0}, {4, 8, 4, 1, 0}, {6, 8, 4, 1, -0.5}, {8, 8, 4, 1, -1}, {10, 8, 4, 1, -1.5},
		{6, 8, 4, 2, -1}, {6, 8, 0, 1, 0}, {8192, 8192, 4096, 1, -1}, {6144, 8192, 4096, 1, -0.5},
	} {
		if got := OverlongPenalty(tc.length, tc.maxLen, tc.buf, tc.factor); !close(got, tc.want, 1e-15) {
			t.Errorf("OverlongPenalty(%d, %d, %d, %g) = %g, want %g", tc.length, tc.maxLen, tc.buf, tc.factor, got, tc.want)
		}
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
