package trainer

import (
	"testing"

	"github.com/rllm-org/rllm-go/pkg/config"
)

// actor.use_kl_loss and kl_loss_coef left null take the backend's
// recommendation: on at 0.1 for the embedded policy, off (0.001 when on)
// elsewhere; set, they win.
func TestKLLossDefaultsFollowTheBackend(t *testing.T) {
	for _, tt := range []struct {
		sets   []string
		on     bool
		coef   float64
		planKL float64
	}{
		{nil, true, 0.1, 0.1},
		{[]string{"backend.name=tinker"}, false, 0.001, 0},
		{[]string{"backend.name=tinker", "actor.use_kl_loss=true"}, true, 0.001, 0.001},
		{[]string{"actor.use_kl_loss=false"}, false, 0.1, 0},
		{[]string{"actor.kl_loss_coef=0.02"}, true, 0.02, 0.02},
	} {
		c, err := config.FromOverrides(tt.sets)
		if err != nil {
			t.Fatal(err)
		}
		on, coef := c.EffectiveKLLoss()
		if on != tt.on || coef != tt.coef {
			t.Errorf("%v: KL loss %v × %g, want %v × %g", tt.sets, on, coef, tt.on, tt.coef)
		}
		if c.Backend.Name != "local" {
			continue
		}
		p, err := NewPlan(c)
		if err != nil {
			t.Fatalf("%v: %v", tt.sets, err)
		}
		if p.Update.Loss.KLCoef != tt.planKL || p.Reference.Needed != (tt.planKL > 0) {
			t.Errorf("%v: plan KL %g (reference %v), want %g", tt.sets, p.Update.Loss.KLCoef, p.Reference.Needed, tt.planKL)
		}
	}
}

// The warm-up fits the env's format examples where the built-in task has
// them, shuffled ground truths otherwise, and none without a warm-up.
func TestWarmupUsesFormatExamples(t *testing.T) {
	for _, tt := range []struct {
		sets       []string
		steps      int
		withFormat bool
	}{
		{nil, 300, true},
		{[]string{"env.name=countdown"}, 300, true},
		{[]string{"env.name=math"}, 300, false},
		{[]string{"backend.local.warmup_steps=0"}, 0, true},
	} {
		c, err := config.FromOverrides(tt.sets)
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPlan(c)
		if err != nil {
			t.Fatalf("%v: %v", tt.sets, err)
		}
		if p.Warmup.Steps != tt.steps || (p.Warmup.Format != nil) != tt.withFormat {
			t.Errorf("%v: warm-up of %d steps, format examples %v; want %d, %v", tt.sets, p.Warmup.Steps, p.Warmup.Format != nil, tt.steps, tt.withFormat)
		}
	}
}
