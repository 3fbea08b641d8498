package gateway

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// A sampled token of probability 0 (-inf logprob) is written as vLLM
// writes it, -9999.0, in both forms: JSON has no infinity.
func TestLogprobsNegInf(t *testing.T) {
	tr := &Trace{PromptIDs: []int{1}, CompletionIDs: []int{5, 6}, Logprobs: []float64{math.Inf(-1), -0.5}}
	for name, v := range map[string]any{"chat": chatLogprobs(tr), "completion": completionLogprobs(tr)} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(string(b), "-9999") || !strings.Contains(string(b), `"token_id:5"`) {
			t.Errorf("%s: %s", name, b)
		}
	}
}
