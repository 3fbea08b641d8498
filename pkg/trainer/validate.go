package trainer

import (
	"context"
	"fmt"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// validate runs the validation tasks with rollout.val_kwargs sampling and
// returns rLLM's val/ metrics: pass@1 and pass@n per data source, and the
// mean reward.
func (t *Trainer) validate(ctx context.Context) (map[string]float64, error) {
	start := t.now()
	n := t.plan.Val.N
	onEvent, done := t.phase("validation", len(t.val)*n)
	defer done()
	eng, err := rollout.NewRunner(t.plan.Workflow, t.chat, t.plan.Val.Params, n, t.runnerFor(phaseVal), onEvent)
	if err != nil {
		return nil, err
	}
	var eps []*episode.Episode
	size := t.plan.ValBatchSize
	if size <= 0 {
		size = len(t.val)
	}
	for lo := 0; lo < len(t.val); lo += size {
		got, err := eng.Run(ctx, t.val[lo:min(lo+size, len(t.val))])
		if err != nil {
			return nil, err
		}
		eps = append(eps, got...)
	}
	if err := allFailed(eps); err != nil {
		return nil, fmt.Errorf("validation at step %d: %w", t.step, err)
	}
	t.diag.noteEpisodes(phaseValidation, eps)
	t.episodes.keepVal(t.step, eps)
	sum := rollout.Summarize(eps, n)
	m := map[string]float64{
		"val/pass@1":      sum.PassAt1,
		"val/mean_reward": sum.MeanReward,
	}
	if n > 1 {
		m["val/pass@"+itoa(n)] = sum.PassAtK
	}
	for _, src := range sum.Sources() {
		s := sum.BySource[src]
		m["val/"+src+"/pass@1"] = s.PassAt1
		if n > 1 {
			m["val/"+src+"/pass@"+itoa(n)] = s.PassAtK
		}
	}
	m["timing_s/testing"] = t.now().Sub(start).Seconds()
	t.printVal(m)
	return m, nil
}
