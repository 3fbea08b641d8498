package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/gateway/gatewaytest"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

type fixture struct {
	gw  *gateway.Gateway
	srv *httptest.Server
	smp *gatewaytest.Sampler
}

func newFixture(t *testing.T, opts gateway.Options) *fixture {
	t.Helper()
	smp := &gatewaytest.Sampler{}
	if opts.Sampler == nil {
		opts.Sampler = smp
	}
	if opts.Params.MaxTokens == 0 {
		opts.Params = sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 64}
	}
	gw := gateway.New(opts)
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	return &fixture{gw: gw, srv: srv, smp: smp}
}

func (f *fixture) open(t *testing.T, cfg gateway.SessionConfig) *gateway.Session {
	t.Helper()
	s, err := f.gw.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// post sends body to path with the token; it returns the status and body.
func (f *fixture) post(t *testing.T, path, token string, body any) (int, []byte) {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return f.send(t, path, h, body)
}

// send posts body as JSON to path with the headers.
func (f *fixture) send(t *testing.T, path string, h http.Header, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, bytes.NewReader(b))
	req.Header = h.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

var calcTool = sampler.Tool{Type: "function", Function: sampler.ToolFunction{Name: "calc", Description: "evaluates", Parameters: json.RawMessage(`{"type":"object","properties":{"expr":{"type":"string"}}}`)}}

// toolThenAnswer calls calc on the first turn and answers after a tool result.
func toolThenAnswer(req sampler.Request) gatewaytest.Reply {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == "tool" {
		return gatewaytest.Reply{Text: "The answer is " + last.Content, Reasoning: "adding"}
	}
	return gatewaytest.Reply{Reasoning: "use the tool", ToolCalls: []episode.ToolCall{{ID: "call_1", Type: "function", Function: episode.FunctionCall{Name: "calc", Arguments: `{"expr":"2+3"}`}}}}
}

func chatBody(stream bool, extra map[string]any) map[string]any {
	b := map[string]any{"model": "gpt-whatever", "temperature": 0.123, "max_tokens": 5,
		"messages": []any{map[string]any{"role": "system", "content": "be brief"}, map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "2+3?"}}}},
		"tools":    []any{calcTool}, "stream": stream}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// readSSE reassembles an OpenAI chat stream as a client does: content
// concatenated, tool-call fragments merged by index.
func readSSE(t *testing.T, body []byte) (content, reasoning string, calls []episode.ToolCall, finish string, extra []map[string]any) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content   *string `json:"content"`
					Reasoning string  `json:"reasoning"`
					ToolCalls []struct {
						Index    int    `json:"index"`
						ID       string `json:"id"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		var raw map[string]any
		_ = json.Unmarshal([]byte(data), &raw)
		extra = append(extra, raw)
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				content += *c.Delta.Content
			}
			reasoning += c.Delta.Reasoning
			for _, tc := range c.Delta.ToolCalls {
				for len(calls) <= tc.Index {
					calls = append(calls, episode.ToolCall{Type: "function"})
				}
				if tc.ID != "" {
					calls[tc.Index].ID = tc.ID
				}
				calls[tc.Index].Function.Name += tc.Function.Name
				calls[tc.Index].Function.Arguments += tc.Function.Arguments
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	if !done {
		t.Fatal("the stream did not end with data: [DONE]")
	}
	return
}

// comparable strips what differs between two recordings of one call.
func comparable(tr gateway.Trace) gateway.Trace {
	tr.TraceID, tr.Seq, tr.LatencyMS, tr.Timestamp = "", 0, 0, time.Time{}
	return tr
}

func TestChatStreamedTraceEqualsNonStreamed(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = toolThenAnswer
	var traces []gateway.Trace
	var bodies [2]map[string]any
	for i, stream := range []bool{false, true} {
		s := f.open(t, gateway.SessionConfig{})
		code, body := f.post(t, "/sessions/"+s.ID+"/v1/chat/completions", s.Token, chatBody(stream, nil))
		if code != 200 {
			t.Fatalf("stream=%v: %d %s", stream, code, body)
		}
		if stream {
			content, reasoning, calls, finish, _ := readSSE(t, body)
			got := map[string]any{"content": content, "reasoning": reasoning, "calls": calls, "finish": finish}
			bodies[i] = got
		} else {
			var r struct {
				Model   string
				Choices []struct {
					Message struct {
						Content   *string
						Reasoning string
						ToolCalls []episode.ToolCall `json:"tool_calls"`
					}
					FinishReason string `json:"finish_reason"`
					Logprobs     any
					TokenIDs     any `json:"token_ids"`
				}
				PromptTokenIDs any `json:"prompt_token_ids"`
			}
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatal(err)
			}
			ch := r.Choices[0]
			if r.Model != gateway.DefaultModel || ch.Logprobs != nil || ch.TokenIDs != nil || r.PromptTokenIDs != nil || ch.Message.Content != nil {
				t.Errorf("the reply carries what was not asked for, or the client's model: %s", body)
			}
			bodies[i] = map[string]any{"content": "", "reasoning": ch.Message.Reasoning, "calls": ch.Message.ToolCalls, "finish": ch.FinishReason}
		}
		tr := s.Traces()
		if len(tr) != 1 {
			t.Fatalf("%d traces", len(tr))
		}
		traces = append(traces, comparable(tr[0]))
	}
	if !reflect.DeepEqual(bodies[0], bodies[1]) {
		t.Errorf("the client saw\n%v\nnon-streamed and\n%v\nstreamed", bodies[0], bodies[1])
	}
	if bodies[0]["finish"] != "tool_calls" {
		t.Errorf("finish %v", bodies[0]["finish"])
	}
	traces[0].SessionID, traces[1].SessionID = "", ""
	if !reflect.DeepEqual(traces[0], traces[1]) {
		t.Errorf("streamed trace differs:\n%+v\n%+v", traces[0], traces[1])
	}
	tr := traces[0]
	if len(tr.PromptIDs) == 0 || len(tr.CompletionIDs) != len(tr.Logprobs) || tr.WeightVersion != "7" || len(tr.Messages) != 2 || tr.Messages[1].Content != "2+3?" {
		t.Errorf("trace %+v", tr)
	}
	// The session's params were sampled with, not the client's.
	if got := f.smp.Calls(); got != 2 {
		t.Errorf("%d sampler calls", got)
	}
}

func TestChatAsksForTokenIDsAndLogprobs(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	s := f.open(t, gateway.SessionConfig{})
	for _, stream := range []bool{false, true} {
		extra := map[string]any{"logprobs": true, "return_token_ids": true}
		if stream {
			extra["stream_options"] = map[string]any{"include_usage": true}
		}
		code, body := f.post(t, "/sessions/"+s.ID+"/v1/chat/completions", s.Token, chatBody(stream, extra))
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		if !bytes.Contains(body, []byte(`"prompt_token_ids"`)) || !bytes.Contains(body, []byte(`"token_ids"`)) || !bytes.Contains(body, []byte(`"token":"token_id:`)) {
			t.Errorf("stream=%v: ids or logprobs missing: %s", stream, body)
		}
		if stream && !bytes.Contains(body, []byte(`"usage"`)) {
			t.Errorf("include_usage ignored")
		}
	}
}

func TestSessionParamsArePinned(t *testing.T) {
	var got []sampler.Params
	var mu sync.Mutex
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = func(req sampler.Request) gatewaytest.Reply {
		mu.Lock()
		got = append(got, req.Params)
		mu.Unlock()
		return gatewaytest.Reply{Text: "x"}
	}
	code, body := f.post(t, "/sessions", f.gw.AdminToken(), map[string]any{"session_id": "run-1", "sampling_params": map[string]any{"temperature": 0.7, "max_tokens": 9}})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var created map[string]any
	_ = json.Unmarshal(body, &created)
	key, _ := created["api_key"].(string)
	if created["url"] != "/sessions/run-1/v1" || key == "" {
		t.Fatalf("created %s", body)
	}
	if code, body := f.post(t, "/sessions/run-1/v1/chat/completions", key, chatBody(false, nil)); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	want := sampler.Params{Temperature: 0.7, TopP: 1, TopK: -1, MaxTokens: 9}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("sampled with %+v, want the session's %+v", got, want)
	}
}

func TestCompletionsTakeTokenIDsOnly(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	s := f.open(t, gateway.SessionConfig{})
	code, body := f.post(t, "/sessions/"+s.ID+"/v1/completions", s.Token, map[string]any{"prompt": []int{1, 2, 3}, "logprobs": 1, "return_token_ids": true})
	if code != 200 || !bytes.Contains(body, []byte(`"token_logprobs"`)) || !bytes.Contains(body, []byte(`"prompt_token_ids":[1,2,3]`)) {
		t.Fatalf("%d %s", code, body)
	}
	code, body = f.post(t, "/sessions/"+s.ID+"/v1/completions", s.Token, map[string]any{"prompt": [][]int{{4, 5}}, "stream": true})
	if code != 200 || !bytes.HasSuffix(bytes.TrimSpace(body), []byte("data: [DONE]")) {
		t.Fatalf("%d %s", code, body)
	}
	code, body = f.post(t, "/sessions/"+s.ID+"/v1/completions", s.Token, map[string]any{"prompt": "hello"})
	if code != 400 || !bytes.Contains(body, []byte("does not tokenize")) {
		t.Fatalf("a text prompt: %d %s", code, body)
	}
	tr := s.Traces()
	if len(tr) != 2 || !reflect.DeepEqual(tr[1].PromptIDs, []int{4, 5}) {
		t.Fatalf("traces %+v", tr)
	}
}

func TestAnthropicMessages(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = toolThenAnswer
	s := f.open(t, gateway.SessionConfig{})
	req := func(stream bool, msgs []any) map[string]any {
		return map[string]any{"model": "claude-x", "max_tokens": 100, "system": "be brief", "stream": stream,
			"tools":    []any{map[string]any{"name": "calc", "description": "evaluates", "input_schema": map[string]any{"type": "object"}}},
			"messages": msgs}
	}
	first := []any{map[string]any{"role": "user", "content": "2+3?"}}
	code, body := f.post(t, "/sessions/"+s.ID+"/v1/messages", s.Token, req(false, first))
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var msg struct {
		Type       string
		StopReason string `json:"stop_reason"`
		Content    []map[string]any
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || msg.StopReason != "tool_use" || len(msg.Content) != 2 || msg.Content[1]["type"] != "tool_use" {
		t.Fatalf("reply %s", body)
	}
	use := msg.Content[1]
	second := append(first, map[string]any{"role": "assistant", "content": msg.Content},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": use["id"], "content": "5"}}})
	code, body = f.post(t, "/sessions/"+s.ID+"/v1/messages", s.Token, req(true, second))
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	// Every frame is event: + data: with the same type.
	events := 0
	text := ""
	sc := bufio.NewScanner(bytes.NewReader(body))
	var event string
	for sc.Scan() {
		line := sc.Text()
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			event = ev
			continue
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var d struct {
				Type  string
				Delta struct {
					Type, Text string
				}
			}
			if err := json.Unmarshal([]byte(data), &d); err != nil || d.Type != event {
				t.Fatalf("frame %q after event %q", data, event)
			}
			if d.Delta.Type == "text_delta" {
				text += d.Delta.Text
			}
			events++
		}
	}
	if text != "The answer is 5" || event != "message_stop" {
		t.Fatalf("streamed text %q, last event %q:\n%s", text, event, body)
	}
	tr := s.Traces()
	if len(tr) != 2 {
		t.Fatalf("%d traces", len(tr))
	}
	// The tool call of turn 1 reads back as the same assistant message, so
	// turn 2's prompt extends turn 1's prompt and reply.
	tj := gateway.Trajectories(tr, "ep", "program")
	if len(tj) != 1 || len(tj[0].Steps) != 2 {
		t.Fatalf("%d trajectories: %+v", len(tj), tr[1].Messages)
	}
}

func TestAuthAndSessionLifetime(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	a := f.open(t, gateway.SessionConfig{ID: "a"})
	b := f.open(t, gateway.SessionConfig{ID: "b"})
	path := "/sessions/a/v1/chat/completions"
	for name, tc := range map[string]struct {
		path, token string
		code        int
	}{
		"missing token":         {path, "", 401},
		"wrong token":           {path, "sk-nope", 401},
		"other session's token": {path, b.Token, 401},
		"own token":             {path, a.Token, 200},
		"unknown session":       {"/sessions/zzz/v1/chat/completions", a.Token, 404},
		"anthropic, no token":   {"/sessions/a/v1/messages", "", 401},
	} {
		t.Run(name, func(t *testing.T) {
			body := chatBody(false, nil)
			if strings.HasSuffix(tc.path, "/messages") {
				body = map[string]any{"max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
			}
			if code, out := f.post(t, tc.path, tc.token, body); code != tc.code {
				t.Errorf("got %d, want %d: %s", code, tc.code, out)
			}
		})
	}
	// x-api-key works like a bearer token (the Anthropic SDK's header).
	req, _ := http.NewRequest("POST", f.srv.URL+"/sessions/a/v1/messages", strings.NewReader(`{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Api-Key", a.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("x-api-key: %v %v", err, resp.Status)
	}
	resp.Body.Close()
	if len(b.Traces()) != 0 {
		t.Error("a refused call was traced on another session")
	}
	// DELETE ends the session: its id and token are dead.
	dreq, _ := http.NewRequest("DELETE", f.srv.URL+"/sessions/a", nil)
	dreq.Header.Set("Authorization", "Bearer "+f.gw.AdminToken())
	resp, err = http.DefaultClient.Do(dreq)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("delete: %v %v", err, resp.Status)
	}
	resp.Body.Close()
	if code, out := f.post(t, path, a.Token, chatBody(false, nil)); code != 404 {
		t.Errorf("a call after DELETE: %d %s", code, out)
	}
	// A new session under the old id has a new token; the old one is refused.
	a2 := f.open(t, gateway.SessionConfig{ID: "a"})
	if code, _ := f.post(t, path, a.Token, chatBody(false, nil)); code != 401 {
		t.Errorf("the deleted session's token on the reused id: %d", code)
	}
	if code, _ := f.post(t, path, a2.Token, chatBody(false, nil)); code != 200 {
		t.Errorf("the new token: %d", code)
	}
}

func TestAdminToken(t *testing.T) {
	f := newFixture(t, gateway.Options{AdminToken: "admin-secret"})
	if code, _ := f.post(t, "/sessions", "", map[string]any{}); code != 401 {
		t.Errorf("creating without the admin token: %d", code)
	}
	code, body := f.post(t, "/sessions", "admin-secret", map[string]any{})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var info map[string]any
	_ = json.Unmarshal(body, &info)
	id, key := info["session_id"].(string), info["api_key"].(string)
	get := func(token string) int {
		req, _ := http.NewRequest("GET", f.srv.URL+"/sessions/"+id+"/traces", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if get("nope") != 401 || get(key) != 200 || get("admin-secret") != 200 {
		t.Error("traces are readable by the admin and the session only")
	}
	for range 3 {
		f.post(t, "/sessions/"+id+"/v1/chat/completions", key, chatBody(false, nil))
	}
	for query, want := range map[string]int{"": 3, "?since=0": 2, "?since=0&limit=1": 1, "?limit=0": 0, "?since=2": 0} {
		req, _ := http.NewRequest("GET", f.srv.URL+"/sessions/"+id+"/traces"+query, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got []gateway.Trace
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if len(got) != want {
			t.Errorf("traces%s: %d, want %d", query, len(got), want)
		}
	}
}

func TestBodyBounds(t *testing.T) {
	f := newFixture(t, gateway.Options{MaxBodyBytes: 1 << 20})
	s := f.open(t, gateway.SessionConfig{})
	url := f.srv.URL + "/sessions/" + s.ID + "/v1/chat/completions"
	huge := int64(100 << 20)
	for name, body := range map[string]io.Reader{
		// A declared 100 MB body is refused before it is read ...
		"content-length": io.LimitReader(zeros{}, huge),
		// ... and a chunked one once the bound is crossed.
		"chunked": io.MultiReader(strings.NewReader(`{"messages":[{"role":"user","content":"`), io.LimitReader(zeros{}, huge)),
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", url, body)
			if name == "content-length" {
				req.ContentLength = huge
			} else {
				req.ContentLength = -1
			}
			req.Header.Set("Authorization", "Bearer "+s.Token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				// The server may close the connection while the client still writes.
				return
			}
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !bytes.Contains(out, []byte("too large")) {
				t.Errorf("%d %s", resp.StatusCode, out)
			}
		})
	}
	if len(s.Traces()) != 0 || f.smp.Calls() != 0 {
		t.Error("an oversized body reached the sampler")
	}
}

// TestSessionByteBudget: the budget bounds what the session's traces
// hold (here each call of 900 KiB keeps its text and its 900 Ki prompt
// token ids, about 8 MiB): the call that would take it past is refused.
func TestSessionByteBudget(t *testing.T) {
	f := newFixture(t, gateway.Options{MaxBodyBytes: 1 << 20, MaxSessionBytes: 20 << 20})
	s := f.open(t, gateway.SessionConfig{})
	other := f.open(t, gateway.SessionConfig{})
	big := func(c string) map[string]any {
		return map[string]any{"messages": []any{map[string]any{"role": "user", "content": strings.Repeat(c, 900<<10)}}}
	}
	var codes []int
	for _, c := range []string{"a", "b", "c", "d"} {
		code, _ := f.post(t, "/sessions/"+s.ID+"/v1/chat/completions", s.Token, big(c))
		codes = append(codes, code)
	}
	if !reflect.DeepEqual(codes, []int{200, 200, 200, 413}) {
		t.Fatalf("codes %v (stored %d bytes)", codes, s.StoredBytes())
	}
	if got, least := s.StoredBytes(), int64(3*9*900<<10); got < least {
		t.Errorf("the session's traces hold %d bytes by its count, less than the %d of their text and token ids", got, least)
	}
	if code, _ := f.post(t, "/sessions/"+other.ID+"/v1/chat/completions", other.Token, big("x")); code != 200 {
		t.Fatalf("another session was affected: %d", code)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

func TestMaxCalls(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	hit := 0
	s := f.open(t, gateway.SessionConfig{MaxCalls: 3, OnLimit: func() { hit++ }})
	codes := []int{}
	for range 5 {
		code, _ := f.post(t, "/sessions/"+s.ID+"/v1/chat/completions", s.Token, chatBody(false, nil))
		codes = append(codes, code)
	}
	if !reflect.DeepEqual(codes, []int{200, 200, 200, 429, 429}) || hit != 1 || len(s.Traces()) != 3 || s.Stats().OverLimit != 2 {
		t.Fatalf("codes %v, OnLimit ran %d times, %d traces, stats %+v", codes, hit, len(s.Traces()), s.Stats())
	}
}

func TestConcurrentCallsOnOneSession(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = func(req sampler.Request) gatewaytest.Reply {
		return gatewaytest.Reply{Text: "re: " + req.Messages[len(req.Messages)-1].Content}
	}
	s := f.open(t, gateway.SessionConfig{MaxCalls: 1000})
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": fmt.Sprint("q", i)}}, "stream": i%2 == 0}
			if code, out := f.post(t, "/sessions/"+s.ID+"/v1/chat/completions", s.Token, body); code != 200 {
				t.Errorf("%d %s", code, out)
			}
		})
	}
	wg.Wait()
	tr := s.Traces()
	seen := map[int64]bool{}
	for i, x := range tr {
		if seen[x.Seq] || (i > 0 && x.Seq < tr[i-1].Seq) {
			t.Fatalf("seq %d repeated or out of order", x.Seq)
		}
		seen[x.Seq] = true
		if x.Response.Content != "re: "+x.Messages[0].Content {
			t.Fatalf("trace %d mixes calls: %q for %q", i, x.Response.Content, x.Messages[0].Content)
		}
	}
	if len(tr) != n {
		t.Fatalf("%d traces, want %d", len(tr), n)
	}
	// Unrelated calls are separate trajectories of the same episode.
	if tj := gateway.Trajectories(tr, "ep", "p"); len(tj) != n {
		t.Fatalf("%d trajectories", len(tj))
	}
}

func TestSamplerFailure(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = func(sampler.Request) gatewaytest.Reply {
		return gatewaytest.Reply{Err: errors.New("upstream exploded")}
	}
	s := f.open(t, gateway.SessionConfig{})
	for _, stream := range []bool{false, true} {
		code, body := f.post(t, "/sessions/"+s.ID+"/v1/chat/completions", s.Token, chatBody(stream, nil))
		if code != http.StatusBadGateway || !bytes.Contains(body, []byte("upstream exploded")) {
			t.Errorf("stream=%v: %d %s", stream, code, body)
		}
	}
	if len(s.Traces()) != 0 || s.Stats().Failed != 2 {
		t.Errorf("failed calls: %d traces, stats %+v", len(s.Traces()), s.Stats())
	}
	f.smp.Reply = func(sampler.Request) gatewaytest.Reply {
		return gatewaytest.Reply{Err: fmt.Errorf("vllm: %w", sampler.ErrPromptTooLong)}
	}
	if code, _ := f.post(t, "/sessions/"+s.ID+"/v1/chat/completions", s.Token, chatBody(false, nil)); code != 400 || s.Stats().PromptTooLong != 1 {
		t.Errorf("prompt too long: %d %+v", code, s.Stats())
	}
}

// TestUpstreamFailsMidResponse puts the real OpenAI-compatible client in
// front of a fake vLLM that drops the connection or truncates its JSON:
// the call fails with 502, nothing is traced, the next call works.
func TestUpstreamFailsMidResponse(t *testing.T) {
	up := newFakeVLLM(t)
	client, err := rollout.NewClient(rollout.Options{Endpoints: []string{up.URL}, Model: up.Model(), Retry: rollout.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	f := newFixture(t, gateway.Options{Sampler: client})
	s := f.open(t, gateway.SessionConfig{})
	path := "/sessions/" + s.ID + "/v1/chat/completions"
	for _, fault := range faultsMidResponse {
		for _, stream := range []bool{false, true} {
			up.InjectNext(fault)
			code, body := f.post(t, path, s.Token, chatBody(stream, map[string]any{"tools": nil}))
			if code != http.StatusBadGateway {
				t.Errorf("%v stream=%v: %d %s", fault, stream, code, body)
			}
		}
	}
	up.InjectNext()
	code, body := f.post(t, path, s.Token, chatBody(true, map[string]any{"tools": nil}))
	if code != 200 {
		t.Fatalf("after the faults: %d %s", code, body)
	}
	tr := s.Traces()
	if len(tr) != 1 || len(tr[0].CompletionIDs) == 0 || len(tr[0].PromptIDs) == 0 || len(tr[0].Logprobs) != len(tr[0].CompletionIDs) {
		t.Fatalf("traces %+v", tr)
	}
}

func TestMetricsAndHealth(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	s := f.open(t, gateway.SessionConfig{})
	f.post(t, "/sessions/"+s.ID+"/v1/chat/completions", s.Token, chatBody(false, nil))
	for path, want := range map[string]string{"/health": `"ok"`, "/metrics": `rllm_gateway_calls_total{code="200",endpoint="chat.completions"} 1`} {
		resp, err := http.Get(f.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s:\n%s", path, want, b)
		}
	}
}

func TestTrajectoriesAreTokenExact(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = toolThenAnswer
	s := f.open(t, gateway.SessionConfig{})
	path := "/sessions/" + s.ID + "/v1/chat/completions"
	msgs := []any{map[string]any{"role": "user", "content": "2+3?"}}
	_, body := f.post(t, path, s.Token, map[string]any{"messages": msgs, "tools": []any{calcTool}})
	var r struct {
		Choices []struct{ Message map[string]any }
	}
	_ = json.Unmarshal(body, &r)
	msgs = append(msgs, r.Choices[0].Message, map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "5"})
	f.post(t, path, s.Token, map[string]any{"messages": msgs, "tools": []any{calcTool}})
	// A sub-agent call with another history.
	f.post(t, path, s.Token, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "summarise"}}})
	tj := gateway.Trajectories(s.Traces(), "t:0", "program")
	if len(tj) != 2 || len(tj[0].Steps) != 2 || len(tj[1].Steps) != 1 || tj[1].ID != "t:0/1" {
		t.Fatalf("trajectories %+v", tj)
	}
	ep := &episode.Episode{ID: "t:0", Trajectories: tj}
	seqs, st, err := rollout.Assemble([]*episode.Episode{ep}, rollout.AssembleOptions{FilterTokenMismatch: true})
	if err != nil || st.TokenMismatches != 0 || len(seqs) != 2 {
		t.Fatalf("assemble: %v %+v", err, st)
	}
	// Sampled tokens train, the tool result between the turns does not.
	tr := s.Traces()
	seq := seqs[0]
	want := len(tr[0].CompletionIDs) + len(tr[1].CompletionIDs)
	ones := 0
	for _, m := range seq.LossMask {
		ones += int(m)
	}
	if ones != want || len(seq.ResponseIDs) != len(tr[1].PromptIDs)+len(tr[1].CompletionIDs)-len(tr[0].PromptIDs) {
		t.Fatalf("mask has %d ones, want %d", ones, want)
	}
	if !reflect.DeepEqual(seq.ResponseIDs[len(seq.ResponseIDs)-len(tr[1].CompletionIDs):], tr[1].CompletionIDs) {
		t.Fatal("the last reply's ids changed")
	}
}

func TestRefusedRequests(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	s := f.open(t, gateway.SessionConfig{})
	for name, body := range map[string]any{
		"garbage":         "not json",
		"no messages":     map[string]any{"messages": []any{}},
		"image":           map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "image_url"}}}}},
		"n=2":             map[string]any{"n": 2, "messages": []any{map[string]any{"role": "user", "content": "x"}}},
		"required tool":   map[string]any{"tool_choice": "required", "messages": []any{map[string]any{"role": "user", "content": "x"}}},
		"json schema":     map[string]any{"response_format": map[string]any{"type": "json_schema"}, "messages": []any{map[string]any{"role": "user", "content": "x"}}},
		"bad role":        map[string]any{"messages": []any{map[string]any{"role": "robot", "content": "x"}}},
		"options, stream": map[string]any{"stream_options": map[string]any{}, "messages": []any{map[string]any{"role": "user", "content": "x"}}},
	} {
		code, out := f.post(t, "/sessions/"+s.ID+"/v1/chat/completions", s.Token, body)
		if code != 400 || !bytes.Contains(out, []byte(`"invalid_request_error"`)) {
			t.Errorf("%s: %d %s", name, code, out)
		}
	}
	if f.smp.Calls() != 0 || len(s.Traces()) != 0 {
		t.Error("a refused request was sampled")
	}
}

var faultsMidResponse = []fakevllm.Fault{fakevllm.FaultDrop, fakevllm.FaultMalformed, fakevllm.FaultServerError}

func newFakeVLLM(t *testing.T) *fakevllm.Server {
	up := fakevllm.New(fakevllm.Config{})
	t.Cleanup(up.Close)
	return up
}

func TestToolCallsGetIDs(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = func(sampler.Request) gatewaytest.Reply {
		return gatewaytest.Reply{ToolCalls: []episode.ToolCall{{Function: episode.FunctionCall{Name: "calc", Arguments: `{}`}}}}
	}
	s := f.open(t, gateway.SessionConfig{})
	code, body := f.post(t, "/sessions/"+s.ID+"/v1/chat/completions", s.Token, chatBody(false, nil))
	if code != 200 || !bytes.Contains(body, []byte(`"id":"call_`)) || !bytes.Contains(body, []byte(`"type":"function"`)) {
		t.Fatalf("%d %s", code, body)
	}
	if tr := s.Traces(); tr[0].Response.ToolCalls[0].ID == "" {
		t.Fatal("the trace keeps no id")
	}
}

// A gateway built without an admin token makes a random one: session
// management never answers a client that holds no token or only a
// session's token, and a session's token reads its own traces only.
func TestSessionManagementNeedsTheAdminToken(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	a := f.open(t, gateway.SessionConfig{ID: "a"})
	b := f.open(t, gateway.SessionConfig{ID: "b"})
	if code, out := f.post(t, "/sessions/b/v1/chat/completions", b.Token, chatBody(false, nil)); code != 200 {
		t.Fatalf("b's call: %d %s", code, out)
	}
	admin := f.gw.AdminToken()
	if len(admin) < 32 || admin == a.Token || admin == b.Token {
		t.Fatalf("admin token %q", admin)
	}
	do := func(method, path, token string) int {
		req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader("{}"))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 401 && !strings.Contains(string(body), "admin token") {
			t.Errorf("%s %s: the refusal does not say what it needs: %s", method, path, body)
		}
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, path string
		token        string
		want         int
	}{
		{"GET", "/sessions", "", 401},
		{"GET", "/sessions", a.Token, 401},
		{"GET", "/sessions", admin, 200},
		{"POST", "/sessions", "", 401},
		{"POST", "/sessions", a.Token, 401},
		{"GET", "/sessions/b", "", 401},
		{"GET", "/sessions/b", a.Token, 401},
		{"GET", "/sessions/a", a.Token, 401},
		{"GET", "/sessions/b", admin, 200},
		{"GET", "/sessions/b/traces", "", 401},
		{"GET", "/sessions/b/traces", a.Token, 401},
		{"GET", "/sessions/b/traces", "sk-guess", 401},
		{"GET", "/sessions/zzz/traces", a.Token, 401}, // no telling which sessions exist
		{"GET", "/sessions/zzz/traces", admin, 404},
		{"GET", "/sessions/a/traces", a.Token, 200},
		{"GET", "/sessions/b/traces", b.Token, 200},
		{"GET", "/sessions/b/traces", admin, 200},
		{"DELETE", "/sessions/b", "", 401},
		{"DELETE", "/sessions/b", a.Token, 401},
		{"DELETE", "/sessions/b", b.Token, 401},
		{"DELETE", "/sessions/zzz", a.Token, 401},
	} {
		if got := do(tc.method, tc.path, tc.token); got != tc.want {
			t.Errorf("%s %s with %s: %d, want %d", tc.method, tc.path, who(tc.token, a, b, admin), got, tc.want)
		}
	}
	if _, ok := f.gw.Session("b"); !ok || len(b.Traces()) != 1 {
		t.Fatal("session b was deleted or lost its trace")
	}
	if got := do("DELETE", "/sessions/b", admin); got != 200 {
		t.Errorf("the admin's DELETE: %d", got)
	}
	if _, ok := f.gw.Session("b"); ok {
		t.Error("the admin's DELETE left the session")
	}
}

func who(token string, a, b *gateway.Session, admin string) string {
	switch token {
	case "":
		return "no token"
	case a.Token:
		return "a's token"
	case b.Token:
		return "b's token"
	case admin:
		return "the admin token"
	}
	return "token " + token
}
