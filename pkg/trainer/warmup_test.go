package trainer

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// The warm-up teacher keeps to the model's context as the model would: a
// prompt that fills it ends the episode (max_prompt_length_exceeded), a
// reply is cut where the context ends, and within it nothing changes.
func TestTeacherKeepsToTheContext(t *testing.T) {
	codec := local.Tokenizer{}
	reply := func(string, *rand.Rand) string { return "```Up```" } // 8 tokens + end of turn
	for _, tt := range []struct {
		name    string
		prompt  int
		tokens  int
		stop    string
		tooLong bool
	}{
		{"room to spare", 10, 9, backend.StopReasonStop, false},
		{"exactly enough room", 11, 9, backend.StopReasonStop, false},
		{"reply cut at the context", 15, 5, backend.StopReasonLength, false},
		{"one token of room", 19, 1, backend.StopReasonLength, false},
		{"prompt fills the context", 20, 0, "", true},
		{"prompt beyond the context", 25, 0, "", true},
	} {
		tc := &teacher{format: reply, codec: codec, context: 20, rng: rand.New(rand.NewPCG(1, 2))}
		res, err := tc.Sample(context.Background(), backend.SampleRequest{Prompt: make([]int, tt.prompt), NumSamples: 1})
		if tt.tooLong {
			if !errors.Is(err, sampler.ErrPromptTooLong) {
				t.Errorf("%s: err %v, want ErrPromptTooLong", tt.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		seq := res.Sequences[0]
		if len(seq.Tokens) != tt.tokens || len(seq.Logprobs) != tt.tokens || seq.StopReason != tt.stop {
			t.Errorf("%s: %d tokens (%d logprobs), stop %q; want %d, %q", tt.name, len(seq.Tokens), len(seq.Logprobs), seq.StopReason, tt.tokens, tt.stop)
		}
	}
}
