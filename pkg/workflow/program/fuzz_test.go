package program

import (
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// FuzzResult reads arbitrary last lines as a program's result: an answer,
// a reward, or an error; never a panic, never a non-finite reward.
func FuzzResult(f *testing.F) {
	for _, s := range []string{`{"answer": "7"}`, `{"reward": 0.5, "is_correct": true}`, `{"reward": "x"}`, `{"answer": {"a": [1]}}`,
		`{"reward": 1e999}`, `garbage`, `null`, `{}`, `[1]`, `{"reward": -0.0}`} {
		f.Add(s)
	}
	w := &Program{score: func(_ episode.Task, answer string) (float64, bool, map[string]any, error) {
		return float64(len(answer)), true, nil, nil
	}}
	f.Fuzz(func(t *testing.T, line string) {
		o, err := w.result(episode.Task{}, line)
		if err == nil && (o.reward != o.reward || o.reward > 1e308 || o.reward < -1e308) {
			t.Fatalf("%q gave reward %v", line, o.reward)
		}
	})
}
