package local

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

func newTestBackend(t *testing.T, cfg Config) *Backend {
	t.Helper()
	b, err := New(Options{Config: cfg, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func smallConfig() Config {
	return Config{Layers: 2, DModel: 32, Heads: 4, Context: 48, Seed: 5}
}

func publish(t *testing.T, b *Backend) *Snapshot {
	t.Helper()
	s, err := b.PublishSampler(context.Background(), "").Result(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.(*Snapshot)
}

func seed(v int64) *int64 { return &v }

// chatPrompt renders a one-question chat for the arith task.
func chatPrompt(q string) []int {
	return Tokenizer{}.ChatTemplate([]episode.Message{{Role: "user", Content: q}}, true)
}

// datumFor builds the training datum of prompt+reply with the reply's
// sampling logprobs and one advantage for every reply token.
func datumFor(prompt []int, seq backend.SampledSequence, adv float64) backend.Datum {
	full := append(slices.Clone(prompt), seq.Tokens...)
	n := len(full) - 1
	d := backend.Datum{Input: full[:n], LossFnInputs: backend.LossFnInputs{
		TargetTokens: full[1:], Logprobs: make([]float64, n), Advantages: make([]float64, n),
	}}
	for i := range seq.Tokens {
		if seq.Logprobs != nil {
			d.LossFnInputs.Logprobs[len(prompt)-1+i] = seq.Logprobs[i]
		}
		d.LossFnInputs.Advantages[len(prompt)-1+i] = adv
	}
	return d
}

func TestSampledLogprobsMatchForward(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	s := publish(t, b)
	prompt := chatPrompt("12+30=")
	for _, temp := range []float64{1, 0.7} {
		res, err := s.Sample(ctx, backend.SampleRequest{Prompt: prompt, NumSamples: 4, Params: backend.SamplingParams{Temperature: temp, MaxTokens: 10, Seed: seed(1)}})
		if err != nil {
			t.Fatal(err)
		}
		var data []backend.Datum
		for _, seq := range res.Sequences {
			if len(seq.Tokens) != len(seq.Logprobs) || len(seq.Tokens) == 0 {
				t.Fatalf("sequence has %d tokens and %d logprobs", len(seq.Tokens), len(seq.Logprobs))
			}
			data = append(data, datumFor(prompt, seq, 1))
		}
		out, err := b.Forward(ctx, data, backend.Loss{Name: backend.LossImportanceSampling}).Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k, seq := range res.Sequences {
			for i, lp := range seq.Logprobs {
				got := out.LossFnOutputs[k].Logprobs[len(prompt)-1+i]
				if math.Abs(got-lp) > 1e-5 {
					t.Errorf("temperature %g sample %d token %d: sampled logprob %g, forward %g", temp, k, i, lp, got)
				}
			}
		}
		// On-policy at temperature 1: every ratio is 1, so the IS loss is −ΣA.
		if temp == 1 {
			want := 0.0
			for _, seq := range res.Sequences {
				want -= float64(len(seq.Tokens))
			}
			if got := out.Metrics["loss:sum"]; math.Abs(got-want) > 1e-4 {
				t.Errorf("on-policy importance_sampling loss %g, want %g", got, want)
			}
		}
	}
}

func TestSamplingParams(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	s := publish(t, b)
	prompt := chatPrompt("1+1=")
	sample := func(p backend.SamplingParams, n int) backend.SampleResult {
		t.Helper()
		res, err := s.Sample(ctx, backend.SampleRequest{Prompt: prompt, NumSamples: n, Params: p})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Sequences) != n {
			t.Fatalf("%d sequences, want %d", len(res.Sequences), n)
		}
		return res
	}
	a := sample(backend.SamplingParams{Temperature: 1, MaxTokens: 12, Seed: seed(42)}, 6)
	a2 := sample(backend.SamplingParams{Temperature: 1, MaxTokens: 12, Seed: seed(42)}, 6)
	c := sample(backend.SamplingParams{Temperature: 1, MaxTokens: 12, Seed: seed(43)}, 6)
	if !sameTokens(a, a2) {
		t.Error("the same seed gave different samples")
	}
	if sameTokens(a, c) {
		t.Error("different seeds gave identical samples")
	}
	if sameTokens(a, backend.SampleResult{Sequences: slices.Repeat(a.Sequences[:1], 6)}) {
		t.Error("all six samples are identical; samples must differ within a request")
	}
	for _, seq := range a.Sequences {
		if len(seq.Tokens) > 12 {
			t.Errorf("%d tokens with max_tokens 12", len(seq.Tokens))
		}
		if seq.StopReason == backend.StopReasonLength && len(seq.Tokens) != 12 {
			t.Errorf("stop reason length after %d tokens", len(seq.Tokens))
		}
	}
	greedy := sample(backend.SamplingParams{Temperature: 0, MaxTokens: 8}, 3)
	topk1 := sample(backend.SamplingParams{Temperature: 1, TopK: 1, MaxTokens: 8, Seed: seed(9)}, 1)
	tinyP := sample(backend.SamplingParams{Temperature: 1, TopP: 1e-9, MaxTokens: 8, Seed: seed(9)}, 1)
	for _, r := range []backend.SampleResult{greedy, topk1, tinyP} {
		if !slices.Equal(r.Sequences[0].Tokens, greedy.Sequences[0].Tokens) || !slices.Equal(r.Sequences[len(r.Sequences)-1].Tokens, greedy.Sequences[0].Tokens) {
			t.Errorf("greedy, top_k 1 and tiny top_p differ: %v vs %v", r.Sequences[0].Tokens, greedy.Sequences[0].Tokens)
		}
	}
	// Force a stop token: greedy's first token, given as a stop id.
	first := greedy.Sequences[0].Tokens[0]
	st := sample(backend.SamplingParams{Temperature: 0, MaxTokens: 8, StopTokenIDs: []int{first}}, 1).Sequences[0]
	if len(st.Tokens) != 1 || st.StopReason != backend.StopReasonStop || st.MatchedStop == "" {
		t.Errorf("stop token id: got %+v", st)
	}
	// A stop string of the greedy reply's first two bytes (if they are bytes).
	g := greedy.Sequences[0].Tokens
	if len(g) >= 2 && g[0] < 256 && g[1] < 256 {
		stop := string([]byte{byte(g[0]), byte(g[1])})
		ss := sample(backend.SamplingParams{Temperature: 0, MaxTokens: 8, Stop: []string{"never", stop}}, 1).Sequences[0]
		if len(ss.Tokens) != 2 || ss.StopReason != backend.StopReasonStop || ss.MatchedStop != stop {
			t.Errorf("stop string %q: got %+v", stop, ss)
		}
	}
	// max_tokens beyond the context ends at the context with "length".
	long := sample(backend.SamplingParams{Temperature: 0, MaxTokens: 1000, StopTokenIDs: nil}, 1).Sequences[0]
	if long.StopReason == backend.StopReasonLength && len(prompt)+len(long.Tokens) != smallConfig().Context {
		t.Errorf("length stop at %d tokens, context %d", len(prompt)+len(long.Tokens), smallConfig().Context)
	}
}

func sameTokens(a, b backend.SampleResult) bool {
	if len(a.Sequences) != len(b.Sequences) {
		return false
	}
	for i := range a.Sequences {
		if !slices.Equal(a.Sequences[i].Tokens, b.Sequences[i].Tokens) {
			return false
		}
	}
	return true
}

func TestSampleBadInput(t *testing.T) {
	b := newTestBackend(t, smallConfig())
	s := publish(t, b)
	cases := []struct {
		name string
		req  backend.SampleRequest
		want string
	}{
		{"too long", backend.SampleRequest{Prompt: make([]int, 48), NumSamples: 1}, "the prompt has 48 tokens but the model's context is 48"},
		{"vocab", backend.SampleRequest{Prompt: []int{1, 261}, NumSamples: 1}, "prompt token 1 is 261, outside the vocabulary [0, 261)"},
		{"negative", backend.SampleRequest{Prompt: []int{-1}, NumSamples: 1}, "prompt token 0 is -1"},
		{"empty", backend.SampleRequest{NumSamples: 1}, "the prompt is empty"},
		{"temperature", backend.SampleRequest{Prompt: []int{1}, Params: backend.SamplingParams{Temperature: -1}}, "temperature is -1"},
		{"top_p", backend.SampleRequest{Prompt: []int{1}, Params: backend.SamplingParams{TopP: 2}}, "top_p is 2"},
		{"stop id", backend.SampleRequest{Prompt: []int{1}, Params: backend.SamplingParams{StopTokenIDs: []int{999}}}, "stop token id 999"},
		{"num_samples", backend.SampleRequest{Prompt: []int{1}, NumSamples: MaxSamples + 1}, "num_samples"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Sample(context.Background(), c.req)
			var ie *backend.InputError
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &ie) {
				t.Fatalf("err = %v, want an InputError containing %q", err, c.want)
			}
			if tooLong := errors.Is(err, sampler.ErrPromptTooLong); tooLong != (c.name == "too long") {
				t.Errorf("errors.Is(err, sampler.ErrPromptTooLong) = %v", tooLong)
			}
		})
	}
}

func TestImportanceSamplingRaisesRewardedReply(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	prompt := chatPrompt("3+4=")
	reply := backend.SampledSequence{Tokens: []int{'7', TokenImEnd}}
	// lpOf returns the reply's per-token logprobs and their sum.
	lpOf := func() ([]float64, float64) {
		d := datumFor(prompt, reply, 1)
		out, err := b.Forward(ctx, []backend.Datum{d}, backend.Loss{Name: backend.LossCrossEntropy}).Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lp := out.LossFnOutputs[0].Logprobs[len(prompt)-1:]
		return lp, lp[0] + lp[1]
	}
	_, before := lpOf()
	for range 5 {
		reply.Logprobs, _ = lpOf() // on-policy: the ratio is 1
		d := datumFor(prompt, reply, 1)
		b.ForwardBackward(ctx, []backend.Datum{d}, backend.Loss{Name: backend.LossImportanceSampling})
		if _, err := b.OptimStep(ctx, backend.DefaultAdamParams(1e-2)).Result(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, after := lpOf(); after <= before+1 {
		t.Fatalf("logprob of the rewarded reply went from %.3f to %.3f; expected a clear rise", before, after)
	}
}

func TestCrossEntropySFTDrivesLossDown(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	var data []backend.Datum
	for _, q := range []string{"1+1=", "2+2=", "3+3="} {
		prompt := chatPrompt(q)
		ans := []int{int('0' + 2*(q[0]-'0')), TokenImEnd}
		full := append(slices.Clone(prompt), ans...)
		w := make([]float64, len(full)-1)
		for i := len(prompt) - 1; i < len(w); i++ {
			w[i] = 1
		}
		data = append(data, backend.Datum{Input: full[:len(full)-1], LossFnInputs: backend.LossFnInputs{TargetTokens: full[1:], Weights: w}})
	}
	loss := backend.Loss{Name: backend.LossCrossEntropy}
	var first, last float64
	for step := range 30 {
		// Queue both calls before waiting, as a Tinker trainer does.
		fb := b.ForwardBackward(ctx, data, loss)
		opt := b.OptimStep(ctx, backend.AdamParams{LearningRate: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, GradClipNorm: 1})
		out, err := fb.Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := opt.Result(ctx); err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			first = out.Metrics["loss:sum"]
		}
		last = out.Metrics["loss:sum"]
	}
	if !(last < first/4) {
		t.Fatalf("SFT loss went from %.3f to %.3f; expected it to fall below a quarter", first, last)
	}
}

func TestNaNGradientRefusedWeightsUnchanged(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	prompt := chatPrompt("1+2=")
	d := datumFor(prompt, backend.SampledSequence{Tokens: []int{'3', TokenImEnd}, Logprobs: []float64{-1, -1}}, math.NaN())
	before := slices.Clone(b.params)
	if _, err := b.ForwardBackward(ctx, []backend.Datum{d}, backend.Loss{Name: backend.LossImportanceSampling}).Result(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := b.OptimStep(ctx, backend.DefaultAdamParams(1e-2)).Result(ctx)
	var nf *NonFiniteGradientError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "NaN or Inf") {
		t.Fatalf("err = %v, want a NonFiniteGradientError", err)
	}
	if step, _ := b.Step(ctx); step != 0 || !slices.Equal(before, b.params) {
		t.Fatalf("weights or step changed after a refused step (step %d)", step)
	}
	// The poisoned gradient is discarded: a clean step succeeds next.
	d.LossFnInputs.Advantages = make([]float64, len(d.Input))
	d.LossFnInputs.Advantages[len(d.Input)-1] = 1
	b.ForwardBackward(ctx, []backend.Datum{d}, backend.Loss{Name: backend.LossImportanceSampling})
	if _, err := b.OptimStep(ctx, backend.DefaultAdamParams(1e-2)).Result(ctx); err != nil {
		t.Fatalf("clean step after a refused one: %v", err)
	}
}

func TestSnapshotIsImmutable(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	s1 := publish(t, b)
	prompt := chatPrompt("5+5=")
	req := backend.SampleRequest{Prompt: prompt, NumSamples: 2, Params: backend.SamplingParams{Temperature: 1, MaxTokens: 6, Seed: seed(3)}}
	before, err := s1.Sample(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	d := datumFor(prompt, before.Sequences[0], 1)
	b.ForwardBackward(ctx, []backend.Datum{d}, backend.Loss{Name: backend.LossImportanceSampling})
	if _, err := b.OptimStep(ctx, backend.DefaultAdamParams(0.05)).Result(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := s1.Sample(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before.Sequences[0].Logprobs, after.Sequences[0].Logprobs) {
		t.Fatal("a published snapshot changed after an optimizer step")
	}
	s2 := publish(t, b)
	if s2.Version() != s1.Version()+1 || s2.Name() != "local-v2" {
		t.Fatalf("second snapshot is %s v%d", s2.Name(), s2.Version())
	}
	moved, _ := s2.Sample(ctx, req)
	if slices.Equal(before.Sequences[0].Logprobs, moved.Sequences[0].Logprobs) {
		t.Fatal("the new snapshot has the old weights")
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ckpt")
	b := newTestBackend(t, smallConfig())
	d := datumFor(chatPrompt("1+1="), backend.SampledSequence{Tokens: []int{'2', TokenImEnd}, Logprobs: []float64{-1, -1}}, 1)
	b.ForwardBackward(ctx, []backend.Datum{d}, backend.Loss{Name: backend.LossImportanceSampling})
	b.OptimStep(ctx, backend.DefaultAdamParams(1e-2))
	if _, err := b.SaveState(ctx, dir).Result(ctx); err != nil {
		t.Fatal(err)
	}
	o, err := Open(ctx, dir, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if !slices.Equal(o.params, b.params) || !slices.Equal(o.m, b.m) || !slices.Equal(o.v, b.v) {
		t.Fatal("weights or moments differ after a round trip")
	}
	if step, _ := o.Step(ctx); step != 1 {
		t.Fatalf("step %d after load, want 1", step)
	}
	// Continuing both gives the same next step.
	for _, x := range []*Backend{b, o} {
		x.ForwardBackward(ctx, []backend.Datum{d}, backend.Loss{Name: backend.LossImportanceSampling})
		x.OptimStep(ctx, backend.DefaultAdamParams(1e-2)).Result(ctx)
	}
	if !slices.Equal(o.params, b.params) {
		t.Fatal("resumed training diverged from uninterrupted training")
	}
	if _, err := o.LoadState(ctx, dir, false).Result(ctx); err != nil {
		t.Fatal(err)
	}
	if step, _ := o.Step(ctx); step != 0 || slices.ContainsFunc(o.m, func(x float32) bool { return x != 0 }) {
		t.Fatal("loading without optimizer kept the moments")
	}
}

func TestLoadBadCheckpoints(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := newTestBackend(t, smallConfig())
	if _, err := src.SaveState(ctx, dir).Result(ctx); err != nil {
		t.Fatal(err)
	}
	weights, _ := os.ReadFile(filepath.Join(dir, WeightsFile))
	other := smallConfig()
	other.DModel = 16
	cases := []struct {
		name   string
		target Config
		mangle func(t *testing.T, dir string)
		want   string
	}{
		{"truncated", smallConfig(), func(t *testing.T, d string) { write(t, d, WeightsFile, weights[:len(weights)-100]) }, "not a valid safetensors file"},
		{"short", smallConfig(), func(t *testing.T, d string) { write(t, d, WeightsFile, weights[:5]) }, "fewer than the 8-byte header"},
		{"corrupt header", smallConfig(), func(t *testing.T, d string) {
			c := slices.Clone(weights)
			copy(c[8:], "{garbage")
			write(t, d, WeightsFile, c)
		}, "JSON header does not parse"},
		{"huge header length", smallConfig(), func(t *testing.T, d string) {
			c := slices.Clone(weights)
			c[7] = 0x7f
			write(t, d, WeightsFile, c)
		}, "header length"},
		{"other shape", other, func(*testing.T, string) {}, "tensor tok_emb in"},
		{"missing manifest", smallConfig(), func(t *testing.T, d string) { os.Remove(filepath.Join(d, ManifestFile)) }, "manifest.json does not exist"},
		{"missing optimizer", smallConfig(), func(t *testing.T, d string) { os.Remove(filepath.Join(d, OptimizerFile)) }, "optimizer.safetensors does not exist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := t.TempDir()
			for _, f := range []string{ManifestFile, WeightsFile, OptimizerFile} {
				raw, _ := os.ReadFile(filepath.Join(dir, f))
				write(t, d, f, raw)
			}
			c.mangle(t, d)
			b := newTestBackend(t, c.target)
			before := slices.Clone(b.params)
			_, err := b.LoadState(ctx, d, true).Result(ctx)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
			var ec interface{ ExitCode() int }
			if !errors.As(err, &ec) || ec.ExitCode() != 2 {
				t.Errorf("error %v is not marked user-fixable", err)
			}
			if !slices.Equal(before, b.params) {
				t.Error("a failed load changed the weights")
			}
		})
	}
	// The shape error names the tensor and both shapes.
	b := newTestBackend(t, other)
	_, err := b.LoadState(ctx, dir, true).Result(ctx)
	var sm *ShapeMismatchError
	if !errors.As(err, &sm) || sm.Tensor != "tok_emb" || !slices.Equal(sm.Got, []int{261, 32}) || !slices.Equal(sm.Want, []int{261, 16}) {
		t.Fatalf("err = %v, want a ShapeMismatchError on tok_emb [261 32] vs [261 16]", err)
	}
}

func write(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTrainingBadInput(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	long := make([]int, 49)
	cases := []struct {
		name string
		d    backend.Datum
		loss backend.Loss
		want string
	}{
		{"too long", backend.Datum{Input: long, LossFnInputs: backend.LossFnInputs{TargetTokens: long}}, backend.Loss{Name: backend.LossCrossEntropy}, "more than the model's context of 48"},
		{"vocab", backend.Datum{Input: []int{300}, LossFnInputs: backend.LossFnInputs{TargetTokens: []int{1}}}, backend.Loss{Name: backend.LossCrossEntropy}, "outside the vocabulary"},
		{"unknown loss", backend.Datum{Input: []int{1}, LossFnInputs: backend.LossFnInputs{TargetTokens: []int{1}}}, backend.Loss{Name: "dpo"}, "unknown loss"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := b.ForwardBackward(ctx, []backend.Datum{c.d}, c.loss).Result(ctx)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
	if _, err := b.OptimStep(ctx, backend.AdamParams{LearningRate: -1}).Result(ctx); err == nil {
		t.Fatal("negative learning rate accepted")
	}
}

func TestClosedBackendFails(t *testing.T) {
	b, err := New(Options{Config: smallConfig()})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := b.PublishSampler(context.Background(), "").Result(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v after Close", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Layers: 0, DModel: 8, Heads: 2, Context: 8}, {Layers: 1, DModel: 10, Heads: 3, Context: 8}, {Layers: 1, DModel: 8, Heads: 2, Context: 1}} {
		if _, err := New(Options{Config: c}); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

func TestTokenizer(t *testing.T) {
	tok := Tokenizer{}
	text := "héllo <|im_end|> 3+4=7"
	plain := tok.Encode(text, false)
	if len(plain) != len(text) {
		t.Fatalf("plain encoding has %d ids for %d bytes", len(plain), len(text))
	}
	withSpecial := tok.Encode(text, true)
	if !slices.Contains(withSpecial, TokenImEnd) || len(withSpecial) != len(text)-len("<|im_end|>")+1 {
		t.Fatalf("special encoding %v", withSpecial)
	}
	for _, ids := range [][]int{plain, withSpecial} {
		if got, err := tok.Decode(ids, false); err != nil || got != text {
			t.Fatalf("decode = %q, %v", got, err)
		}
	}
	if got, _ := tok.Decode(withSpecial, true); got != "héllo  3+4=7" {
		t.Fatalf("skip special = %q", got)
	}
	if _, err := tok.Decode([]int{1, 999}, false); err == nil || !strings.Contains(err.Error(), "token 1 is 999") {
		t.Fatalf("decode of 999: %v", err)
	}
	got := tok.ChatTemplate([]episode.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "3+4="}}, true)
	want := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n3+4=<|im_end|>\n<|im_start|>assistant\n"
	if s, _ := tok.Decode(got, false); s != want || !slices.Equal(got, tok.Encode(want, true)) {
		t.Fatalf("chat template = %q, want %q", s, want)
	}
}

// ResetOptimizer keeps the weights and makes the next step a first step:
// the same update a fresh backend with those weights would make.
func TestResetOptimizer(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	d := datumFor(chatPrompt("1+1="), backend.SampledSequence{Tokens: []int{'2', TokenImEnd}, Logprobs: []float64{-1, -1}}, 1)
	is := backend.Loss{Name: backend.LossImportanceSampling}
	for i := 0; i < 3; i++ {
		b.ForwardBackward(ctx, []backend.Datum{d}, is)
		b.OptimStep(ctx, backend.DefaultAdamParams(1e-2))
	}
	if _, err := b.ResetOptimizer(ctx).Result(ctx); err != nil {
		t.Fatal(err)
	}
	if step, _ := b.Step(ctx); step != 0 || slices.ContainsFunc(b.v, func(x float32) bool { return x != 0 }) {
		t.Fatal("reset kept the step or the moments")
	}
	dir := filepath.Join(t.TempDir(), "w")
	if _, err := b.SaveState(ctx, dir).Result(ctx); err != nil {
		t.Fatal(err)
	}
	fresh, err := Open(ctx, dir, Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	for _, x := range []*Backend{b, fresh} {
		x.ForwardBackward(ctx, []backend.Datum{d}, is)
		if _, err := x.OptimStep(ctx, backend.DefaultAdamParams(1e-2)).Result(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(b.params, fresh.params) {
		t.Fatal("the step after a reset differs from a fresh optimizer's first step")
	}
}
