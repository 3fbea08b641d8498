package trainer

import (
	"context"
	"fmt"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/tracking"
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
	t.valTable = valTable(t.step, eps)
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

// valSampleRows bounds the validation episodes sampled for the trackers.
const valSampleRows = 16

// valTable is a sample of a validation's episodes (the first episode of
// the first tasks) as a table: what W&B shows as val/generations.
func valTable(step int, eps []*episode.Episode) *tracking.Table {
	tab := &tracking.Table{Key: "val/generations", Columns: []string{"step", "data_source", "prompt", "response", "reward", "correct"}}
	seen := map[string]bool{}
	for _, ep := range eps {
		if len(tab.Rows) == valSampleRows {
			break
		}
		task, _, _ := strings.Cut(ep.ID, ":")
		if seen[task] || len(ep.Trajectories) == 0 || len(ep.Trajectories[0].Steps) == 0 {
			continue
		}
		seen[task] = true
		tr := ep.Trajectories[0]
		first, last := tr.Steps[0], tr.Steps[len(tr.Steps)-1]
		prompt := ""
		for _, m := range first.ChatCompletions {
			if m.Role == "user" {
				prompt = m.Content
				break
			}
		}
		if prompt == "" && first.Observation != nil {
			prompt = fmt.Sprint(first.Observation)
		}
		src, _ := ep.Task["data_source"].(string)
		tab.Rows = append(tab.Rows, []any{step, src, prompt, last.ModelResponse, tr.Reward, ep.IsCorrect})
	}
	if len(tab.Rows) == 0 {
		return nil
	}
	return tab
}
