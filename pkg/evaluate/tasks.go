package evaluate

import (
	"context"
	"sort"
	"strings"

	"github.com/rllm-org/rllm-go/internal/anyval"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/reward"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// MaxBytesPerToken bounds the bytes of one token's text: a question of
// more than data.max_prompt_length times this many bytes cannot fit,
// whatever the tokenizer (common ones average 3 to 5 bytes per token).
const MaxBytesPerToken = 16

// questionColumns are the columns the agents read the question from, in
// their order (pkg/agent ObservationText).
var questionColumns = []string{"question", "problem", "prompt", "observation"}

// QuestionText is a row's question as the agents read it, and the column
// it came from ("" when the row has none of them).
func QuestionText(t episode.Task) (question, column string) {
	for _, col := range questionColumns {
		if v, ok := t[col]; ok {
			s, _ := v.(string)
			return s, col
		}
	}
	return "", ""
}

// LoadTasks reads the plan's dataset files in order. With a single-turn
// scored env every row must hold a text question and a reference answer
// (CheckScoredColumns), and rows whose question is too long for
// data.max_prompt_length by its size alone are skipped before they are
// tokenized or sent: skipped counts them.
func (p *Plan) LoadTasks(ctx context.Context) (tasks []episode.Task, skipped int, err error) {
	maxQuestion := p.Rows.MaxQuestionBytes()
	for _, path := range p.Files {
		ts, err := dataset.Load(ctx, path, dataset.Options{})
		if err != nil {
			return nil, 0, err
		}
		if len(ts) == 0 {
			return nil, 0, usererr.Errorf("%s has no rows; nothing to evaluate", path)
		}
		if p.Rows.Scored {
			if err := CheckScoredColumns(path, p.Rows.EnvName, ts); err != nil {
				return nil, 0, err
			}
			kept := ts[:0]
			for _, t := range ts {
				if q, _ := QuestionText(t); len(q) > maxQuestion {
					skipped++
					continue
				}
				kept = append(kept, t)
			}
			ts = kept
		}
		tasks = append(tasks, ts...)
	}
	if len(tasks) == 0 {
		return nil, skipped, usererr.Errorf("every row of %s is too long for data.max_prompt_length=%d; nothing to evaluate", strings.Join(p.Data, ", "), p.Rows.MaxPromptLength)
	}
	return tasks, skipped, nil
}

// CheckScoredColumns refuses, before anything runs, rows a single-turn
// scored env cannot use: without a text question or without a reference
// answer they would only score 0.
func CheckScoredColumns(path, envName string, tasks []episode.Task) error {
	for i, t := range tasks {
		q, col := QuestionText(t)
		_, isText := t[col].(string)
		switch {
		case col == "":
			return usererr.Errorf("%s: row %d has no question column (%s); env %s reads the question from one of them: rename the column that holds it (columns: %s)",
				path, i, strings.Join(questionColumns, ", "), envName, columnList(t))
		case !isText && t[col] != nil:
			return usererr.Errorf("%s: row %d: column %s holds %s, not text; env %s needs the question as a string", path, i, col, anyval.Kind(t[col]), envName)
		case q == "":
			return usererr.Errorf("%s: row %d: column %s is empty; env %s needs a question in every row", path, i, col, envName)
		}
		if _, ok := reward.GroundTruth(t); !ok {
			return usererr.Errorf("%s: row %d has no reference answer (ground_truth, answer, target or reward_model.ground_truth); env %s scores replies against it: add the column (columns: %s)",
				path, i, envName, columnList(t))
		}
	}
	return nil
}

// columnList names a row's columns, sorted, the first 20 of them.
func columnList(t episode.Task) string {
	cols := make([]string, 0, len(t))
	for k := range t {
		cols = append(cols, k)
	}
	sort.Strings(cols)
	if len(cols) > 20 {
		cols = append(cols[:20], "...")
	}
	return strings.Join(cols, ", ")
}
