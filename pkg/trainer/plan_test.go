package trainer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
	_ "github.com/rllm-org/rllm-go/pkg/backend/tinker" // registers backend.name=tinker
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/usererr"
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

// What a backend kind can never do is refused by NewPlan (validate-config,
// train --dry-run) with the words CheckBackend uses once connected, and
// the plan never prints a term the backend would refuse.
func TestPlanRefusesWhatTheBackendKindCannotDo(t *testing.T) {
	tinker := []string{"backend.name=tinker"}
	for _, tt := range []struct {
		sets []string
		want string // "" means the plan is accepted
	}{
		{append(tinker, "actor.entropy_coeff=0.01"), "actor.entropy_coeff: the tinker backend does not return per-token entropies (the Tinker API never does), so the entropy bonus cannot be computed; set it to 0"},
		{append(tinker, "actor.entropy_coeff=0"), ""},
		{[]string{"actor.entropy_coeff=0.01"}, ""},
	} {
		c, err := config.FromOverrides(tt.sets)
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPlan(c)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%v: %v", tt.sets, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%v: got %v, want an error containing %q", tt.sets, err, tt.want)
		case tt.want != "" && usererr.ExitCode(context.Background(), err) != usererr.ExitUsage:
			t.Errorf("%v: exit code %d, want %d", tt.sets, usererr.ExitCode(context.Background(), err), usererr.ExitUsage)
		}
		if err == nil && c.Backend.Name == "tinker" {
			// Once connected, CheckBackend says the same.
			if err := p.CheckBackend(backend.ModelInfo{SupportedLosses: []string{backend.LossCrossEntropy}}); err != nil {
				t.Errorf("%v: accepted by the plan, refused once connected: %v", tt.sets, err)
			}
		}
	}
	c, _ := config.FromOverrides(nil)
	p, err := NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	p.Update.Loss.EntropyCoeff, p.Backend = 0.01, "tinker"
	if err := p.CheckBackend(backend.ModelInfo{SupportedLosses: []string{backend.LossCrossEntropy}}); err == nil || !strings.Contains(err.Error(), "actor.entropy_coeff: the tinker backend does not return per-token entropies (the Tinker API never does)") {
		t.Errorf("CheckBackend: %v", err)
	}
}

// TestPlanNotesCodeNeedsARealModel: a code run on the embedded policy
// says at start that code tasks need a real model (issue 36); other
// runs say nothing.
func TestPlanNotesCodeNeedsARealModel(t *testing.T) {
	for _, tc := range []struct {
		overrides []string
		note      bool
	}{
		{[]string{"env.name=code"}, true},
		{[]string{"env.name=arith"}, false},
		{[]string{"env.name=code", "backend.local.weights=" + t.TempDir()}, false},
	} {
		p, err := NewPlan(smallConfig(t, tc.overrides...))
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Contains(strings.Join(p.Notes, "\n"), "code tasks need a real model")
		if got != tc.note {
			t.Errorf("%v: notes %q", tc.overrides, p.Notes)
		}
	}
}

// The warm-up of an agent program runs the env's built-in agent
// (backend.local.warmup_agent=auto), says so in the plan, and runs the
// program only when asked.
func TestWarmupAgent(t *testing.T) {
	program := []string{"workflow.name=program", "workflow.args.command=true"}
	for _, tt := range []struct {
		sets     []string
		workflow string
		builtin  bool
		err      string
	}{
		{nil, "single_turn", false, ""},
		{[]string{"backend.local.warmup_agent=builtin"}, "single_turn", false, ""},
		{program, "single_turn", true, ""},
		{append(program, "backend.local.warmup_agent=builtin"), "single_turn", true, ""},
		{append(program, "backend.local.warmup_agent=workflow"), "program", false, ""},
		{append(program, "env.name=frozenlake"), "multi_turn", true, ""},
		{append(program, "env.name=", "trainer.experiment_name=x", "backend.local.warmup_agent=builtin"), "", false, "backend.local.warmup_agent=builtin needs env.name"},
		{append(program, "env.name=", "trainer.experiment_name=x"), "program", false, ""},
	} {
		c, err := config.FromOverrides(tt.sets)
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPlan(c)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%v: got %v, want %q", tt.sets, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tt.sets, err)
		}
		if p.Warmup.Workflow.Name != tt.workflow || p.Warmup.Builtin != tt.builtin {
			t.Errorf("%v: warm-up through %s (built-in %v), want %s (%v)", tt.sets, p.Warmup.Workflow.Name, p.Warmup.Builtin, tt.workflow, tt.builtin)
		}
		if says := strings.Contains(p.String(), "instead of program"); says != tt.builtin {
			t.Errorf("%v: the plan says %v that the built-in agent stands in:\n%s", tt.sets, says, p.String())
		}
	}
	if _, err := config.FromOverrides([]string{"backend.local.warmup_agent=program"}); err == nil || !strings.Contains(err.Error(), "backend.local.warmup_agent") {
		t.Errorf("warmup_agent=program: %v", err)
	}
}

// The warm-up of a program run never starts the program (auto), and
// starts it when asked (workflow).
func TestWarmupDoesNotStartTheProgram(t *testing.T) {
	for _, tt := range []struct {
		agent   string
		started bool
	}{{"auto", false}, {"workflow", true}} {
		marker := filepath.Join(t.TempDir(), "started")
		c := smallConfig(t, "workflow.name=program", "workflow.args.command=touch '"+marker+"'; exit 1",
			"backend.local.warmup_agent="+tt.agent, "workflow.retry_limit=1")
		tr, err := New(context.Background(), c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		err = tr.warmup(context.Background())
		tr.Close()
		_, statErr := os.Stat(marker)
		if started := statErr == nil; started != tt.started {
			t.Errorf("warmup_agent=%s: the program started %v (warm-up: %v)", tt.agent, started, err)
		}
		if !tt.started && err != nil {
			t.Errorf("warmup_agent=%s: %v", tt.agent, err)
		}
	}
}

// data.filter_overlong_prompts drops the group of a task whose prompt was
// cut, whole, and keeps the others.
func TestDropOverlongPrompts(t *testing.T) {
	cut := Sample{}
	cut.PromptCut = true
	groups := []Group{
		{TaskID: "a", Samples: []Sample{{}, {}}},
		{TaskID: "b", Samples: []Sample{{}, cut}},
		{TaskID: "c", Samples: []Sample{{}}},
	}
	kept, n := dropOverlongPrompts(groups)
	if n != 1 || len(kept) != 2 || kept[0].TaskID != "a" || kept[1].TaskID != "c" {
		t.Fatalf("kept %v, dropped %d; want a and c, 1", kept, n)
	}
	c, err := config.FromOverrides([]string{"data.filter_overlong_prompts=true"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(c)
	if err != nil || !p.Filters.DropOverlongPrompts || !strings.Contains(p.String(), "drop tasks with overlong prompts") {
		t.Fatalf("plan %v, %v: want the filter on", p, err)
	}
	c, _ = config.FromOverrides([]string{"data.filter_overlong_prompts=true", "algorithm.stepwise_advantage.enable=true"})
	if _, err := NewPlan(c); err == nil || !strings.Contains(err.Error(), "data.filter_overlong_prompts") {
		t.Fatalf("stepwise: %v", err)
	}
}

// An agent that leaves the history out of its prompts (frozenlake's
// use_accumulate_history=false) trains per step: as one sequence per
// trajectory every turn after the first would be a token mismatch.
func TestPlanRefusesFreshPromptsAsOneSequence(t *testing.T) {
	for _, tc := range []struct {
		sets    []string
		refused bool
	}{
		{[]string{"agent.args.use_accumulate_history=false"}, true},
		{[]string{"agent.args.use_accumulate_history=false", "algorithm.stepwise_advantage.enable=true"}, false},
		{[]string{"agent.args.use_accumulate_history=true"}, false},
		{[]string{"agent.args.max_steps=10"}, false},
	} {
		c, err := config.FromOverrides(append([]string{"env.name=frozenlake"}, tc.sets...))
		if err != nil {
			t.Fatal(err)
		}
		_, err = NewPlan(c)
		if got := err != nil && strings.Contains(err.Error(), "agent.args.use_accumulate_history") && strings.Contains(err.Error(), "algorithm.stepwise_advantage.enable=true"); got != tc.refused {
			t.Errorf("%v: err = %v, want refused %v", tc.sets, err, tc.refused)
		}
	}
}
