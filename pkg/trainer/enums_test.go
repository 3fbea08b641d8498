package trainer

import (
	"slices"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/ppo"
)

// Every value the config accepts for an enumerated key is accepted by the
// package that implements it, and every name those packages register is
// one the config accepts: no key value that is valid and then ignored or
// refused later, and no implemented estimator a user cannot select.
func TestConfigEnumerationsMatchTheirOwners(t *testing.T) {
	for _, name := range config.AdvEstimators {
		if _, err := ppo.Lookup(name); err != nil {
			t.Errorf("algorithm.adv_estimator=%s is valid config but pkg/ppo has no such estimator", name)
		}
	}
	for _, name := range ppo.Names() {
		if !slices.Contains(config.AdvEstimators, name) {
			t.Errorf("pkg/ppo registers estimator %s, which config.AdvEstimators does not accept", name)
		}
	}
	for _, name := range config.PolicyLosses {
		if _, err := ppo.ParsePolicyLoss(name); err != nil {
			t.Errorf("actor.policy_loss=%s: %v", name, err)
		}
	}
	for _, name := range []ppo.PolicyLossKind{ppo.LossPPO, ppo.LossImportanceSampling, ppo.LossCISPO, ppo.LossGSPO} {
		if !slices.Contains(config.PolicyLosses, string(name)) {
			t.Errorf("pkg/ppo's loss %s is not accepted by actor.policy_loss", name)
		}
	}
	for _, name := range config.LossAggModes {
		if _, err := ppo.ParseAggMode(name); err != nil {
			t.Errorf("actor.loss_agg_mode=%s: %v", name, err)
		}
	}
	for _, name := range config.KLLossTypes {
		if _, err := ppo.ParseKLType(name); err != nil {
			t.Errorf("actor.kl_loss_type=%s: %v", name, err)
		}
	}
	for _, name := range config.StepwiseModes {
		if m := StepwiseMode(name); m != StepwiseBroadcast && m != StepwisePerStep {
			t.Errorf("algorithm.stepwise_advantage.mode=%s has no implementation", name)
		}
	}
	for _, name := range backend.Names() {
		if !slices.Contains(config.BackendNames, name) {
			t.Errorf("backend %s is registered but backend.name does not accept it", name)
		}
	}
}
