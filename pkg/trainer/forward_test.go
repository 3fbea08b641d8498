package trainer

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// shortBackend answers a forward pass with one output too few.
type shortBackend struct{ nullBackend }

func (b shortBackend) Forward(_ context.Context, data []backend.Datum, _ backend.Loss) *backend.Future[backend.ForwardBackwardOutput] {
	return b.fb(data[1:])
}

// TestForward: the reference and proximal passes share forward, which
// gives one output per sequence or an error, never a short slice to index.
func TestForward(t *testing.T) {
	sample := func() *Sample {
		return &Sample{Sequence: rollout.Sequence{PromptIDs: []int{1, 2, 3}, ResponseIDs: []int{4, 5}, Logprobs: []float64{-2, -2}, LossMask: []int8{1, 1}}}
	}
	mini := [][]*Sample{{sample(), sample()}, {sample()}}
	ctx := context.Background()
	if err := referenceLogprobs(ctx, nullBackend{}, mini); err != nil {
		t.Fatal(err)
	}
	for _, mb := range mini {
		for _, s := range mb {
			if !slices.Equal(s.RefLogprobs, []float64{-1, -1}) {
				t.Errorf("RefLogprobs %v, want the response tokens' [-1 -1]", s.RefLogprobs)
			}
		}
	}
	tests := []struct {
		name string
		run  func(be backend.TrainingBackend) error
		want string
	}{
		{"reference", func(be backend.TrainingBackend) error { return referenceLogprobs(ctx, be, mini) }, "the backend's forward returned 1 outputs for 2 sequences"},
		{"proximal", func(be backend.TrainingBackend) error {
			_, err := proximalLogprobs(ctx, be, &UpdatePlan{Correction: CorrectionPlan{Decoupled: true}}, mini)
			return err
		}, "the proximal policy's logprobs (algorithm.rollout_correction.bypass_mode=false): the backend's forward returned 1 outputs for 2 sequences"},
	}
	for _, tt := range tests {
		if err := tt.run(nullBackend{}); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		if err := tt.run(shortBackend{}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s with a short answer: %v, want %q", tt.name, err, tt.want)
		}
	}
}
