package local

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// benchRows is the sequence length of the benchmarks: an arith prompt in
// the chat template plus a short reply is ~30–40 tokens.
const benchRows = 48

// matmulShapes are the (k, n) of every weight product of one block plus
// the head, for the default config: rows×k times k×n.
func matmulShapes(c Config) [][2]int {
	c = c.withDefaults()
	d := c.DModel
	return [][2]int{{d, 3 * d}, {d, d}, {d, c.DFF}, {c.DFF, d}, {d, TokenizerVocab}}
}

// BenchmarkMatMulReference is the machine's reference rate: the forward
// products of the default model's shapes on benchRows rows, one
// independent product per core, as the batch-parallel training runs them.
func BenchmarkMatMulReference(b *testing.B) {
	c := DefaultConfig().withDefaults()
	workers := runtime.GOMAXPROCS(0)
	type job struct{ a, w, out []float32 }
	jobs := make([][]job, workers)
	flops := 0.0
	for wk := range workers {
		for _, s := range matmulShapes(c) {
			jobs[wk] = append(jobs[wk], job{make([]float32, benchRows*s[0]), make([]float32, s[0]*s[1]), make([]float32, benchRows*s[1])})
			if wk == 0 {
				flops += 2 * float64(benchRows*s[0]*s[1])
			}
		}
		for _, j := range jobs[wk] {
			for i := range j.a {
				j.a[i] = float32(i%7) * 0.1
			}
			for i := range j.w {
				j.w[i] = float32(i%5) * 0.1
			}
		}
	}
	shapes := matmulShapes(c)
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		for wk := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i, s := range shapes {
					j := jobs[wk][i]
					matMul(j.out, j.a, j.w, benchRows, s[0], s[1])
				}
			}()
		}
		wg.Wait()
	}
	b.ReportMetric(flops*float64(workers)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// trainFLOPs counts the multiply-adds of a forward and backward over one
// sequence of T tokens: weight products (forward, input grad, weight
// grad: 3×) and attention (scores and weighted sum, 3×).
func trainFLOPs(c Config, T int) float64 {
	var f float64
	for i, s := range matmulShapes(c) {
		mult := float64(c.Layers)
		if i == 4 {
			mult = 1
		}
		f += mult * 2 * float64(T*s[0]*s[1])
	}
	attn := float64(c.Layers) * 2 * 2 * float64(T*(T+1)/2) * float64(c.DModel)
	return 3 * (f + attn)
}

func BenchmarkForwardBackward(b *testing.B) {
	ctx := context.Background()
	cfg := DefaultConfig().withDefaults()
	be, err := New(Options{Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	const batch = 16
	data := make([]backend.Datum, batch)
	for i := range data {
		in, tg := make([]int, benchRows), make([]int, benchRows)
		for t := range in {
			in[t], tg[t] = (i*7+t*3)%256, (i*5+t)%256
		}
		data[i] = backend.Datum{Input: in, LossFnInputs: backend.LossFnInputs{TargetTokens: tg}}
	}
	loss := backend.Loss{Name: backend.LossCrossEntropy}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		if _, err := be.ForwardBackward(ctx, data, loss).Result(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := be.OptimStep(ctx, backend.DefaultAdamParams(1e-3)).Result(ctx); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds()
	tokens := float64(batch*benchRows) * float64(b.N)
	b.ReportMetric(tokens/sec, "tokens/s")
	b.ReportMetric(trainFLOPs(cfg, benchRows)*batch*float64(b.N)/sec/1e9, "GFLOP/s")
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapInuse)/(1<<20), "heap-MiB")
}

// benchSnapshot is the first snapshot of a fresh backend of config c,
// closed when b ends.
func benchSnapshot(b *testing.B, c Config) *Snapshot {
	ctx := context.Background()
	be, err := New(Options{Config: c})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	ts, err := be.PublishSampler(ctx, "").Result(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return ts.(*Snapshot)
}

func BenchmarkSample(b *testing.B) {
	ctx := context.Background()
	cfg := DefaultConfig().withDefaults()
	ts := benchSnapshot(b, cfg)
	prompt := chatPrompt("12+34=")
	const n, maxTok = 16, 32
	// No stop token can end a sequence early: every sample is maxTok long.
	req := backend.SampleRequest{Prompt: prompt, NumSamples: n, Params: backend.SamplingParams{Temperature: 1, MaxTokens: maxTok, Seed: seed(1)}}
	generated := 0
	b.ResetTimer()
	for b.Loop() {
		res, err := ts.Sample(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range res.Sequences {
			generated += len(s.Tokens)
		}
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(generated)/sec, "tokens/s")
	// One decode token costs a one-row forward: a third of trainFLOPs per token.
	perToken := trainFLOPs(cfg, len(prompt)+maxTok/2) / 3 / float64(len(prompt)+maxTok/2)
	b.ReportMetric(float64(generated)*perToken/sec/1e9, "GFLOP/s")
}
