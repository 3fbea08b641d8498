package tinker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/faketinker"
	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/chatsampler"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

const testKey = "tml-secret-key-0123456789"

// syncBuffer is a log sink safe for the heartbeat goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type rig struct {
	srv *faketinker.Server
	b   *Backend
	log *syncBuffer
}

func newFake(t *testing.T, opts faketinker.Options) *faketinker.Server {
	t.Helper()
	if opts.APIKey == "" {
		opts.APIKey = testKey
	}
	if opts.PollWait == 0 {
		opts.PollWait = 200 * time.Millisecond
	}
	srv, err := faketinker.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func testOptions(url string, log *syncBuffer) Options {
	seed := int64(3)
	return Options{
		ClientOptions: ClientOptions{
			BaseURL: url, APIKey: testKey, Log: log, MaxRetries: 4,
			MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, RetryAfterCap: 20 * time.Millisecond,
		},
		BaseModel: faketinker.BaseModel,
		LoRA:      wire.LoRAConfig{Rank: 4, Seed: &seed, TrainMLP: true, TrainAttn: true, TrainUnembed: true},
		Heartbeat: time.Hour,
	}
}

func newRig(t *testing.T, fo faketinker.Options, edit func(*Options)) *rig {
	t.Helper()
	srv := newFake(t, fo)
	log := &syncBuffer{}
	opts := testOptions(srv.URL, log)
	if edit != nil {
		edit(&opts)
	}
	b, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		if strings.Contains(log.String(), testKey) {
			t.Errorf("the API key appears in the log:\n%s", log.String())
		}
	})
	return &rig{srv: srv, b: b, log: log}
}

// reply is a short chat reply in the embedded tokenizer's ids.
func datum(prompt, reply string, adv float64) backend.Datum {
	var tok local.Tokenizer
	seq := append(tok.Encode(prompt, true), tok.Encode(reply, true)...)
	seq = append(seq, local.TokenImEnd)
	n := len(seq) - 1
	d := backend.Datum{Input: seq[:n], LossFnInputs: backend.LossFnInputs{
		TargetTokens: seq[1:], Logprobs: make([]float64, n), Advantages: make([]float64, n),
	}}
	p := len(tok.Encode(prompt, true))
	for i := p - 1; i < n; i++ {
		d.LossFnInputs.Advantages[i] = adv
		d.LossFnInputs.Logprobs[i] = -5
	}
	return d
}

func sumLogprob(t *testing.T, b backend.TrainingBackend, d backend.Datum) float64 {
	t.Helper()
	out, err := b.Forward(context.Background(), []backend.Datum{d}, backend.Loss{Name: backend.LossCrossEntropy}).Result(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for _, lp := range out.LossFnOutputs[0].Logprobs {
		s += lp
	}
	return s
}

// step queues forward_backward and optim_step before waiting on either,
// as the cookbook does.
func step(ctx context.Context, b backend.TrainingBackend, data []backend.Datum) error {
	fb := b.ForwardBackward(ctx, data, backend.Loss{Name: backend.LossImportanceSampling})
	opt := b.OptimStep(ctx, backend.DefaultAdamParams(0.01))
	if _, err := fb.Result(ctx); err != nil {
		return err
	}
	_, err := opt.Result(ctx)
	return err
}

// checkOrder asserts the fake ran seq_ids 1..n of the model once each, in
// order, and applied exactly wantSteps optimizer steps.
func checkOrder(t *testing.T, r *rig, wantSteps int) {
	t.Helper()
	seen := 0
	steps := 0
	for _, e := range r.srv.Executions() {
		if e.ModelID != r.b.ModelID() {
			continue
		}
		seen++
		if e.SeqID != seen {
			t.Errorf("execution %d has seq_id %d; want %d (executions %+v)", seen, e.SeqID, seen, r.srv.Executions())
		}
		if e.Path == wire.PathOptimStep && !e.Failed {
			steps++
		}
	}
	if steps != wantSteps {
		t.Errorf("%d optimizer steps ran; want %d", steps, wantSteps)
	}
	got, err := r.srv.Model(r.b.ModelID()).Step(context.Background())
	if err != nil || got != wantSteps {
		t.Errorf("the model took %d optimizer steps (%v); want %d", got, err, wantSteps)
	}
}

func TestTrainingRaisesRewardedReplyInOrder(t *testing.T) {
	r := newRig(t, faketinker.Options{}, nil)
	info := r.b.Info()
	if info.Name != faketinker.BaseModel || info.MaxContext != 64 || info.Entropy || len(info.SupportedLosses) != 4 {
		t.Fatalf("info = %+v", info)
	}
	good := datum("1+1=", "2", 1)
	bad := datum("1+1=", "3", -1)
	before := sumLogprob(t, r.b, good)
	ctx := context.Background()
	for range 3 {
		if err := step(ctx, r.b, []backend.Datum{good, bad}); err != nil {
			t.Fatal(err)
		}
	}
	after := sumLogprob(t, r.b, good)
	if !(after > before) {
		t.Errorf("logprob of the rewarded reply went %g -> %g; training through the API should raise it", before, after)
	}
	checkOrder(t, r, 3)
	for _, e := range r.srv.Log() {
		if e.Path != "healthz" && e.APIKey != testKey {
			t.Errorf("%s sent without the API key", e.Path)
		}
	}
}

// The mask is folded into weights/advantages: losses and logprobs equal
// the embedded policy's own handling of the same masked datum.
func TestMaskFoldingMatchesLocal(t *testing.T) {
	r := newRig(t, faketinker.Options{}, nil)
	mdl := r.srv.Model(r.b.ModelID())
	d := datum("ab", "cde", 0.7)
	d.LossFnInputs.Mask = make([]float64, len(d.Input))
	d.LossFnInputs.Weights = make([]float64, len(d.Input))
	for i := range d.LossFnInputs.Mask {
		d.LossFnInputs.Mask[i] = float64(i % 3 % 2)
		d.LossFnInputs.Weights[i] = 0.5 + float64(i)
	}
	ctx := context.Background()
	for _, loss := range []backend.Loss{
		{Name: backend.LossCrossEntropy},
		{Name: backend.LossImportanceSampling},
		{Name: backend.LossPPO, Config: map[string]float64{backend.ClipLowThreshold: 0.9, backend.ClipHighThreshold: 1.1}},
		{Name: backend.LossCISPO},
	} {
		want, err := mdl.Forward(ctx, []backend.Datum{d}, loss).Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.b.Forward(ctx, []backend.Datum{d}, loss).Result(ctx)
		if err != nil {
			t.Fatalf("%s: %v", loss.Name, err)
		}
		w, g := want.LossFnOutputs[0], got.LossFnOutputs[0]
		for i := range w.ElementwiseLoss {
			if math.Abs(w.ElementwiseLoss[i]-g.ElementwiseLoss[i]) > 1e-4*(1+math.Abs(w.ElementwiseLoss[i])) || math.Abs(w.Logprobs[i]-g.Logprobs[i]) > 1e-5 {
				t.Fatalf("%s token %d: local loss %g lp %g, via Tinker loss %g lp %g", loss.Name, i, w.ElementwiseLoss[i], w.Logprobs[i], g.ElementwiseLoss[i], g.Logprobs[i])
			}
		}
	}
}

func TestFaultsStepCompletesOnce(t *testing.T) {
	cases := []struct {
		name  string
		fault faketinker.Fault
		dup   bool // the fake sees the same seq_id twice and de-duplicates
	}{
		{"pending futures", faketinker.Fault{Path: wire.PathOptimStep, Kind: faketinker.FaultPending, Polls: 3}, false},
		{"408 on retrieve", faketinker.Fault{Path: wire.PathRetrieveFuture, ForPath: wire.PathOptimStep, Kind: faketinker.FaultStatus, Status: 408, Times: 2}, false},
		{"410 resubmits", faketinker.Fault{Path: wire.PathRetrieveFuture, ForPath: wire.PathOptimStep, Kind: faketinker.FaultStatus, Status: 410}, true},
		{"429 with Retry-After", faketinker.Fault{Path: wire.PathOptimStep, Kind: faketinker.FaultStatus, Status: 429, RetryAfter: "0", Times: 2}, false},
		{"429 Retry-After beyond the cap", faketinker.Fault{Path: wire.PathForwardBackward, Kind: faketinker.FaultStatus, Status: 429, RetryAfter: "3600"}, false},
		{"500 on submit", faketinker.Fault{Path: wire.PathForwardBackward, Kind: faketinker.FaultStatus, Status: 500, Times: 2}, false},
		{"503 on retrieve", faketinker.Fault{Path: wire.PathRetrieveFuture, ForPath: wire.PathForwardBackward, Kind: faketinker.FaultStatus, Status: 503}, false},
		{"dropped before submit", faketinker.Fault{Path: wire.PathOptimStep, Kind: faketinker.FaultDropBefore}, false},
		{"dropped after submit was processed", faketinker.Fault{Path: wire.PathOptimStep, Kind: faketinker.FaultDropAfter}, true},
		{"dropped forward_backward after processing", faketinker.Fault{Path: wire.PathForwardBackward, Kind: faketinker.FaultDropAfter}, true},
		{"dropped retrieve", faketinker.Fault{Path: wire.PathRetrieveFuture, ForPath: wire.PathOptimStep, Kind: faketinker.FaultDropBefore, Times: 2}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, faketinker.Options{}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			data := []backend.Datum{datum("q", "a", 1)}
			if err := step(ctx, r.b, data); err != nil {
				t.Fatal(err)
			}
			r.srv.Inject(tc.fault)
			if err := step(ctx, r.b, data); err != nil {
				t.Fatalf("with the fault: %v", err)
			}
			if n := r.srv.PendingFaults(); n != 0 {
				t.Fatalf("the fault did not fire (%d left)", n)
			}
			if err := step(ctx, r.b, data); err != nil {
				t.Fatal(err)
			}
			checkOrder(t, r, 3)
			dups := 0
			for _, e := range r.srv.Log() {
				dups += map[bool]int{true: 1}[e.Dup]
			}
			if (dups > 0) != tc.dup {
				t.Errorf("%d de-duplicated requests; want some: %v", dups, tc.dup)
			}
		})
	}
}

func TestFailedResults(t *testing.T) {
	for _, cat := range []string{"user", "server"} {
		t.Run(cat, func(t *testing.T) {
			r := newRig(t, faketinker.Options{}, nil)
			ctx := context.Background()
			r.srv.Inject(faketinker.Fault{Path: wire.PathForwardBackward, Kind: faketinker.FaultFail, Category: cat, Message: "bad tokens " + testKey})
			_, err := r.b.ForwardBackward(ctx, []backend.Datum{datum("q", "a", 1)}, backend.Loss{Name: backend.LossImportanceSampling}).Result(ctx)
			var re *RequestError
			if strings.Contains(err.Error(), testKey) {
				t.Errorf("a server message echoing the key reached the error: %v", err)
			}
			if !errors.As(err, &re) || re.Category != cat || !strings.Contains(err.Error(), "bad tokens") {
				t.Fatalf("err = %v; want a %s RequestError", err, cat)
			}
			if code := exitCode(err); (code == 2) != (cat == "user") {
				t.Errorf("exit code %d for a %s error", code, cat)
			}
			n := 0
			for _, e := range r.srv.Log() {
				if e.Path == wire.PathForwardBackward {
					n++
				}
			}
			if n != 1 {
				t.Errorf("forward_backward sent %d times; a failed result is not retried", n)
			}
			// The seq_id was used: the next call runs.
			if err := step(ctx, r.b, []backend.Datum{datum("q", "a", 1)}); err != nil {
				t.Fatal(err)
			}
			checkOrder(t, r, 1)
		})
	}
}

func TestPersistentServerErrorStopsWithOneError(t *testing.T) {
	r := newRig(t, faketinker.Options{}, nil)
	ctx := context.Background()
	r.srv.Inject(faketinker.Fault{Path: wire.PathOptimStep, Kind: faketinker.FaultStatus, Status: 502, Times: 100})
	err := step(ctx, r.b, []backend.Datum{datum("q", "a", 1)})
	if err == nil || !strings.Contains(err.Error(), "giving up") {
		t.Fatalf("err = %v; want a bounded retry that gives up", err)
	}
	// Whether the server holds the seq_id is unknown: later calls refuse.
	_, err = r.b.OptimStep(ctx, backend.DefaultAdamParams(0.01)).Result(ctx)
	if err == nil || !strings.Contains(err.Error(), "restart from the last checkpoint") {
		t.Fatalf("a call after an undeliverable one: %v", err)
	}
	checkOrder(t, r, 0)
}

func TestBadInputRefusedBeforeSending(t *testing.T) {
	r := newRig(t, faketinker.Options{Losses: []string{"cross_entropy", "importance_sampling", "ppo"}}, nil)
	ok := datum("q", "a", 1)
	long := datum(strings.Repeat("x", 80), "a", 1)
	short := datum("q", "a", 1)
	short.LossFnInputs.Advantages = short.LossFnInputs.Advantages[1:]
	nan := datum("what", "abc", 1)
	nan.LossFnInputs.Advantages[2] = math.NaN()
	inf := datum("q", "a", 1)
	inf.LossFnInputs.Weights = make([]float64, len(inf.Input))
	inf.LossFnInputs.Weights[1] = math.Inf(1)
	negMask := datum("q", "a", 1)
	negMask.LossFnInputs.Mask = make([]float64, len(negMask.Input))
	negMask.LossFnInputs.Mask[0] = -1
	ent := datum("q", "a", 1)
	ent.LossFnInputs.EntropyWeights = []float64{0, 0.01}
	noLP := datum("q", "a", 1)
	noLP.LossFnInputs.Logprobs = nil
	is := backend.Loss{Name: backend.LossImportanceSampling}
	cases := []struct {
		name string
		data []backend.Datum
		loss backend.Loss
		want string
	}{
		{"longer than the context", []backend.Datum{ok, long}, is, "datum 1: input has"},
		{"mismatched lengths", []backend.Datum{short}, is, "datum 0: advantages has"},
		{"NaN advantage", []backend.Datum{ok, ok, nan}, is, "datum 2: advantages[2] is NaN"},
		{"Inf weight", []backend.Datum{inf}, is, "datum 0: weights[1] is +Inf"},
		{"negative mask", []backend.Datum{negMask}, is, "datum 0: mask[0]"},
		{"missing logprobs", []backend.Datum{noLP}, is, "datum 0: logprobs"},
		{"entropy weights", []backend.Datum{ent}, is, "actor.entropy_coeff=0"},
		{"no datums", nil, is, "no datums"},
		{"loss the server lacks", []backend.Datum{ok}, backend.Loss{Name: backend.LossCISPO}, "cispo is not a built-in"},
		{"config on a loss without one", []backend.Datum{ok}, backend.Loss{Name: backend.LossImportanceSampling, Config: map[string]float64{"clip_low_threshold": 1}}, "takes no config key"},
	}
	ctx := context.Background()
	for _, tc := range cases {
		_, err := r.b.ForwardBackward(ctx, tc.data, tc.loss).Result(ctx)
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != 2 {
			t.Errorf("%s: err = %v (exit %d); want a user error containing %q", tc.name, err, exitCode(err), tc.want)
		}
	}
	for _, e := range r.srv.Log() {
		if e.Path == wire.PathForwardBackward {
			t.Fatalf("a bad datum reached the server: %+v", e)
		}
	}
	if _, err := r.b.OptimStep(ctx, backend.AdamParams{LearningRate: -1, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}).Result(ctx); exitCode(err) != 2 {
		t.Errorf("negative learning rate: %v", err)
	}
	// The refusals took no seq_id.
	if err := step(ctx, r.b, []backend.Datum{ok}); err != nil {
		t.Fatal(err)
	}
	checkOrder(t, r, 1)
}

func TestOpenErrors(t *testing.T) {
	srv := newFake(t, faketinker.Options{ExtraModels: []string{"Qwen/Qwen3-8B"}})
	cases := []struct {
		name string
		edit func(*Options)
		want []string
	}{
		{"wrong key", func(o *Options) {
			o.APIKey = "tml-wrong-key-987654321"
			o.KeySource = "the environment variable TINKER_API_KEY named by backend.tinker.api_key_env"
		}, []string{"refused the API key", "backend.tinker.api_key_env"}},
		{"unknown base model", func(o *Options) { o.BaseModel = "meta-llama/Llama-3.1-8B" }, []string{"backend.tinker.base_model", "meta-llama/Llama-3.1-8B", "rllm/embedded-tiny, Qwen/Qwen3-8B"}},
		{"bad URL", func(o *Options) { o.BaseURL = "localhost:8000" }, []string{"backend.tinker.base_url"}},
		{"zero rank", func(o *Options) { o.LoRA.Rank = 0 }, []string{"lora_rank"}},
	}
	for _, tc := range cases {
		opts := testOptions(srv.URL, &syncBuffer{})
		tc.edit(&opts)
		b, err := New(context.Background(), opts)
		if err == nil {
			b.Close()
			t.Errorf("%s: opened", tc.name)
			continue
		}
		if exitCode(err) != 2 {
			t.Errorf("%s: exit code %d for %v", tc.name, exitCode(err), err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.name, err, w)
			}
		}
		if strings.Contains(err.Error(), "tml-wrong-key") || strings.Contains(err.Error(), testKey) {
			t.Errorf("%s: the error shows the key: %v", tc.name, err)
		}
	}
}

func TestCapabilitiesFallbacks(t *testing.T) {
	r := newRig(t, faketinker.Options{OmitContext: true}, nil)
	info := r.b.Info()
	if len(info.SupportedLosses) != len(DefaultLosses) || info.MaxContext != 0 {
		t.Errorf("info = %+v; want the default losses and an unknown context", info)
	}
	// No context known: a long datum goes to the server, which refuses it.
	_, err := r.b.ForwardBackward(context.Background(), []backend.Datum{datum(strings.Repeat("x", 80), "a", 1)}, backend.Loss{Name: backend.LossImportanceSampling}).Result(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exceed the context") {
		t.Errorf("err = %v", err)
	}
}

func TestSaveLoadAndSample(t *testing.T) {
	r := newRig(t, faketinker.Options{}, nil)
	ctx := context.Background()
	d := datum("hi", "yo", 1)
	if err := step(ctx, r.b, []backend.Datum{d}); err != nil {
		t.Fatal(err)
	}
	path, err := r.b.SaveState(ctx, "step_1").Result(ctx)
	if err != nil || path != "tinker://"+r.b.ModelID()+"/weights/step_1" {
		t.Fatalf("save: %q, %v", path, err)
	}
	saved := sumLogprob(t, r.b, d)
	if err := step(ctx, r.b, []backend.Datum{d}); err != nil {
		t.Fatal(err)
	}
	if sumLogprob(t, r.b, d) == saved {
		t.Fatal("training did not change the weights")
	}
	if _, err := r.b.SaveState(ctx, "step_1").Result(ctx); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("saving over a name: %v", err)
	}
	// The model has had requests: the load goes into a fresh model, as
	// its first request (both services refuse any other load).
	trained := r.b.ModelID()
	if _, err := r.b.LoadState(ctx, path, true).Result(ctx); err != nil {
		t.Fatal(err)
	}
	if r.b.ModelID() == trained {
		t.Errorf("the load went into the model that had been trained (%s)", trained)
	}
	if got := sumLogprob(t, r.b, d); got != saved {
		t.Errorf("after load_weights the logprob is %g; want the saved %g", got, saved)
	}
	for _, bad := range []string{"a b", "x.y", ""} {
		if _, err := r.b.SaveState(ctx, bad).Result(ctx); exitCode(err) != 2 {
			t.Errorf("SaveState(%q): %v", bad, err)
		}
	}
	// A local directory (the trainer's global_step_N/model) saves under a
	// fresh name, for sampling too, and records both paths there.
	dir := filepath.Join(t.TempDir(), "global_step_1", "model")
	wp, err := r.b.SaveState(ctx, dir).Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := ReadCheckpoint(dir)
	if err != nil || ck.WeightsPath != wp || !strings.Contains(ck.SamplerPath, "/sampler_weights/") {
		t.Errorf("checkpoint record %+v (%v), want weights %s and a sampler path", ck, err, wp)
	}
	if wp2, err := r.b.SaveState(ctx, dir).Result(ctx); err != nil || wp2 == wp {
		t.Errorf("a second save to a directory: %s, %v; want a new name", wp2, err)
	}
	if _, err := r.b.LoadState(ctx, "tinker://x/sampler_weights/y", true).Result(ctx); exitCode(err) != 2 {
		t.Errorf("loading sampler weights: %v", err)
	}

	snap, err := r.b.PublishSampler(ctx, "").Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Name() != "rllm-v1" || snap.Version() != 1 {
		t.Errorf("snapshot %s v%d", snap.Name(), snap.Version())
	}
	seed := int64(5)
	var tok local.Tokenizer
	prompt := tok.ChatTemplate(nil, true)
	res, err := snap.Sample(ctx, backend.SampleRequest{Prompt: prompt, NumSamples: 3, Params: backend.SamplingParams{MaxTokens: 8, Temperature: 1, Seed: &seed, StopTokenIDs: []int{local.TokenImEnd}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sequences) != 3 {
		t.Fatalf("%d sequences", len(res.Sequences))
	}
	for _, s := range res.Sequences {
		if len(s.Tokens) == 0 || len(s.Tokens) != len(s.Logprobs) || len(s.Tokens) > 8 {
			t.Fatalf("sequence %+v", s)
		}
		// The sampled logprobs are the trained model's (within float32).
		seq := append(append([]int(nil), prompt...), s.Tokens...)
		dd := backend.Datum{Input: seq[:len(seq)-1], LossFnInputs: backend.LossFnInputs{TargetTokens: seq[1:]}}
		out, err := r.b.Forward(ctx, []backend.Datum{dd}, backend.Loss{Name: backend.LossCrossEntropy}).Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lps := out.LossFnOutputs[0].Logprobs[len(prompt)-1:]
		for i := range s.Logprobs {
			if math.Abs(lps[i]-s.Logprobs[i]) > 1e-3 {
				t.Fatalf("token %d: sampled logprob %g, forward %g", i, s.Logprobs[i], lps[i])
			}
		}
	}
	if _, err := snap.Sample(ctx, backend.SampleRequest{Prompt: make([]int, 64)}); err == nil || exitCode(err) != 2 {
		t.Errorf("a prompt filling the context: %v", err)
	}
}

func TestHeartbeatAndClose(t *testing.T) {
	r := newRig(t, faketinker.Options{}, func(o *Options) { o.Heartbeat = 5 * time.Millisecond })
	deadline := time.After(30 * time.Second)
	for r.srv.Heartbeats(r.b.SessionID()) < 2 {
		select {
		case <-deadline:
			t.Fatal("no heartbeats")
		case <-time.After(5 * time.Millisecond):
		}
	}
	r.b.Close()
	if _, err := r.b.OptimStep(context.Background(), backend.DefaultAdamParams(1e-3)).Result(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestCancelledWaitLeavesCallRunning(t *testing.T) {
	r := newRig(t, faketinker.Options{}, nil)
	r.srv.Inject(faketinker.Fault{Path: wire.PathOptimStep, Kind: faketinker.FaultPending, Polls: 5})
	ctx, cancel := context.WithCancel(context.Background())
	f := r.b.OptimStep(ctx, backend.DefaultAdamParams(1e-3))
	cancel()
	if _, err := f.Result(context.Background()); !errors.Is(err, context.Canceled) {
		t.Logf("result after cancel: %v", err)
	}
	// Calls after it keep their order.
	if err := step(context.Background(), r.b, []backend.Datum{datum("q", "a", 1)}); err != nil {
		t.Fatal(err)
	}
}

func TestOpenFromConfigKeys(t *testing.T) {
	srv := newFake(t, faketinker.Options{})
	cfg := testConfig(srv.URL)
	log := &syncBuffer{}
	env := func(k string) string {
		if k == "MY_TINKER_KEY" {
			return testKey
		}
		return ""
	}
	cfg.Backend.Tinker.APIKeyEnv = "MY_TINKER_KEY"
	b, err := backend.Open(context.Background(), cfg, backend.OpenOptions{Getenv: env, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	cfg.Backend.Tinker.APIKeyEnv = "UNSET_VAR"
	_, err = backend.Open(context.Background(), cfg, backend.OpenOptions{Getenv: env})
	if err == nil || !strings.Contains(err.Error(), "UNSET_VAR") || exitCode(err) != 2 {
		t.Errorf("unset key: %v", err)
	}
	cfg.Backend.Tinker.APIKeyEnv = ""
	cfg.Backend.Tinker.APIKeyFile = "/keys/tinker"
	read := func(p string) ([]byte, error) {
		if p == "/keys/tinker" {
			return []byte(testKey + "\n"), nil
		}
		return nil, errors.New("no")
	}
	b, err = backend.Open(context.Background(), cfg, backend.OpenOptions{ReadFile: read, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if strings.Contains(log.String(), testKey) {
		t.Error("the key is in the log")
	}
	// No key, but TINKER_CREDENTIAL_CMD: hosted Tinker's JWT sign-in
	// takes the command's credential.
	jwtSrv := newFake(t, faketinker.Options{JWT: true})
	cfg = testConfig(jwtSrv.URL)
	cmdEnv := func(k string) string {
		if k == CredentialCmdEnv {
			return "printf '%s\\n' " + testKey
		}
		return ""
	}
	b, err = backend.Open(context.Background(), cfg, backend.OpenOptions{Getenv: cmdEnv, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if jwtSrv.JWTExchanges() != 1 || strings.Contains(log.String(), testKey) {
		t.Errorf("%d exchanges; log:\n%s", jwtSrv.JWTExchanges(), log.String())
	}
}

func testConfig(url string) *config.Config {
	cfg, err := config.FromOverrides([]string{"backend.name=tinker"})
	if err != nil {
		panic(err)
	}
	tk := &cfg.Backend.Tinker
	tk.BaseURL, tk.BaseModel, tk.LoRARank = url, faketinker.BaseModel, 4
	tk.HeartbeatS = 3600
	return cfg
}

func exitCode(err error) int { return usererr.ExitCode(context.Background(), err) }

// The embedded model's chat sampler works end to end through the API; a
// real tokenizer gives the Hugging Face chat sampler and codec.
func TestChatSamplerAndCodec(t *testing.T) {
	r := newRig(t, faketinker.Options{}, nil)
	ctx := context.Background()
	snap, err := r.b.PublishSampler(ctx, "chat").Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs := r.b.ChatSampler(snap)
	seed := int64(1)
	res, err := cs.Sample(ctx, sampler.Request{Messages: []episode.Message{{Role: "user", Content: "hi"}}, Params: sampler.Params{MaxTokens: 6, Temperature: 1, Seed: &seed}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.CompletionIDs) == 0 || len(res.CompletionIDs) != len(res.Logprobs) || res.Model != "chat" {
		t.Errorf("chat response %+v", res)
	}
	if got := r.b.Codec().StopTokens(); got[0] != local.TokenImEnd {
		t.Errorf("embedded codec stops %v", got)
	}

	dir := filepath.Join(repotest.Root(t), ".cache", "tokenizers", "qwen3")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Skip("qwen3 tokenizer missing: run scripts/fetch-tokenizers.sh")
	}
	q := newRig(t, faketinker.Options{}, func(o *Options) { o.TokenizerRef = dir })
	if _, ok := q.b.ChatSampler(snap).(*chatsampler.Sampler); !ok {
		t.Error("a real tokenizer should give the chat template sampler")
	}
	c := q.b.Codec()
	if c.StopTokens()[0] != 151645 {
		t.Errorf("qwen3 stops %v", c.StopTokens())
	}
	text, err := c.Decode(append(c.Encode("hi", false), 151645), true)
	if err != nil || text != "hi" {
		t.Errorf("decode skipping specials: %q, %v", text, err)
	}
	srv := newFake(t, faketinker.Options{})
	opts := testOptions(srv.URL, &syncBuffer{})
	opts.TokenizerRef = filepath.Join(t.TempDir(), "nope")
	if _, err := New(ctx, opts); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "rollout.tokenizer") {
		t.Errorf("a missing tokenizer: %v", err)
	}
}

func TestPublishNamesStayUnique(t *testing.T) {
	r := newRig(t, faketinker.Options{}, nil)
	ctx := context.Background()
	var names []string
	for _, n := range []string{"policy-step0", "policy-step0", "", "policy-step1"} {
		s, err := r.b.PublishSampler(ctx, n).Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, s.Name()+"@"+s.(*Sampler).Path())
	}
	want := []string{"policy-step0", "policy-step0-v2", "rllm-v3", "policy-step1"}
	for i, w := range want {
		if !strings.HasPrefix(names[i], w+"@tinker://") || !strings.HasSuffix(names[i], "/sampler_weights/"+w) {
			t.Errorf("publish %d: %s; want %s", i, names[i], w)
		}
	}
}

// A batch larger than the SDK's chunk (128 datums, 500k numbers) goes as
// several forward_backward requests in a row, with the outputs joined in
// order and the losses summed.
func TestForwardBackwardIsChunked(t *testing.T) {
	r := newRig(t, faketinker.Options{}, nil)
	ctx := context.Background()
	var data []backend.Datum
	for i := range 300 {
		data = append(data, datum(fmt.Sprintf("q%d", i), "a", 1))
	}
	out, err := r.b.ForwardBackward(ctx, data, backend.Loss{Name: backend.LossImportanceSampling}).Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.LossFnOutputs) != len(data) {
		t.Fatalf("%d outputs for %d datums", len(out.LossFnOutputs), len(data))
	}
	for i, o := range out.LossFnOutputs {
		if len(o.Logprobs) != len(data[i].Input) {
			t.Fatalf("output %d has %d logprobs for %d inputs: outputs out of order", i, len(o.Logprobs), len(data[i].Input))
		}
	}
	n := 0
	for _, e := range r.srv.Executions() {
		if e.Path == wire.PathForwardBackward {
			n++
		}
	}
	if n != 3 {
		t.Errorf("%d forward_backward requests; want 3 (128 + 128 + 44)", n)
	}
	if err := step(ctx, r.b, data[:1]); err != nil {
		t.Fatal(err)
	}
	checkOrder(t, r, 1)
}

// A server that accepts a request and never answers costs one
// request_timeout_s: the request is sent again (same seq_id) and the
// step completes once.
func TestHungRequestIsSentAgain(t *testing.T) {
	r := newRig(t, faketinker.Options{}, func(o *Options) { o.RequestTimeout = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := []backend.Datum{datum("q", "a", 1)}
	r.srv.Inject(faketinker.Fault{Path: wire.PathOptimStep, Kind: faketinker.FaultHang})
	if err := step(ctx, r.b, data); err != nil {
		t.Fatalf("step with a hung submit: %v", err)
	}
	r.srv.Inject(faketinker.Fault{Path: wire.PathRetrieveFuture, ForPath: wire.PathForwardBackward, Kind: faketinker.FaultHang, Times: 2})
	if err := step(ctx, r.b, data); err != nil {
		t.Fatalf("step with hung polls: %v", err)
	}
	checkOrder(t, r, 2)
}

// After an answer was lost, a refusal of the retry does not prove the
// server did not take the first attempt: its seq_id is never handed to
// another request, and later calls stop instead.
func TestSeqIDNotReusedAfterLostAnswer(t *testing.T) {
	r := newRig(t, faketinker.Options{}, nil)
	ctx := context.Background()
	r.srv.Inject(faketinker.Fault{Path: wire.PathOptimStep, Kind: faketinker.FaultDropAfter})
	r.srv.Inject(faketinker.Fault{Path: wire.PathOptimStep, Kind: faketinker.FaultStatus, Status: 400, Message: "malformed"})
	if err := step(ctx, r.b, []backend.Datum{datum("q", "a", 1)}); err == nil {
		t.Fatal("the refused retry did not fail the step")
	}
	_, err := r.b.ForwardBackward(ctx, []backend.Datum{datum("q", "a", 1)}, backend.Loss{Name: backend.LossImportanceSampling}).Result(ctx)
	if err == nil || !strings.Contains(err.Error(), "restart from the last checkpoint") {
		t.Fatalf("a call after a lost answer: %v", err)
	}
	for _, e := range r.srv.Log() {
		if e.Status == http.StatusConflict {
			t.Fatalf("a seq_id was reused for another request: %+v", e)
		}
	}
}

// A 400 from retrieve_future is asked again a few times, as the SDK does.
func TestBareBadRequestOnRetrieveIsRetried(t *testing.T) {
	r := newRig(t, faketinker.Options{}, nil)
	ctx := context.Background()
	r.srv.Inject(faketinker.Fault{Path: wire.PathRetrieveFuture, ForPath: wire.PathOptimStep, Kind: faketinker.FaultStatus, Status: 400, Message: " ", Times: 2})
	if err := step(ctx, r.b, []backend.Datum{datum("q", "a", 1)}); err != nil {
		t.Fatal(err)
	}
	checkOrder(t, r, 1)
}

// Each step's sampler snapshot carries ttl_seconds, so the service does
// not keep them all forever.
func TestSamplerSnapshotsExpire(t *testing.T) {
	r := newRig(t, faketinker.Options{}, func(o *Options) { o.SamplerTTL = time.Hour })
	ctx := context.Background()
	if _, err := r.b.PublishSampler(ctx, "").Result(ctx); err != nil {
		t.Fatal(err)
	}
	if ttls := r.srv.SamplerTTLs(); len(ttls) != 1 || ttls[0] != 3600 {
		t.Fatalf("ttl_seconds sent: %v", ttls)
	}
}

// Close returns even when the service never answers a call in flight: it
// waits one request_timeout_s, then stops the waits.
func TestCloseIsBounded(t *testing.T) {
	r := newRig(t, faketinker.Options{}, func(o *Options) { o.RequestTimeout = 200 * time.Millisecond })
	r.srv.Inject(faketinker.Fault{Path: wire.PathRetrieveFuture, ForPath: wire.PathOptimStep, Kind: faketinker.FaultHang, Times: 1 << 20})
	f := r.b.OptimStep(context.Background(), backend.DefaultAdamParams(0.01))
	closed := make(chan struct{})
	go func() { r.b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close is still waiting for a call the service never answers")
	}
	if _, err := f.Result(context.Background()); err == nil {
		t.Fatal("the unanswered call succeeded")
	}
}
