package local

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// grpoBenchBatch is a GRPO step's training batch: prompts × n datums, each
// a prompt of promptLen random tokens and a reply of minReply..maxReply
// tokens, with importance-sampling inputs on the reply.
func grpoBenchBatch(prompts, n, promptLen, minReply, maxReply int) []backend.Datum {
	rng := rand.New(rand.NewPCG(1, 2))
	var data []backend.Datum
	for range prompts {
		prompt := make([]int, promptLen)
		for i := range prompt {
			prompt[i] = rng.IntN(256)
		}
		for r := range n {
			full := slices.Clone(prompt)
			reply := minReply + rng.IntN(maxReply-minReply+1)
			for k := range reply {
				tok := rng.IntN(256)
				if k == 0 {
					tok = r // distinct first tokens: the shared prefix is the prompt
				}
				full = append(full, tok)
			}
			m := len(full) - 1
			in := backend.LossFnInputs{TargetTokens: full[1:], Logprobs: make([]float64, m), Advantages: make([]float64, m)}
			adv := rng.NormFloat64()
			for t := promptLen - 1; t < m; t++ {
				in.Logprobs[t], in.Advantages[t] = -rng.Float64()*4, adv
			}
			data = append(data, backend.Datum{Input: full[:m], LossFnInputs: in})
		}
	}
	return data
}

// BenchmarkForwardBackwardGRPO is ForwardBackward on 32 prompts × 8
// replies, the default model (with a 256 context for the long prompts),
// packed by shared prefix and, for reference, one sequence per datum.
func BenchmarkForwardBackwardGRPO(b *testing.B) {
	shapes := []struct {
		name                        string
		context, prompt, minR, maxR int
	}{
		{"prompt23-reply3", 128, 23, 3, 3},
		{"prompt100-reply20to28", 256, 100, 20, 28},
	}
	ctx := context.Background()
	loss := backend.Loss{Name: backend.LossImportanceSampling}
	for _, s := range shapes {
		data := grpoBenchBatch(32, 8, s.prompt, s.minR, s.maxR)
		tokens := 0
		for _, d := range data {
			tokens += len(d.Input)
		}
		for _, mode := range []string{"packed", "unpacked"} {
			b.Run(s.name+"/"+mode, func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.Context = s.context
				be, err := New(Options{Config: cfg})
				if err != nil {
					b.Fatal(err)
				}
				defer be.Close()
				be.unpacked = mode == "unpacked"
				// One call outside the timing: the workspaces are allocated
				// (and grown for long packs) on first use.
				if _, err := be.ForwardBackward(ctx, data, loss).Result(ctx); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := be.ForwardBackward(ctx, data, loss).Result(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}
