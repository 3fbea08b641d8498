package openai

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

var toolF = sampler.Tool{Type: "function", Function: sampler.ToolFunction{Name: "f"}}

const (
	toolsJSON = `[{"type":"function","function":{"name":"f"}}]`
	callReply = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"
)

// memorizedServer serves a small model trained until greedy decoding
// answers "go" (with the tool f offered) with callReply.
func memorizedServer(t *testing.T) *httptest.Server {
	t.Helper()
	ctx := context.Background()
	b, err := local.New(local.Options{Config: local.Config{Layers: 1, DModel: 32, Heads: 2, Context: 512, Seed: 3}, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tok := local.Tokenizer{}
	prompt := tok.RenderChat([]episode.Message{{Role: "user", Content: "go"}}, []sampler.Tool{toolF}, true)
	reply := append(tok.Encode(callReply, false), local.TokenImEnd)
	seq := append(slices.Clone(prompt), reply...)
	w := make([]float64, len(seq)-1)
	for i := len(prompt) - 1; i < len(w); i++ {
		w[i] = 1
	}
	d := backend.Datum{Input: seq[:len(seq)-1], LossFnInputs: backend.LossFnInputs{TargetTokens: seq[1:], Weights: w}}
	adam := backend.AdamParams{LearningRate: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	for step := 0; ; step++ {
		out, err := b.ForwardBackward(ctx, []backend.Datum{d}, backend.Loss{Name: backend.LossCrossEntropy}).Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if loss := out.Metrics["loss:sum"] / out.Metrics["tokens:sum"]; loss < 0.01 {
			break
		} else if step == 1000 {
			t.Fatalf("the model did not learn the reply: loss %g per token", loss)
		}
		if _, err := b.OptimStep(ctx, adam).Result(ctx); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := b.PublishSampler(ctx, "").Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eng := local.NewEngine(snap.(*local.Snapshot), "v1", local.EngineOptions{Workers: 2})
	srv := httptest.NewServer(New(eng, Options{ModelName: "policy"}))
	t.Cleanup(func() {
		srv.Close()
		eng.Close()
	})
	return srv
}

// rllm serve renders tools and tool calls with the embedded policy's
// template and answers a <tool_call> reply with tool_calls, whole and
// streamed, as vLLM's hermes parser does.
func TestChatToolCalls(t *testing.T) {
	srv := memorizedServer(t)
	req := `"messages":[{"role":"user","content":"go"}],"tools":` + toolsJSON + `,"temperature":0,"max_tokens":100,"return_token_ids":true`
	code, out := post(t, srv.URL+"/v1/chat/completions", "{"+req+"}")
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	want := local.Tokenizer{}.RenderChat([]episode.Message{{Role: "user", Content: "go"}}, []sampler.Tool{toolF}, true)
	if !equalInts(ints(out["prompt_token_ids"]), want) {
		t.Fatal("the prompt is not the template's rendering of the chat and its tools")
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	replyIDs := ints(ch["token_ids"])
	msg := ch["message"].(map[string]any)
	calls := msg["tool_calls"].([]any)
	if ch["finish_reason"] != "tool_calls" || msg["content"] != "" || len(calls) != 1 {
		t.Fatalf("choice %v", ch)
	}
	call := calls[0].(map[string]any)
	fn := call["function"].(map[string]any)
	if call["type"] != "function" || !strings.HasPrefix(call["id"].(string), "chatcmpl-tool-") || fn["name"] != "f" || fn["arguments"] != `{"x": 1}` {
		t.Fatalf("call %v", call)
	}

	// Streamed: no text of the call is sent as content; the last chunk
	// carries the call.
	chunks := sseChunks(t, srv.URL+"/v1/chat/completions", "{"+req+`,"stream":true}`)
	var content strings.Builder
	var streamed []any
	var finish any
	for _, c := range chunks {
		for _, x := range c["choices"].([]any) {
			d := x.(map[string]any)["delta"].(map[string]any)
			if s, ok := d["content"].(string); ok {
				content.WriteString(s)
			}
			if tc, ok := d["tool_calls"].([]any); ok {
				streamed = append(streamed, tc...)
			}
			if f := x.(map[string]any)["finish_reason"]; f != nil {
				finish = f
			}
		}
	}
	if content.String() != "" || finish != "tool_calls" || len(streamed) != 1 {
		t.Fatalf("stream: content %q, finish %v, calls %v", content.String(), finish, streamed)
	}
	sc := streamed[0].(map[string]any)
	if sc["index"] != 0.0 || sc["function"].(map[string]any)["arguments"] != `{"x": 1}` || sc["function"].(map[string]any)["name"] != "f" {
		t.Fatalf("streamed call %v", sc)
	}

	// tool_choice "none": the tools are in the prompt, the reply is text.
	_, out = post(t, srv.URL+"/v1/chat/completions", "{"+req+`,"tool_choice":"none"}`)
	ch = out["choices"].([]any)[0].(map[string]any)
	if ch["message"].(map[string]any)["content"] != callReply || len(ch["message"].(map[string]any)["tool_calls"].([]any)) != 0 || ch["finish_reason"] != "stop" {
		t.Fatalf("tool_choice none: %v", ch)
	}

	// The next turn: the call and its result render as the template
	// renders them, so the prompt extends the first prompt and the reply.
	callJSON, _ := json.Marshal(call)
	next := `{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[` + string(callJSON) + `]},` +
		`{"role":"tool","tool_call_id":"` + call["id"].(string) + `","content":"x is 1"}],"tools":` + toolsJSON + `,"max_tokens":1,"return_token_ids":true}`
	code, out = post(t, srv.URL+"/v1/chat/completions", next)
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	head := append(slices.Clone(want), replyIDs...)
	if got := ints(out["prompt_token_ids"]); len(got) < len(head) || !equalInts(got[:len(head)], head) {
		t.Fatal("the second turn's prompt does not extend the first prompt and the sampled reply")
	}
}

func TestChatToolsRefused(t *testing.T) {
	srv := newTestServer(t, Options{})
	for _, tc := range []struct{ body, param, msg string }{
		{`{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"code_interpreter"}]}`, "tools[0].type", `has type "code_interpreter"`},
		{`{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{}}]}`, "tools[0].function.name", "no function.name"},
		{`{"messages":[{"role":"user","content":"a"}],"tools":[3]}`, "tools[0]", "not a tool object"},
		{`{"messages":[{"role":"user","content":"a"}],"tools":` + toolsJSON + `,"tool_choice":"required"}`, "tool_choice", `"required" is not supported`},
		{`{"messages":[{"role":"user","content":"a"}],"tools":` + toolsJSON + `,"tool_choice":{"type":"function","function":{"name":"f"}}}`, "tool_choice", "not supported"},
		{`{"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"arguments":"{}"}}]}]}`, "messages[1].tool_calls[0].function.name", "names no function"},
		{`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}],"continue_final_message":true,"add_generation_prompt":false}`, "continue_final_message", "without tool_calls"},
	} {
		code, out := post(t, srv.URL+"/v1/chat/completions", tc.body)
		e, _ := out["error"].(map[string]any)
		if code != 400 || e["param"] != tc.param || !strings.Contains(e["message"].(string), tc.msg) {
			t.Errorf("%s: %d %v", tc.body, code, out)
		}
	}
}
