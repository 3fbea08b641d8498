package rollout

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/openaiwire"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

func greedy() sampler.Params {
	return sampler.Params{Temperature: 0, TopP: 1, TopK: -1, MaxTokens: 32}
}

func chatReq(text string) sampler.Request {
	return sampler.Request{Messages: []episode.Message{{Role: "user", Content: text}}, Params: greedy()}
}

func newTestClient(t *testing.T, opts Options) *Client {
	t.Helper()
	if opts.Model == "" {
		opts.Model = "fake-model"
	}
	if opts.Retry.BaseBackoff == 0 {
		opts.Retry.BaseBackoff = time.Millisecond
		opts.Retry.MaxBackoff = 4 * time.Millisecond
	}
	c, err := NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestSampleSendsEveryField(t *testing.T) {
	s := fakevllm.New(fakevllm.Config{Record: true})
	defer s.Close()
	c := newTestClient(t, Options{Endpoints: []string{s.URL + "/v1/"}, ReturnTokensAsTokenIDs: true})
	seed := int64(7)
	req := chatReq("the cat")
	req.Params = sampler.Params{Temperature: 0, TopP: 0.9, TopK: 0, MaxTokens: 16, Stop: []string{"."}, StopTokenIDs: []int{9}, Seed: &seed}
	req.ChatTemplateKwargs = map[string]any{"enable_thinking": false}
	req.Tools = []sampler.Tool{{Type: "function", Function: sampler.ToolFunction{Name: "calc"}}}
	if _, err := c.Sample(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	ids := s.Vocab().Encode("the cat")
	req2 := sampler.Request{PromptIDs: ids, Params: req.Params}
	if _, err := c.Sample(context.Background(), req2); err != nil {
		t.Fatal(err)
	}
	recs := s.Requests()
	if len(recs) != 2 {
		t.Fatalf("%d requests recorded", len(recs))
	}
	common := map[string]any{"temperature": 0.0, "top_p": 0.9, "top_k": 0.0, "max_tokens": 16.0, "seed": 7.0,
		"n": 1.0, "return_token_ids": true, "return_tokens_as_token_ids": true, "model": "fake-model"}
	for _, r := range recs {
		for k, want := range common {
			if got, ok := r.Body[k]; !ok || got != want {
				t.Errorf("%s: %s = %v (present %v), want %v", r.Path, k, got, ok, want)
			}
		}
		if st, _ := r.Body["stop"].([]any); len(st) != 1 || st[0] != "." {
			t.Errorf("%s: stop %v", r.Path, r.Body["stop"])
		}
		if st, _ := r.Body["stop_token_ids"].([]any); len(st) != 1 || st[0] != 9.0 {
			t.Errorf("%s: stop_token_ids %v", r.Path, r.Body["stop_token_ids"])
		}
	}
	chat, comp := recs[0], recs[1]
	if chat.Path != "/v1/chat/completions" || chat.Body["logprobs"] != true || chat.Body["tools"] == nil ||
		chat.Body["chat_template_kwargs"].(map[string]any)["enable_thinking"] != false {
		t.Errorf("chat body %v", chat.Body)
	}
	if comp.Path != "/v1/completions" || comp.Body["logprobs"] != 0.0 || len(comp.Body["prompt"].([]any)) != len(ids) {
		t.Errorf("completions body %v", comp.Body)
	}
}

func TestSampleReadsReplies(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  fakevllm.Config
		opts Options
	}{
		{"vllm", fakevllm.Config{Reasoning: true}, Options{}},
		{"vllm legacy reasoning_content", fakevllm.Config{Reasoning: true, LegacyReasoningField: true}, Options{}},
		{"sglang", fakevllm.Config{Reasoning: true, Flavor: fakevllm.SGLang}, Options{}},
		{"token_id form", fakevllm.Config{Reasoning: true, ReturnTokensAsTokenIDs: true}, Options{VocabSize: fakevllm.DefaultVocab().Size()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fakevllm.New(tc.cfg)
			defer s.Close()
			tc.opts.Endpoints = []string{s.URL}
			c := newTestClient(t, tc.opts)
			r, err := c.Sample(context.Background(), chatReq("the dog"))
			if err != nil {
				t.Fatal(err)
			}
			v := s.Vocab()
			wantPrompt := v.Encode(fakevllm.RenderChat([]fakevllm.Message{{Role: "user", Content: ptr("the dog")}}, true))
			if !slicesEqual(r.PromptIDs, wantPrompt) {
				t.Errorf("prompt ids %v, want %v", r.PromptIDs, wantPrompt)
			}
			if len(r.CompletionIDs) == 0 || len(r.Logprobs) != len(r.CompletionIDs) {
				t.Fatalf("%d ids, %d logprobs", len(r.CompletionIDs), len(r.Logprobs))
			}
			if got := "<think>" + r.Reasoning + "</think>" + r.Text + "<|im_end|>"; got != v.Decode(r.CompletionIDs) {
				t.Errorf("reasoning %q + text %q do not match the tokens %q", r.Reasoning, r.Text, v.Decode(r.CompletionIDs))
			}
			if r.FinishReason != "stop" || r.Model != "fake-model" {
				t.Errorf("finish %q model %q", r.FinishReason, r.Model)
			}
			// the token-id prompt path continues exactly from those ids
			next := append(append([]int{}, r.PromptIDs...), r.CompletionIDs...)
			r2, err := c.Sample(context.Background(), sampler.Request{PromptIDs: next, Params: greedy()})
			if err != nil {
				t.Fatal(err)
			}
			if !slicesEqual(r2.PromptIDs, next) || len(r2.Logprobs) != len(r2.CompletionIDs) {
				t.Errorf("completions: prompt %d ids (want %d), %d logprobs for %d ids", len(r2.PromptIDs), len(next), len(r2.Logprobs), len(r2.CompletionIDs))
			}
		})
	}
}

func ptr(s string) *string { return &s }

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSampleStopsAndTools(t *testing.T) {
	s := fakevllm.New(fakevllm.Config{Flavor: fakevllm.SGLang, Reply: func(in fakevllm.ReplyInput) *fakevllm.Reply {
		if strings.Contains(fakevllm.RenderChat(in.Messages, false), "tool") {
			return &fakevllm.Reply{ToolCalls: []episode.ToolCall{{ID: "c1", Type: "function", Function: episode.FunctionCall{Name: "calc", Arguments: `{"x":2}`}}}}
		}
		return &fakevllm.Reply{Content: " the cat sat on the mat"}
	}})
	defer s.Close()
	c := newTestClient(t, Options{Endpoints: []string{s.URL}})
	req := chatReq("hi")
	req.Params.Stop = []string{" on"}
	r, err := c.Sample(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r.FinishReason != "stop" || r.StopReason != " on" || r.Text != " the cat sat" {
		t.Errorf("stop string: finish %q stop %q text %q", r.FinishReason, r.StopReason, r.Text)
	}
	req.Params.Stop = nil
	req.Params.StopTokenIDs = s.Vocab().Encode(" mat")
	if r, err = c.Sample(context.Background(), req); err != nil || r.StopReason != strconv.Itoa(req.Params.StopTokenIDs[0]) {
		t.Errorf("stop token: %v %q", err, r.StopReason)
	}
	toolReq := chatReq("use a tool")
	toolReq.Params.MaxTokens = 256
	r, err = c.Sample(context.Background(), toolReq)
	if err != nil {
		t.Fatal(err)
	}
	if r.FinishReason != "tool_calls" || len(r.ToolCalls) != 1 || r.ToolCalls[0].Function.Arguments != `{"x":2}` || r.Text != "" {
		t.Errorf("tool call reply %+v", r)
	}
}

func TestSampleRejectsBadParams(t *testing.T) {
	c := newTestClient(t, Options{Endpoints: []string{"http://127.0.0.1:1"}})
	for _, tc := range []struct {
		name string
		req  sampler.Request
		want string
	}{
		{"top_p 0", sampler.Request{Messages: []episode.Message{{Role: "user"}}, Params: sampler.Params{TopP: 0}}, "top_p"},
		{"neither", sampler.Request{Params: greedy()}, "exactly one"},
		{"both", sampler.Request{Messages: []episode.Message{{Role: "user"}}, PromptIDs: []int{1}, Params: greedy()}, "exactly one"},
		{"tools with ids", sampler.Request{PromptIDs: []int{1}, Tools: []sampler.Tool{{}}, Params: greedy()}, "tools"},
		{"negative temperature", sampler.Request{PromptIDs: []int{1}, Params: sampler.Params{Temperature: -1, TopP: 1}}, "temperature"},
		{"top_k", sampler.Request{PromptIDs: []int{1}, Params: sampler.Params{TopP: 1, TopK: -2}}, "top_k"},
	} {
		if _, err := c.Sample(context.Background(), tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
	if c.Stats().Attempts != 0 {
		t.Errorf("invalid requests were sent")
	}
}

func TestNewClientOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Model: "m"}, "rollout.endpoints is empty"},
		{Options{Endpoints: []string{"localhost:8000"}, Model: "m"}, "not an http(s) URL"},
		{Options{Endpoints: []string{"http://a:1", "http://a:1/v1"}, Model: "m"}, "twice"},
		{Options{Endpoints: []string{"http://a:1"}}, "rollout.model is empty"},
	} {
		_, err := NewClient(tc.opts)
		var oe *OptionError
		if !errors.As(err, &oe) || oe.ExitCode() != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want an OptionError mentioning %q", tc.opts, err, tc.want)
		}
	}
}

func TestRetryableFaults(t *testing.T) {
	for _, f := range fakevllm.RetryableFaults {
		t.Run(f.String(), func(t *testing.T) {
			s := fakevllm.New(fakevllm.Config{RetryAfter: 3})
			defer s.Close()
			c := newTestClient(t, Options{Endpoints: []string{s.URL}, RequestTimeout: 200 * time.Millisecond})
			var waits []time.Duration
			c.sleep = func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }
			s.InjectNext(f, f)
			if _, err := c.Sample(context.Background(), chatReq("hi")); err != nil {
				t.Fatalf("not recovered: %v", err)
			}
			st := c.Stats()
			if st.Retries != 2 || st.Attempts != 3 || st.Failures != 0 {
				t.Errorf("stats %+v, want 2 retries in 3 attempts", st)
			}
			if f == fakevllm.FaultRateLimit {
				// Retry-After: 3 is honoured up to the 4ms backoff cap.
				for _, w := range waits {
					if w != 4*time.Millisecond {
						t.Errorf("waited %v, want the 4ms cap for Retry-After: 3", w)
					}
				}
			}
		})
	}
}

func TestFatalFaults(t *testing.T) {
	for _, tc := range []struct {
		fault  fakevllm.Fault
		status int
		want   string
	}{
		{fakevllm.FaultBadRequest, 400, "injected bad request"},
		{fakevllm.FaultUnauthorized, 401, "injected unauthorized"},
		{fakevllm.FaultWrongModel, 404, "does not exist"},
		{fakevllm.FaultShortLogprobs, 0, "token ids but"},
		{fakevllm.FaultBadTokenID, 0, "outside the vocabulary"},
		{fakevllm.FaultMissingFields, 0, "no message"},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			s := fakevllm.New(fakevllm.Config{FlatErrors: tc.status == 404})
			defer s.Close()
			c := newTestClient(t, Options{Endpoints: []string{s.URL}, VocabSize: s.Vocab().Size()})
			s.InjectNext(tc.fault)
			_, err := c.Sample(context.Background(), chatReq("hi"))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), s.URL) {
				t.Fatalf("error %v, want one naming %s and saying %q", err, s.URL, tc.want)
			}
			var se *StatusError
			if tc.status != 0 && (!errors.As(err, &se) || se.Status != tc.status) {
				t.Errorf("error %v is not a %d StatusError", err, tc.status)
			}
			if st := c.Stats(); st.Attempts != 1 || st.Retries != 0 {
				t.Errorf("retried a fatal fault: %+v", st)
			}
		})
	}
}

func TestRetriesBounded(t *testing.T) {
	s := fakevllm.New(fakevllm.Config{FaultFor: func(string, int64) fakevllm.Fault { return fakevllm.FaultUnavailable }})
	defer s.Close()
	c := newTestClient(t, Options{Endpoints: []string{s.URL}, Retry: RetryPolicy{MaxAttempts: 4}})
	_, err := c.Sample(context.Background(), chatReq("hi"))
	var re *RetriesExhaustedError
	if !errors.As(err, &re) || re.Attempts != 4 || !strings.Contains(err.Error(), "503") {
		t.Fatalf("error %v, want exhaustion after 4 attempts naming the 503", err)
	}
	c2 := newTestClient(t, Options{Endpoints: []string{s.URL}, Retry: RetryPolicy{MaxAttempts: 1000, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Deadline: 100 * time.Millisecond}})
	_, err = c2.Sample(context.Background(), chatReq("hi"))
	if !errors.As(err, &re) || re.Attempts >= 1000 {
		t.Fatalf("deadline did not bound retries: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Sample(ctx, chatReq("hi")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v", err)
	}
}

func TestBackoffGrowsWithJitter(t *testing.T) {
	c := newTestClient(t, Options{Endpoints: []string{"http://x:1"}, Retry: RetryPolicy{BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}})
	for attempt, upper := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 8: time.Second} {
		for i := 0; i < 50; i++ {
			if d := c.backoff(attempt); d < upper/2 || d > upper {
				t.Fatalf("attempt %d: backoff %v outside [%v, %v]", attempt, d, upper/2, upper)
			}
		}
	}
}

func TestPickLeastOutstanding(t *testing.T) {
	c := newTestClient(t, Options{Endpoints: []string{"http://a:1", "http://b:1", "http://c:1"}})
	a, b, cc := c.endpoints[0], c.endpoints[1], c.endpoints[2]
	a.inflight.Store(5)
	b.inflight.Store(2)
	cc.inflight.Store(9)
	if got := c.pick(nil); got != b {
		t.Errorf("picked %s, want the least loaded b", got.url)
	}
	if got := c.pick(b); got != a {
		t.Errorf("avoiding b picked %s, want a", got.url)
	}
	b.ejected.Store(true)
	b.nextProbe.Store(time.Now().Add(time.Hour).UnixNano())
	if got := c.pick(nil); got != a {
		t.Errorf("with b ejected picked %s, want a", got.url)
	}
	a.ejected.Store(true)
	cc.ejected.Store(true)
	a.nextProbe.Store(time.Now().Add(time.Hour).UnixNano())
	cc.nextProbe.Store(time.Now().Add(time.Hour).UnixNano())
	if got := c.pick(nil); got == nil {
		t.Errorf("all ejected: picked nothing")
	}
	// ties spread round-robin
	for _, ep := range c.endpoints {
		ep.ejected.Store(false)
		ep.inflight.Store(0)
	}
	seen := map[*endpoint]int{}
	for i := 0; i < 30; i++ {
		seen[c.pick(nil)]++
	}
	if len(seen) != 3 {
		t.Errorf("idle endpoints not shared: %v", seen)
	}
}

func TestEjectAndProbeBack(t *testing.T) {
	bad := fakevllm.New(fakevllm.Config{FaultFor: func(string, int64) fakevllm.Fault { return fakevllm.FaultServerError }})
	defer bad.Close()
	good := fakevllm.New(fakevllm.Config{})
	defer good.Close()
	bad.SetHealthy(false)
	c := newTestClient(t, Options{Endpoints: []string{bad.URL, good.URL}, EjectAfter: 2, ProbeInterval: 5 * time.Millisecond})
	for i := 0; i < 20; i++ {
		if _, err := c.Sample(context.Background(), chatReq("hi")); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	if !st.Endpoints[0].Ejected || st.Endpoints[0].Ejections == 0 {
		t.Fatalf("failing endpoint not ejected: %+v", st.Endpoints[0])
	}
	if st.Endpoints[0].Requests > 3 {
		t.Errorf("ejected endpoint got %d requests", st.Endpoints[0].Requests)
	}
	bad.SetHealthy(true)
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Endpoints[0].Ejected && time.Now().Before(deadline) {
		c.pick(nil) // picking triggers due probes
		time.Sleep(5 * time.Millisecond)
	}
	if c.Stats().Endpoints[0].Ejected {
		t.Fatal("healthy endpoint never probed back in")
	}
}

func TestHealthLoopEjects(t *testing.T) {
	a := fakevllm.New(fakevllm.Config{})
	defer a.Close()
	b := fakevllm.New(fakevllm.Config{})
	defer b.Close()
	a.SetHealthy(false)
	// A check may take up to the interval: long enough that the healthy
	// server answers in time on a loaded machine.
	c := newTestClient(t, Options{Endpoints: []string{a.URL, b.URL}, HealthInterval: 300 * time.Millisecond, ProbeInterval: time.Hour})
	deadline := time.Now().Add(10 * time.Second)
	for !c.Stats().Endpoints[0].Ejected && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !c.Stats().Endpoints[0].Ejected || c.Stats().Endpoints[1].Ejected {
		t.Fatalf("health loop: %+v", c.Stats().Endpoints)
	}
}

func TestCheck(t *testing.T) {
	ok := fakevllm.New(fakevllm.Config{MaxModelLen: 2048})
	defer ok.Close()
	other := fakevllm.New(fakevllm.Config{Model: "other-model"})
	defer other.Close()
	loading := fakevllm.New(fakevllm.Config{})
	defer loading.Close()
	loading.SetHealthy(false)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()

	c := newTestClient(t, Options{Endpoints: []string{ok.URL}})
	if err := c.Check(context.Background()); err != nil || c.MaxModelLen() != 2048 {
		t.Fatalf("healthy endpoint: %v, max_model_len %d", err, c.MaxModelLen())
	}
	c = newTestClient(t, Options{Endpoints: []string{ok.URL, other.URL, loading.URL, downURL}})
	err := c.Check(context.Background())
	var ce *CheckError
	if !errors.As(err, &ce) || len(ce.Problems) != 3 {
		t.Fatalf("error %v, want three problems", err)
	}
	msg := err.Error()
	for _, want := range []string{other.URL + ` serves "other-model", not "fake-model"`, loading.URL + "/health answered 503", downURL + " is down"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, ok.URL+" ") {
		t.Errorf("healthy endpoint named in %q", msg)
	}
}

func TestConcurrentSamplesAcrossEndpoints(t *testing.T) {
	a := fakevllm.New(fakevllm.Config{Latency: time.Millisecond})
	defer a.Close()
	b := fakevllm.New(fakevllm.Config{Latency: time.Millisecond})
	defer b.Close()
	c := newTestClient(t, Options{Endpoints: []string{a.URL, b.URL}})
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Sample(context.Background(), chatReq("hi")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if a.Stats().Requests == 0 || b.Stats().Requests == 0 || a.Stats().Requests+b.Stats().Requests != 64 {
		t.Errorf("requests a=%d b=%d", a.Stats().Requests, b.Stats().Requests)
	}
}

// Chat and Complete send the caller's request as it is (the client's model
// when it names none) and decode the answer.
func TestRawChatAndComplete(t *testing.T) {
	s := fakevllm.New(fakevllm.Config{Record: true})
	defer s.Close()
	c := newTestClient(t, Options{Endpoints: []string{s.URL}})
	ctx := context.Background()
	chat, err := c.Chat(ctx, &openaiwire.ChatRequest{Messages: []episode.Message{{Role: "user", Content: "the cat"}},
		Sampling: openaiwire.Sampling{TopP: 1, TopK: -1, MaxTokens: 4, N: 1}, ReturnTokenIDs: true})
	if err != nil || len(chat.Choices) != 1 || chat.Choices[0].Message == nil || len(chat.Choices[0].TokenIDs) == 0 {
		t.Fatalf("Chat = %+v, %v", chat, err)
	}
	comp, err := c.Complete(ctx, &openaiwire.CompletionRequest{Model: "fake-model", Prompt: openaiwire.Prompt{IDs: s.Vocab().Encode("the cat")},
		Sampling: openaiwire.Sampling{TopP: 1, TopK: -1, MaxTokens: 4, N: 1}})
	if err != nil || len(comp.Choices) != 1 || comp.Choices[0].Text == nil {
		t.Fatalf("Complete = %+v, %v", comp, err)
	}
	recs := s.Requests()
	if len(recs) != 2 || recs[0].Path != "/v1/chat/completions" || recs[1].Path != "/v1/completions" || recs[0].Body["model"] != "fake-model" {
		t.Fatalf("requests = %+v", recs)
	}
}
