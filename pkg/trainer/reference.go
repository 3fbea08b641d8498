package trainer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/ppo"
)

// referenceFile names, in the run directory, where the reference policy
// was saved when training started, so a resumed run compares against the
// same reference.
const referenceFile = "reference_path.txt"

// openReference loads the frozen reference policy the KL terms compare
// against: actor.ref_path when set, else the policy as training started
// (saved once into the run directory, after the embedded policy's
// warm-up, and reused on resume).
func (t *Trainer) openReference(ctx context.Context, resumed bool) error {
	if !t.plan.Reference.Needed {
		return nil
	}
	path := t.plan.Reference.Path
	record := filepath.Join(t.plan.Dir, referenceFile)
	if path == "" {
		b, err := os.ReadFile(record)
		switch {
		case err == nil && resumed:
			path = strings.TrimSpace(string(b))
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return err
		default:
			saved, err := t.be.SaveState(ctx, filepath.Join(t.plan.Dir, "reference")).Result(ctx)
			if err != nil {
				return fmt.Errorf("saving the reference policy: %w", err)
			}
			if err := atomicfile.WriteFile(record, []byte(saved+"\n")); err != nil {
				return err
			}
			path = saved
		}
	}
	ref, err := t.openBackend(ctx, path)
	if err != nil {
		return fmt.Errorf("opening the reference policy %s: %w", path, err)
	}
	t.ref = ref
	t.logf("reference policy for the KL terms: %s", path)
	return nil
}

// referenceLogprobs fills every trained sample's RefLogprobs with the
// reference policy's logprob of each response token.
func referenceLogprobs(ctx context.Context, ref backend.TrainingBackend, mini [][]*Sample) error {
	for _, mb := range mini {
		outs, err := forward(ctx, ref, datumsOf(mb))
		if err != nil {
			return err
		}
		for i, s := range mb {
			p := len(s.PromptIDs) - 1
			s.RefLogprobs = append([]float64(nil), outs[i].Logprobs[p:p+len(s.ResponseIDs)]...)
		}
	}
	return nil
}

// klInReward folds β·kl(old, ref) into the rewards as verl's
// apply_kl_penalty does: token rewards are the outcome reward on the last
// trained token minus the per-token penalty (ppo.KLInReward); an outcome
// estimator sees their sum. It returns the mean per-token KL over the
// trained tokens (actor/reward_kl_penalty).
func klInReward(smps []*Sample, beta float64, kind ppo.KLType) (float64, error) {
	var total, tokens float64
	for _, s := range smps {
		if s.RefLogprobs == nil || !s.Trains() {
			continue
		}
		n := len(s.ResponseIDs)
		scores, mask := make([]float64, n), make([]float64, n)
		last := -1
		for j, m := range s.LossMask {
			if m != 0 {
				mask[j], last = 1, j
			}
		}
		if last >= 0 {
			scores[last] = s.Reward
		}
		rewards := make([]float64, n)
		if err := ppo.KLInReward(scores, s.Logprobs, s.RefLogprobs, mask, beta, kind, rewards); err != nil {
			return 0, fmt.Errorf("episode %s: %w", s.EpisodeID, err)
		}
		sum := 0.0
		for j := range rewards {
			sum += rewards[j]
			k, _ := ppo.KL(kind, s.Logprobs[j], s.RefLogprobs[j])
			total += k * mask[j]
			tokens += mask[j]
		}
		s.TokenRewards, s.Reward = rewards, sum
	}
	if tokens == 0 {
		return 0, nil
	}
	return total / tokens, nil
}
