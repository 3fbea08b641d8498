package local

import (
	"context"
	"errors"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// prompt_logprobs 0 (the token's own logprob, no alternatives) asked
// topLogprobs for k=0, which read top[-1] in the engine goroutine and
// killed the process.
func TestEnginePromptLogprobsZero(t *testing.T) {
	e := newTestEngine(t, testSnapshot(t, 3), EngineOptions{Workers: 2})
	st, err := e.Submit(context.Background(), GenRequest{Prompt: chatPrompt("1+2="), N: 1, PromptLogprobs: 0,
		Params: backend.SamplingParams{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 3, Seed: seed(1)}})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, st[0])
	lps := st[0].PromptLogprobs()
	if len(lps) < 2 || len(lps[1]) != 1 {
		t.Fatalf("prompt logprobs %v: want the token's own entry only", lps)
	}
}

// A panic while the engine runs a batch fails that batch's requests with
// Err set; the engine keeps serving the next ones.
func TestEnginePanicFailsOnlyTheBatch(t *testing.T) {
	boom := true
	testHookStep = func(part []*genSeq) {
		if boom && part[0].g.req.Params.MaxTokens == 7 {
			panic("injected")
		}
	}
	t.Cleanup(func() { testHookStep = nil })
	e := newTestEngine(t, testSnapshot(t, 3), EngineOptions{Workers: 2})
	params := backend.SamplingParams{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 7, Seed: seed(1)}
	st, err := e.Submit(context.Background(), GenRequest{Prompt: chatPrompt("x"), N: 2, Params: params, PromptLogprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	seqs := collect(t, st[0])
	if err := st[0].Err(); !errors.Is(err, ErrEngineFailed) {
		t.Fatalf("Err() = %v, want ErrEngineFailed", err)
	}
	for i, s := range seqs {
		if s.StopReason != "abort" {
			t.Errorf("sequence %d finished %q, want abort", i, s.StopReason)
		}
	}
	params.MaxTokens = 5
	st, err = e.Submit(context.Background(), GenRequest{Prompt: chatPrompt("x"), N: 1, Params: params, PromptLogprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	seqs = collect(t, st[0])
	if st[0].Err() != nil || len(seqs[0].Tokens) == 0 {
		t.Fatalf("the next request: err %v, %d tokens", st[0].Err(), len(seqs[0].Tokens))
	}
}
