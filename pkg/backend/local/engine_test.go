package local

import (
	"context"
	"errors"
	"io"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

func testSnapshot(t testing.TB, seedV int64) *Snapshot {
	t.Helper()
	b, err := New(Options{Config: Config{Layers: 2, DModel: 16, Heads: 2, Context: 48, Seed: seedV}, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ts, err := b.PublishSampler(context.Background(), "").Result(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ts.(*Snapshot)
}

// longSnapshot has a context of 4096: a request with ignore_eos runs
// thousands of steps, so a test that pauses it after its first token
// finds it still running.
func longSnapshot(t testing.TB) *Snapshot {
	t.Helper()
	b, err := New(Options{Config: Config{Layers: 1, DModel: 8, Heads: 1, Context: 4096, Seed: 1}, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ts, err := b.PublishSampler(context.Background(), "").Result(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ts.(*Snapshot)
}

func newTestEngine(t testing.TB, snap *Snapshot, opts EngineOptions) *Engine {
	t.Helper()
	e := NewEngine(snap, "v0", opts)
	t.Cleanup(e.Close)
	return e
}

// collect reads a stream to its end and returns the sequences it made.
func collect(t testing.TB, st *GenStream) []backend.SampledSequence {
	t.Helper()
	seqs := make([]backend.SampledSequence, st.n)
	for {
		evs, err := st.Next(context.Background())
		if err == io.EOF {
			return seqs
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			s := &seqs[ev.Seq]
			if ev.HasToken {
				s.Tokens = append(s.Tokens, ev.Token)
				s.Logprobs = append(s.Logprobs, ev.Logprob)
			}
			if ev.Finish != "" {
				if s.StopReason != "" {
					t.Fatalf("sequence %d finished twice", ev.Seq)
				}
				s.StopReason, s.MatchedStop = ev.Finish, ev.MatchedStop
			}
		}
	}
}

// The engine decodes in batches, but each sequence gets exactly the tokens
// and logprobs the snapshot samples for it alone with the same seed.
func TestEngineMatchesSnapshotSample(t *testing.T) {
	snap := testSnapshot(t, 3)
	e := newTestEngine(t, snap, EngineOptions{MaxNumSeqs: 64, Workers: 2})
	ctx := context.Background()
	params := []backend.SamplingParams{
		{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 12, Seed: seed(7)},
		{Temperature: 0.7, TopP: 0.9, TopK: 20, MaxTokens: 9, Seed: seed(8)},
		{Temperature: 0, MaxTokens: 6, Seed: seed(9)},
		{Temperature: 1, MaxTokens: 20, Stop: []string{"a"}, StopTokenIDs: []int{'b'}, Seed: seed(10)},
	}
	type job struct {
		req  GenRequest
		want backend.SampleResult
	}
	var jobs []job
	for i, p := range params {
		prompt := chatPrompt([]string{"1+2=", "hello", "x", "99*9="}[i])
		want, err := snap.Sample(ctx, backend.SampleRequest{Prompt: prompt, NumSamples: 3, Params: p})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, job{GenRequest{Prompt: prompt, N: 3, Params: p, PromptLogprobs: -1}, want})
	}
	var reqs []GenRequest
	for _, j := range jobs {
		reqs = append(reqs, j.req)
	}
	streams, err := e.Submit(ctx, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range streams {
		got := collect(t, st)
		for k, w := range jobs[i].want.Sequences {
			g := got[k]
			if !slices.Equal(g.Tokens, w.Tokens) || !slices.Equal(g.Logprobs, w.Logprobs) || g.StopReason != w.StopReason || g.MatchedStop != w.MatchedStop {
				t.Errorf("request %d seq %d: engine %v %v %s %q, snapshot %v %v %s %q", i, k, g.Tokens, g.Logprobs, g.StopReason, g.MatchedStop, w.Tokens, w.Logprobs, w.StopReason, w.MatchedStop)
			}
		}
	}
	if st := e.Stats(); st.MaxBatch < 4 {
		t.Errorf("max batch %d: the 12 sequences did not share forwards", st.MaxBatch)
	}
}

// 64 concurrent requests share forward passes: far fewer forwards than
// generated tokens.
func TestEngineBatchesConcurrentRequests(t *testing.T) {
	snap := testSnapshot(t, 4)
	e := newTestEngine(t, snap, EngineOptions{MaxNumSeqs: 64, Workers: 2})
	e.Pause(false) // queue all 64 before the first step
	var wg sync.WaitGroup
	streams := make([]*GenStream, 64)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := e.Submit(context.Background(), GenRequest{Prompt: chatPrompt("2+2="), Params: backend.SamplingParams{Temperature: 1, MaxTokens: 16}, IgnoreEOS: true, PromptLogprobs: -1})
			if err != nil {
				t.Error(err)
				return
			}
			streams[i] = st[0]
		}()
	}
	wg.Wait()
	if got := e.Stats().Waiting; got != 64 {
		t.Fatalf("%d waiting, want 64", got)
	}
	e.Continue()
	total := 0
	for _, st := range streams {
		for _, s := range collect(t, st) {
			total += len(s.Tokens)
			if s.StopReason != backend.StopReasonLength {
				t.Errorf("stop reason %q with ignore_eos", s.StopReason)
			}
		}
	}
	st := e.Stats()
	if total != 64*16 || st.GenTokens != int64(total) {
		t.Fatalf("%d tokens generated, engine counted %d", total, st.GenTokens)
	}
	// 16 tokens each: 15 forwards after the prefill, all 64 in each.
	if st.Forwards != 15 || st.MaxBatch != 64 {
		t.Fatalf("%d forwards (max batch %d) for 64×16 tokens; want 15 batched forwards of 64", st.Forwards, st.MaxBatch)
	}
}

func TestEngineWeightSwap(t *testing.T) {
	old, new := testSnapshot(t, 5), testSnapshot(t, 6)
	e := newTestEngine(t, old, EngineOptions{MaxNumSeqs: 8, Workers: 2})
	ctx := context.Background()
	req := GenRequest{Prompt: chatPrompt("3+4="), Params: backend.SamplingParams{Temperature: 1, MaxTokens: 30, Seed: seed(1)}, PromptLogprobs: -1}
	wantOld, _ := old.Sample(ctx, backend.SampleRequest{Prompt: req.Prompt, NumSamples: 1, Params: req.Params})
	wantNew, _ := new.Sample(ctx, backend.SampleRequest{Prompt: req.Prompt, NumSamples: 1, Params: req.Params})
	if slices.Equal(wantOld.Sequences[0].Logprobs, wantNew.Sequences[0].Logprobs) {
		t.Fatal("the two snapshots sample alike; the test cannot tell them apart")
	}
	// A request already running when the weights change finishes on the
	// old weights, in the same steps as requests on the new ones (two
	// forwards per step); a request still waiting when they change takes
	// the new weights (SGLang runs requests queued during a pause on the
	// weights loaded before /continue_generation). The step hook holds
	// the first step until the swap is done, so that order is certain.
	entered, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	testHookStep = func([]*genSeq) { once.Do(func() { close(entered); <-gate }) }
	t.Cleanup(func() { testHookStep = nil })
	before, err := e.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	e.Pause(false)
	queued, err := e.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetWeights(new, "v1"); err != nil {
		t.Fatal(err)
	}
	after, err := e.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	close(gate)
	e.Continue()
	for _, st := range []*GenStream{before[0], queued[0], after[0]} {
		<-st.Started()
	}
	if before[0].Version != "v0" || queued[0].Version != "v1" || after[0].Version != "v1" {
		t.Fatalf("versions %q, %q, %q; want v0, v1, v1", before[0].Version, queued[0].Version, after[0].Version)
	}
	if got := collect(t, after[0])[0]; !slices.Equal(got.Logprobs, wantNew.Sequences[0].Logprobs) {
		t.Errorf("request after the swap did not use the new weights")
	}
	if got := collect(t, queued[0])[0]; !slices.Equal(got.Logprobs, wantNew.Sequences[0].Logprobs) {
		t.Errorf("request waiting during the swap did not use the new weights")
	}
	if got := collect(t, before[0])[0]; !slices.Equal(got.Logprobs, wantOld.Sequences[0].Logprobs) {
		t.Errorf("request running during the swap did not finish on the old weights")
	}
	if st := e.Stats(); st.Forwards <= st.Steps {
		t.Errorf("%d forwards in %d steps: the two weight versions were not run separately", st.Forwards, st.Steps)
	}
	// A snapshot of another shape is refused and nothing changes.
	b, _ := New(Options{Config: Config{Layers: 1, DModel: 16, Heads: 2, Context: 48}})
	defer b.Close()
	other, _ := b.PublishSampler(ctx, "").Result(ctx)
	if err := e.SetWeights(other.(*Snapshot), "bad"); err == nil {
		t.Fatal("a snapshot of another shape was accepted")
	}
	if _, v := e.Weights(); v != "v1" {
		t.Fatalf("version %q after a refused swap", v)
	}
}

func TestEngineQueueFullAndCancel(t *testing.T) {
	snap := longSnapshot(t)
	e := newTestEngine(t, snap, EngineOptions{MaxNumSeqs: 2, MaxWaiting: 3, Workers: 1})
	e.Pause(false)
	ctx, cancel := context.WithCancel(context.Background())
	req := GenRequest{Prompt: chatPrompt("1"), N: 2, Params: backend.SamplingParams{Temperature: 1}, IgnoreEOS: true, PromptLogprobs: -1}
	first, err := e.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(context.Background(), req); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("err %v, want ErrQueueFull (2 + 2 > 3 waiting)", err)
	}
	req.N = 3
	if _, err := e.Submit(context.Background(), req); err == nil {
		t.Fatal("n above --max-num-seqs accepted")
	}
	e.Continue()
	if _, err := first[0].Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Paused, the sequences cannot finish on their own: cancelling the
	// request's context ends them.
	e.Pause(false)
	cancel()
	seqs := collect(t, first[0])
	for _, s := range seqs {
		if s.StopReason != "abort" {
			t.Fatalf("cancelled sequence ended with %q", s.StopReason)
		}
	}
	e.Continue()
	for range 1000 {
		if e.Stats().Running == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if st := e.Stats(); st.Running != 0 {
		t.Fatalf("%d running after cancel", st.Running)
	}
}

func TestEnginePauseAbort(t *testing.T) {
	snap := longSnapshot(t)
	e := newTestEngine(t, snap, EngineOptions{MaxNumSeqs: 4, Workers: 1})
	req := GenRequest{Prompt: chatPrompt("1"), Params: backend.SamplingParams{Temperature: 1}, IgnoreEOS: true, PromptLogprobs: -1}
	running, _ := e.Submit(context.Background(), req)
	if _, err := running[0].Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.Pause(false)
	waiting, _ := e.Submit(context.Background(), req)
	if n := e.Pause(true); n != 2 {
		t.Fatalf("pause aborted %d requests, want 2", n)
	}
	for _, st := range []*GenStream{running[0], waiting[0]} {
		if s := collect(t, st)[0]; s.StopReason != "abort" {
			t.Fatalf("stop reason %q after pause with abort", s.StopReason)
		}
	}
	e.Continue()
	st, _ := e.Submit(context.Background(), GenRequest{Prompt: chatPrompt("1"), Params: backend.SamplingParams{MaxTokens: 3}, IgnoreEOS: true, PromptLogprobs: -1})
	if s := collect(t, st[0])[0]; len(s.Tokens) != 3 {
		t.Fatalf("%d tokens after continue", len(s.Tokens))
	}
}

func TestEngineSamplingControls(t *testing.T) {
	snap := testSnapshot(t, 9)
	e := newTestEngine(t, snap, EngineOptions{Workers: 2})
	ctx := context.Background()
	run := func(r GenRequest) backend.SampledSequence {
		t.Helper()
		if r.PromptLogprobs == 0 {
			r.PromptLogprobs = -1
		}
		st, err := e.Submit(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return collect(t, st[0])[0]
	}
	// A large bias makes greedy decoding pick the token every time, but
	// the reported logprobs stay the model's own.
	s := run(GenRequest{Prompt: chatPrompt("q"), Params: backend.SamplingParams{MaxTokens: 5}, LogitBias: map[int]float64{'z': 100}})
	if string(runesOf(s.Tokens)) != "zzzzz" {
		t.Fatalf("logit_bias: %v", s.Tokens)
	}
	if s.Logprobs[0] < -10 || s.Logprobs[0] > -0.5 {
		t.Fatalf("logprob %g of a biased token: the bias leaked into logprobs", s.Logprobs[0])
	}
	// min_tokens forbids the stop tokens before it; a huge bias on
	// <|im_end|> would otherwise stop at once.
	s = run(GenRequest{Prompt: chatPrompt("q"), Params: backend.SamplingParams{MaxTokens: 10}, LogitBias: map[int]float64{TokenImEnd: 100}, MinTokens: 4})
	if len(s.Tokens) != 5 || s.Tokens[4] != TokenImEnd || slices.Contains(s.Tokens[:4], TokenImEnd) {
		t.Fatalf("min_tokens: %v", s.Tokens)
	}
	// Top logprobs: k entries, descending, the greedy token first.
	st, _ := e.Submit(ctx, GenRequest{Prompt: chatPrompt("q"), Params: backend.SamplingParams{MaxTokens: 3}, TopLogprobs: 3, PromptLogprobs: 2})
	evs, _ := st[0].Next(ctx)
	for _, ev := range evs {
		if len(ev.Top) != 3 || ev.Top[0].Token != ev.Token || ev.Top[0].Logprob != ev.Logprob || ev.Top[0].Logprob < ev.Top[1].Logprob || ev.Top[1].Logprob < ev.Top[2].Logprob {
			t.Fatalf("top logprobs %v for greedy token %d (%g)", ev.Top, ev.Token, ev.Logprob)
		}
	}
	collect(t, st[0])
	pl := st[0].PromptLogprobs()
	prompt := chatPrompt("q")
	if len(pl) != len(prompt) || pl[0] != nil || len(pl[1]) != 3 || pl[1][0].Token != prompt[1] {
		t.Fatalf("prompt logprobs %v", pl)
	}
	// They match a training forward of the prompt.
	fw := forwardLogprobs(t, snap, prompt)
	for i := 1; i < len(prompt); i++ {
		if math.Abs(pl[i][0].Logprob-fw[i-1]) > 1e-9 {
			t.Fatalf("prompt logprob %d: %g, forward %g", i, pl[i][0].Logprob, fw[i-1])
		}
	}
}

func runesOf(ids []int) []byte {
	var b []byte
	for _, id := range ids {
		b = append(b, byte(id))
	}
	return b
}

// forwardLogprobs is what training computes for targets prompt[1:].
func forwardLogprobs(t testing.TB, snap *Snapshot, prompt []int) []float64 {
	ws := newWorkspace(snap.w.cfg)
	ws.forward(snap.w, prompt[:len(prompt)-1])
	lp := make([]float64, len(prompt)-1)
	ws.targetLogprobs(prompt[1:], lp)
	return lp
}
