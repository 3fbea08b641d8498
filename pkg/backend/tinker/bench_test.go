package tinker

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/rllm-org/rllm-go/internal/faketinker"
	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
)

// bigBatch is 512 episodes of 4,096 tokens with sampling logprobs,
// advantages and a mask, as a GRPO step on long rollouts sends.
func bigBatch() []backend.Datum {
	const episodes, tokens = 512, 4096
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]backend.Datum, episodes)
	for i := range data {
		in := make([]int, tokens)
		tg := make([]int, tokens)
		lp := make([]float64, tokens)
		adv := make([]float64, tokens)
		mask := make([]float64, tokens)
		a := rng.NormFloat64()
		for j := range tokens {
			in[j] = rng.IntN(151000)
			tg[j] = rng.IntN(151000)
			if j >= 512 {
				lp[j] = -rng.ExpFloat64()
				adv[j] = a
				mask[j] = 1
			}
		}
		data[i] = backend.Datum{Input: in, LossFnInputs: backend.LossFnInputs{TargetTokens: tg, Logprobs: lp, Advantages: adv, Mask: mask}}
	}
	return data
}

// BenchmarkEncodeBatch validates and encodes the forward_backward body
// of a 512 × 4,096-token batch (what the client does before sending).
func BenchmarkEncodeBatch(b *testing.B) {
	data := bigBatch()
	loss := backend.Loss{Name: backend.LossPPO}
	var size int
	b.ReportAllocs()
	for b.Loop() {
		if err := validateDatums(data, loss, 32768, 0); err != nil {
			b.Fatal(err)
		}
		head, tail := encodeTrainingBody(wire.PathForwardBackward, data, loss)
		size = len(head) + len(tail)
	}
	b.SetBytes(int64(size))
	b.ReportMetric(float64(len(data)*4096)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mtokens/s")
}

// BenchmarkEncodeBatchStdJSON is the peer: the same wire datums through
// encoding/json (mask folded beforehand, as the client must).
func BenchmarkEncodeBatchStdJSON(b *testing.B) {
	data := bigBatch()
	b.ReportAllocs()
	var size int
	for b.Loop() {
		datums := make([]wire.WireDatum, len(data))
		for i, d := range data {
			n := len(d.Input)
			tt := make([]float64, n)
			adv := make([]float64, n)
			lp := make([]float64, n)
			for j := range n {
				tt[j] = float64(d.LossFnInputs.TargetTokens[j])
				adv[j] = float64(float32(d.LossFnInputs.Advantages[j] * d.LossFnInputs.Mask[j]))
				lp[j] = float64(float32(d.LossFnInputs.Logprobs[j]))
			}
			datums[i] = wire.WireDatum{ModelInput: wire.ModelInput{Chunks: []wire.ModelInputChunk{{Type: "encoded_text", Tokens: d.Input}}},
				LossFnInputs: map[string]wire.TensorData{
					"target_tokens": {Data: tt, Dtype: "int64", Shape: []int{n}},
					"logprobs":      {Data: lp, Dtype: "float32", Shape: []int{n}},
					"advantages":    {Data: adv, Dtype: "float32", Shape: []int{n}},
				}}
		}
		body, err := json.Marshal(wire.ForwardBackwardRequest{Type: wire.PathForwardBackward, ModelID: "model-1", SeqID: 1,
			ForwardBackwardInput: &wire.ForwardBackwardInput{Data: datums, LossFn: "ppo"}})
		if err != nil {
			b.Fatal(err)
		}
		size = len(body)
	}
	b.SetBytes(int64(size))
	b.ReportMetric(float64(len(data)*4096)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mtokens/s")
}

// BenchmarkStepViaFake is one training step (forward_backward of one
// short datum, then optim_step, queued before waiting) through the client
// and the fake server over loopback HTTP, with no injected latency.
// BenchmarkStepDirect is the same step on the embedded policy the fake
// runs; the difference is the client's and the wire's overhead.
func BenchmarkStepViaFake(b *testing.B) {
	be, _ := benchBackend(b)
	benchSteps(b, be)
}

func BenchmarkStepDirect(b *testing.B) {
	be, srv := benchBackend(b)
	benchSteps(b, srv.Model(be.ModelID()))
}

func benchBackend(b *testing.B) (*Backend, *faketinker.Server) {
	srv, err := faketinker.New(faketinker.Options{APIKey: testKey})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Close)
	opts := testOptions(srv.URL, nil)
	opts.Log = nil
	be, err := New(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	return be, srv
}

func benchSteps(b *testing.B, be backend.TrainingBackend) {
	data := []backend.Datum{datum("1+1=", "2", 1)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := step(ctx, be, data); err != nil {
			b.Fatal(err)
		}
	}
}
