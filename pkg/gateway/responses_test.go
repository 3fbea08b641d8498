package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/gateway/gatewaytest"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

var calcFlat = map[string]any{"type": "function", "name": "calc", "description": "evaluates", "strict": true,
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"expr": map[string]any{"type": "string"}}}}

func responsesBody(stream bool, input any, extra map[string]any) map[string]any {
	b := map[string]any{"model": "gpt-5", "instructions": "be brief", "input": input, "tools": []any{calcFlat},
		"stream": stream, "temperature": 0.3, "max_output_tokens": 7}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// respEvent is one event of a Responses stream.
type respEvent struct {
	Name string
	Data map[string]any
}

// readResponseEvents parses a Responses event stream: every frame an
// event: line and data whose type is the event's name, numbered in order.
func readResponseEvents(t *testing.T, body []byte) []respEvent {
	t.Helper()
	var out []respEvent
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			name = ev
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var d map[string]any
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			t.Fatalf("event %s: %v", name, err)
		}
		if d["type"] != name || d["sequence_number"] != float64(len(out)) {
			t.Fatalf("frame %s after event %q (event %d)", data, name, len(out))
		}
		out = append(out, respEvent{name, d})
	}
	return out
}

// finalResponse is the response of a stream's response.completed, which
// must be its last event, with the output items the stream's
// output_item.done events carried.
func finalResponse(t *testing.T, body []byte) (resp map[string]any, done []any) {
	t.Helper()
	evs := readResponseEvents(t, body)
	if len(evs) < 3 || evs[0].Name != "response.created" || evs[len(evs)-1].Name != "response.completed" {
		t.Fatalf("events %v", evs)
	}
	for _, e := range evs {
		if e.Name == "response.output_item.done" {
			done = append(done, e.Data["item"])
		}
	}
	return evs[len(evs)-1].Data["response"].(map[string]any), done
}

func TestResponsesToolRoundTrip(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = toolThenAnswer
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			s := f.open(t, gateway.SessionConfig{})
			url := "/sessions/" + s.ID + "/v1/responses"
			call := func(input any, extra map[string]any) map[string]any {
				t.Helper()
				code, body := f.post(t, url, s.Token, responsesBody(stream, input, extra))
				if code != 200 {
					t.Fatalf("%d %s", code, body)
				}
				if !stream {
					var r map[string]any
					if err := json.Unmarshal(body, &r); err != nil {
						t.Fatal(err)
					}
					return r
				}
				r, done := finalResponse(t, body)
				if !reflect.DeepEqual(done, r["output"]) {
					t.Fatalf("output_item.done items %v differ from response.completed's %v", done, r["output"])
				}
				return r
			}
			r := call("2+3?", nil)
			out := r["output"].([]any)
			if r["object"] != "response" || r["status"] != "completed" || r["model"] != gateway.DefaultModel || len(out) != 2 {
				t.Fatalf("response %v", r)
			}
			reasoning, fc := out[0].(map[string]any), out[1].(map[string]any)
			if reasoning["type"] != "reasoning" || fc["type"] != "function_call" || fc["name"] != "calc" || fc["arguments"] != `{"expr":"2+3"}` || fc["call_id"] != "call_1" {
				t.Fatalf("output %v", out)
			}
			u := r["usage"].(map[string]any)
			tr := s.Traces()
			if len(tr) != 1 || u["input_tokens"] != float64(len(tr[0].PromptIDs)) || u["output_tokens"] != float64(len(tr[0].CompletionIDs)) {
				t.Fatalf("usage %v, traces %d", u, len(tr))
			}
			// The client replays the items it got (Codex: reasoning with
			// encrypted_content only) and the tool's output.
			rs := map[string]any{"type": "reasoning", "id": reasoning["id"], "summary": []any{}, "encrypted_content": reasoning["encrypted_content"]}
			input := []any{
				map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "2+3?"}}},
				rs, fc,
				map[string]any{"type": "function_call_output", "call_id": fc["call_id"], "output": "5"},
			}
			r = call(input, map[string]any{"store": false, "include": []any{"reasoning.encrypted_content"}})
			out = r["output"].([]any)
			msg := out[len(out)-1].(map[string]any)
			text := msg["content"].([]any)[0].(map[string]any)
			if msg["type"] != "message" || msg["role"] != "assistant" || text["type"] != "output_text" || text["text"] != "The answer is 5" {
				t.Fatalf("output %v", out)
			}
			tr = s.Traces()
			if len(tr) != 2 || tr[1].Endpoint != "responses" {
				t.Fatalf("traces %+v", tr)
			}
			want := []episode.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "2+3?"}, tr[0].Response,
				{Role: "tool", ToolCallID: "call_1", Content: "5"}}
			if !reflect.DeepEqual(tr[1].Messages, want) {
				t.Fatalf("turn 2 messages\n%+v\nwant\n%+v", tr[1].Messages, want)
			}
			// Turn 2's prompt extends turn 1's prompt and reply token for
			// token: one trajectory of two steps, the recorded ids exact.
			tj := gateway.Trajectories(tr, "ep", "program")
			if len(tj) != 1 || len(tj[0].Steps) != 2 {
				t.Fatalf("%d trajectories", len(tj))
			}
			for i, st := range tj[0].Steps {
				if !reflect.DeepEqual(st.PromptIDs, tr[i].PromptIDs) || !reflect.DeepEqual(st.ResponseIDs, tr[i].CompletionIDs) ||
					!reflect.DeepEqual(st.Logprobs, tr[i].Logprobs) || st.Info["endpoint"] != "responses" {
					t.Fatalf("step %d differs from its trace", i)
				}
			}
			if wantIDs := gatewaytest.Tokens(gatewaytest.Body("use the tool", "", tr[0].Response.ToolCalls) + "\n"); !reflect.DeepEqual(tr[0].CompletionIDs, wantIDs) {
				t.Fatalf("completion ids %v, want %v", tr[0].CompletionIDs, wantIDs)
			}
		})
	}
}

func TestResponsesStreamedTraceEqualsNonStreamed(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = toolThenAnswer
	var traces []gateway.Trace
	for _, stream := range []bool{false, true} {
		s := f.open(t, gateway.SessionConfig{})
		if code, body := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(stream, "2+3?", nil)); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		tr := comparable(s.Traces()[0])
		tr.SessionID = ""
		traces = append(traces, tr)
	}
	if !reflect.DeepEqual(traces[0], traces[1]) {
		t.Errorf("streamed trace differs:\n%+v\n%+v", traces[0], traces[1])
	}
}

func TestResponsesStreamEvents(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = func(sampler.Request) gatewaytest.Reply {
		return gatewaytest.Reply{Reasoning: "think", Text: "héllo wörld", ToolCalls: []episode.ToolCall{{ID: "c1", Function: episode.FunctionCall{Name: "calc", Arguments: `{"expr":"1+1"}`}}}}
	}
	s := f.open(t, gateway.SessionConfig{})
	code, body := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(true, "hi", map[string]any{"include": []any{"message.output_text.logprobs"}}))
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	evs := readResponseEvents(t, body)
	var names []string
	text, args := "", ""
	for _, e := range evs {
		if len(names) == 0 || names[len(names)-1] != e.Name {
			names = append(names, e.Name)
		}
		switch e.Name {
		case "response.output_text.delta":
			text += e.Data["delta"].(string)
		case "response.function_call_arguments.delta":
			args += e.Data["delta"].(string)
		}
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("events\n%v\nwant\n%v", names, want)
	}
	if text != "héllo wörld" || args != `{"expr":"1+1"}` {
		t.Fatalf("deltas %q %q", text, args)
	}
	resp := evs[len(evs)-1].Data["response"].(map[string]any)
	part := resp["output"].([]any)[1].(map[string]any)["content"].([]any)[0].(map[string]any)
	if lps := part["logprobs"].([]any); len(lps) != len(s.Traces()[0].CompletionIDs) {
		t.Fatalf("%d logprobs for %d tokens", len(lps), len(s.Traces()[0].CompletionIDs))
	}
}

// The grammar of Codex's apply_patch (abridged).
const patchGrammar = `start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?`

func TestResponsesCustomTool(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	patch := "*** Begin Patch\n*** Add File: a.txt\n+<hi> & bye\n*** End Patch\n"
	var offered []sampler.Tool
	f.smp.Reply = func(req sampler.Request) gatewaytest.Reply {
		offered = req.Tools
		if req.Messages[len(req.Messages)-1].Role == "tool" {
			return gatewaytest.Reply{Text: "done"}
		}
		// The model writes the arguments its own way (a space, no escaping).
		return gatewaytest.Reply{ToolCalls: []episode.ToolCall{{ID: "call_p", Function: episode.FunctionCall{Name: "apply_patch",
			Arguments: `{"input": ` + mustJSON(patch) + `}`}}}}
	}
	s := f.open(t, gateway.SessionConfig{})
	tools := []any{calcFlat, map[string]any{"type": "custom", "name": "apply_patch", "description": "Edit files.",
		"format": map[string]any{"type": "grammar", "syntax": "lark", "definition": patchGrammar}}}
	for _, stream := range []bool{false, true} {
		code, body := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(stream, "add a.txt", map[string]any{"tools": tools}))
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var r map[string]any
		if stream {
			var done []any
			r, done = finalResponse(t, body)
			evs := readResponseEvents(t, body)
			in := ""
			for _, e := range evs {
				if e.Name == "response.custom_tool_call_input.delta" {
					in += e.Data["delta"].(string)
				}
			}
			if in != patch || len(done) != 1 {
				t.Fatalf("streamed input %q, %d items", in, len(done))
			}
		} else if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		item := r["output"].([]any)[0].(map[string]any)
		if item["type"] != "custom_tool_call" || item["name"] != "apply_patch" || item["input"] != patch || item["call_id"] != "call_p" {
			t.Fatalf("item %v", item)
		}
	}
	if len(offered) != 2 || offered[1].Function.Name != "apply_patch" || !strings.Contains(offered[1].Function.Description, patchGrammar) ||
		!json.Valid(offered[1].Function.Parameters) || !strings.Contains(string(offered[1].Function.Parameters), `"input"`) {
		t.Fatalf("offered %+v", offered)
	}
	// Replayed, the call renders the arguments the model wrote, so the
	// next turn extends the first token for token.
	input := []any{map[string]any{"role": "user", "content": "add a.txt"},
		map[string]any{"type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch", "input": patch},
		map[string]any{"type": "custom_tool_call_output", "call_id": "call_p", "output": "Success."}}
	code, body := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(false, input, map[string]any{"tools": tools}))
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	tr := s.Traces()
	if len(tr) != 3 || !reflect.DeepEqual(tr[2].Messages[2], tr[0].Response) {
		t.Fatalf("replayed %+v, sampled %+v", tr[2].Messages[2], tr[0].Response)
	}
	if tj := gateway.Trajectories([]gateway.Trace{tr[0], tr[2]}, "ep", "p"); len(tj) != 1 {
		t.Fatalf("%d trajectories", len(tj))
	}
	// A call the session never returned still reads: its input as JSON.
	input[1].(map[string]any)["call_id"] = "call_other"
	input[2].(map[string]any)["call_id"] = "call_other"
	if code, body := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(false, input, map[string]any{"tools": tools})); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	tr = s.Traces()
	if got := tr[3].Messages[2].ToolCalls[0].Function.Arguments; got != `{"input":`+mustJSON(patch)+`}` || customIn(got) != patch {
		t.Fatalf("arguments %s", got)
	}
}

func mustJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSpace(b.String())
}

func customIn(args string) string {
	var o struct{ Input string }
	_ = json.Unmarshal([]byte(args), &o)
	return o.Input
}

func TestResponsesPreviousResponseID(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = toolThenAnswer
	s := f.open(t, gateway.SessionConfig{})
	other := f.open(t, gateway.SessionConfig{})
	code, body := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(false, "2+3?", nil))
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var r struct{ ID string }
	_ = json.Unmarshal(body, &r)
	next := responsesBody(false, []any{map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "5"}},
		map[string]any{"previous_response_id": r.ID})
	// Another session cannot continue it.
	if code, body := f.post(t, "/sessions/"+other.ID+"/v1/responses", other.Token, next); code != 400 || !bytes.Contains(body, []byte("previous_response_id")) {
		t.Fatalf("other session: %d %s", code, body)
	}
	code, body = f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, next)
	if code != 200 || !bytes.Contains(body, []byte(`"previous_response_id":"`+r.ID+`"`)) {
		t.Fatalf("%d %s", code, body)
	}
	tr := s.Traces()
	if tj := gateway.Trajectories(tr, "ep", "p"); len(tj) != 1 || len(tj[0].Steps) != 2 || len(tr[1].Messages) != 4 {
		t.Fatalf("%d trajectories, messages %+v", len(tj), tr[1].Messages)
	}
}

func TestResponsesPromptTooLong(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = func(sampler.Request) gatewaytest.Reply {
		return gatewaytest.Reply{Err: fmt.Errorf("vllm: %w", sampler.ErrPromptTooLong)}
	}
	s := f.open(t, gateway.SessionConfig{})
	code, body := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(false, "hi", nil))
	if code != 400 || !bytes.Contains(body, []byte(`"code":"context_length_exceeded"`)) {
		t.Fatalf("%d %s", code, body)
	}
	code, body = f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(true, "hi", nil))
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	evs := readResponseEvents(t, body)
	if len(evs) != 3 || evs[0].Name != "response.created" || evs[2].Name != "response.failed" {
		t.Fatalf("events %v", evs)
	}
	resp := evs[2].Data["response"].(map[string]any)
	if resp["status"] != "failed" || resp["error"].(map[string]any)["code"] != "context_length_exceeded" || resp["id"] != evs[0].Data["response"].(map[string]any)["id"] {
		t.Fatalf("failed %v", resp)
	}
	if st := s.Stats(); st.PromptTooLong != 2 || len(s.Traces()) != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Any other failure of a streamed call ends it the same way.
	f.smp.Reply = func(sampler.Request) gatewaytest.Reply {
		return gatewaytest.Reply{Err: errors.New("upstream exploded")}
	}
	code, body = f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(true, "hi", nil))
	evs = readResponseEvents(t, body)
	if code != 200 || evs[len(evs)-1].Name != "response.failed" || evs[len(evs)-1].Data["response"].(map[string]any)["error"].(map[string]any)["code"] != "server_error" {
		t.Fatalf("%d %s", code, body)
	}
	if code, body := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(false, "hi", nil)); code != http.StatusBadGateway || !bytes.Contains(body, []byte(`"code":"server_error"`)) {
		t.Fatalf("%d %s", code, body)
	}
}

// TestResponsesKeepAlive holds the sampler until the client has seen the
// stream's keep-alive events: a client with an idle timeout between
// events (Codex) keeps waiting for a slow sample instead of sending the
// prompt again.
func TestResponsesKeepAlive(t *testing.T) {
	f := newFixture(t, gateway.Options{StreamKeepAlive: time.Millisecond})
	release := make(chan struct{})
	f.smp.Reply = func(sampler.Request) gatewaytest.Reply {
		<-release
		return gatewaytest.Reply{Text: "slow"}
	}
	s := f.open(t, gateway.SessionConfig{})
	b, _ := json.Marshal(responsesBody(true, "hi", nil))
	// The deadline only bounds a broken gateway that never sends them.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/sessions/"+s.ID+"/v1/responses", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got bytes.Buffer
	rd := bufio.NewReader(io.TeeReader(resp.Body, &got))
	for waiting := 0; waiting < 3; {
		line, err := rd.ReadString('\n')
		if err != nil {
			close(release)
			t.Fatalf("the stream ended before the reply: %v\n%s", err, got.String())
		}
		if line == "event: response.in_progress\n" {
			waiting++
		}
	}
	close(release)
	if _, err := io.Copy(io.Discard, rd); err != nil {
		t.Fatal(err)
	}
	r, _ := finalResponse(t, got.Bytes())
	if r["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"] != "slow" || len(s.Traces()) != 1 {
		t.Fatalf("response %v", r)
	}
}

// TestResponsesCodexRequest sends a request as Codex does: everything it
// sets that changes nothing here is accepted.
func TestResponsesCodexRequest(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	var offered []string
	f.smp.Reply = func(req sampler.Request) gatewaytest.Reply {
		for _, tl := range req.Tools {
			offered = append(offered, tl.Function.Name)
		}
		return gatewaytest.Reply{ToolCalls: []episode.ToolCall{{ID: "c1", Function: episode.FunctionCall{Name: "spawn_agent", Arguments: `{}`}},
			{ID: "c2", Function: episode.FunctionCall{Name: "shell", Arguments: `{"command":["ls"]}`}}}}
	}
	s := f.open(t, gateway.SessionConfig{})
	body := map[string]any{"model": "gpt-5-codex", "instructions": "You are Codex.", "stream": true, "store": false,
		"tool_choice": "auto", "parallel_tool_calls": false, "prompt_cache_key": "0199-abc",
		"reasoning": map[string]any{"effort": "medium", "summary": "auto"}, "text": map[string]any{"verbosity": "low"},
		"include": []any{"reasoning.encrypted_content"}, "service_tier": nil, "client_metadata": map[string]any{"x": "y"},
		"tools": []any{map[string]any{"type": "function", "name": "shell", "description": "Runs a command", "strict": false,
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}, "required": []any{"command"}}},
			// Codex groups its sub-agent tools in a namespace.
			map[string]any{"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": []any{
				map[string]any{"type": "function", "name": "spawn_agent", "description": "Spawn one.", "strict": false, "parameters": map[string]any{"type": "object", "properties": map[string]any{}}}}}},
		"input": []any{
			map[string]any{"type": "message", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": "<permissions>"}}},
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "<environment_context>"}}},
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "create a.txt"}}},
		}}
	code, out := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, body)
	if code != 200 {
		t.Fatalf("%d %s", code, out)
	}
	resp, _ := finalResponse(t, out)
	if resp["id"] == "" || resp["usage"] == nil || resp["parallel_tool_calls"] != false {
		t.Fatalf("response %v", resp)
	}
	// The namespace's tools are offered with the others; a call to one
	// comes back with its namespace, the others without.
	calls := resp["output"].([]any)
	if !reflect.DeepEqual(offered, []string{"shell", "spawn_agent"}) || len(calls) != 2 ||
		calls[0].(map[string]any)["namespace"] != "multi_agent_v1" || calls[1].(map[string]any)["namespace"] != nil {
		t.Fatalf("offered %v, output %v", offered, calls)
	}
	msgs := s.Traces()[0].Messages
	if len(msgs) != 4 || msgs[0].Role != "system" || msgs[1].Role != "system" || msgs[1].Content != "<permissions>" {
		t.Fatalf("messages %+v", msgs)
	}
}

func TestResponsesRefused(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	s := f.open(t, gateway.SessionConfig{})
	user := []any{map[string]any{"role": "user", "content": "x"}}
	for _, tc := range []struct {
		name  string
		extra map[string]any
		field string
	}{
		{"background", map[string]any{"background": true}, "background"},
		{"unknown previous response", map[string]any{"previous_response_id": "resp_nope"}, "previous_response_id"},
		{"web_search", map[string]any{"tools": []any{map[string]any{"type": "web_search"}}}, `"web_search" tool`},
		{"file_search", map[string]any{"tools": []any{map[string]any{"type": "file_search", "vector_store_ids": []any{"v"}}}}, `"file_search" tool`},
		{"code_interpreter", map[string]any{"tools": []any{map[string]any{"type": "code_interpreter", "container": map[string]any{"type": "auto"}}}}, `"code_interpreter" tool`},
		{"local_shell", map[string]any{"tools": []any{map[string]any{"type": "local_shell"}}}, `"local_shell" tool`},
		{"tool_search", map[string]any{"tools": []any{map[string]any{"type": "tool_search", "execution": "client"}}}, "tools[0] is a tool_search tool"},
		{"conversation", map[string]any{"conversation": "conv_1"}, "conversation"},
		{"a name twice", map[string]any{"tools": []any{calcFlat, map[string]any{"type": "namespace", "name": "ns", "tools": []any{calcFlat}}}}, "tools[1].tools[0]"},
		{"nested namespace", map[string]any{"tools": []any{map[string]any{"type": "namespace", "name": "a", "tools": []any{map[string]any{"type": "namespace", "name": "b"}}}}}, "tools[0].tools[0]"},
		{"hosted tool in a namespace", map[string]any{"tools": []any{map[string]any{"type": "namespace", "name": "a", "tools": []any{map[string]any{"type": "web_search"}}}}}, "tools[0].tools[0]"},
		{"prompt template", map[string]any{"prompt": map[string]any{"id": "pmpt_1"}}, "prompt"},
		{"truncation auto", map[string]any{"truncation": "auto"}, "truncation"},
		{"top_logprobs", map[string]any{"top_logprobs": 5}, "top_logprobs"},
		{"max_tool_calls", map[string]any{"max_tool_calls": 3}, "max_tool_calls"},
		{"context_management", map[string]any{"context_management": []any{map[string]any{"type": "compaction"}}}, "context_management"},
		{"json schema", map[string]any{"text": map[string]any{"format": map[string]any{"type": "json_schema", "schema": map[string]any{}}}}, "text.format"},
		{"required tool", map[string]any{"tool_choice": "required"}, "tool_choice"},
		{"named tool", map[string]any{"tool_choice": map[string]any{"type": "function", "name": "calc"}}, "tool_choice"},
		{"unknown include", map[string]any{"include": []any{"everything"}}, "include[0]"},
		{"image", map[string]any{"input": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_image", "image_url": "data:"}}}}}, "input[0].content[0]"},
		{"item reference", map[string]any{"input": []any{map[string]any{"type": "item_reference", "id": "msg_1"}}}, "input[0]"},
		{"unknown item", map[string]any{"input": []any{map[string]any{"type": "computer_call_output", "call_id": "c"}}}, "input[0]"},
		{"bad role", map[string]any{"input": []any{map[string]any{"role": "robot", "content": "x"}}}, "input[0].role"},
		{"call without id", map[string]any{"input": []any{map[string]any{"type": "function_call", "name": "calc", "arguments": "{}"}}}, "input[0]"},
		{"instructions not a string", map[string]any{"instructions": []any{1}}, "instructions"},
		{"empty", map[string]any{"input": []any{}, "instructions": ""}, "input"},
		{"not json", nil, "Responses request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any = responsesBody(false, user, tc.extra)
			if tc.extra == nil {
				body = "not json"
			}
			code, out := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, body)
			var e struct {
				Error struct{ Message, Type string }
			}
			_ = json.Unmarshal(out, &e)
			if code != 400 || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, tc.field) {
				t.Errorf("%d %s (want a 400 naming %s)", code, out, tc.field)
			}
		})
	}
	if f.smp.Calls() != 0 || len(s.Traces()) != 0 {
		t.Error("a refused request was sampled")
	}
}

// TestResponsesMalformedToolCall: a model reply whose tool call is not
// well formed (arguments that are not JSON, a custom call without its
// input argument, a call to a tool never offered) still gives the
// harness a valid response: status completed, the call passed on as the
// model wrote it, streamed or not. The harness, not the gateway, decides
// what to do with a bad call.
func TestResponsesMalformedToolCall(t *testing.T) {
	tools := []any{calcFlat, map[string]any{"type": "custom", "name": "apply_patch", "description": "Edit files.",
		"format": map[string]any{"type": "grammar", "syntax": "lark", "definition": patchGrammar}}}
	for _, tc := range []struct {
		name, tool, args, wantType, wantField, want string
	}{
		{"function args not JSON", "calc", `{"expr": 2+`, "function_call", "arguments", `{"expr": 2+`},
		{"custom call without input", "apply_patch", `*** Begin Patch`, "custom_tool_call", "input", `*** Begin Patch`},
		{"tool never offered", "rm_rf", `{}`, "function_call", "name", "rm_rf"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprint(tc.name, " stream=", stream), func(t *testing.T) {
				f := newFixture(t, gateway.Options{})
				f.smp.Reply = func(sampler.Request) gatewaytest.Reply {
					return gatewaytest.Reply{ToolCalls: []episode.ToolCall{{ID: "call_x", Type: "function", Function: episode.FunctionCall{Name: tc.tool, Arguments: tc.args}}}}
				}
				s := f.open(t, gateway.SessionConfig{})
				code, body := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(stream, "go", map[string]any{"tools": tools}))
				if code != 200 {
					t.Fatalf("%d %s", code, body)
				}
				var r map[string]any
				if stream {
					r, _ = finalResponse(t, body)
				} else if err := json.Unmarshal(body, &r); err != nil {
					t.Fatal(err)
				}
				out, _ := r["output"].([]any)
				if r["status"] != "completed" || len(out) != 1 {
					t.Fatalf("response %v", r)
				}
				item := out[0].(map[string]any)
				if item["type"] != tc.wantType || item[tc.wantField] != tc.want || item["call_id"] != "call_x" {
					t.Fatalf("item %v, want a %s with %s %q", item, tc.wantType, tc.wantField, tc.want)
				}
			})
		}
	}
}

// TestResponsesChainStoredOnce: a chain of calls each naming the last as
// previous_response_id stores its conversation once. 1,500 calls of 75
// bytes of input each (112 KB in all) hold a few MiB, where a copy of
// the whole conversation per trace held hundreds (its messages and
// prompt token ids grow with the chain: quadratic in all). The count of
// stored bytes bounds the session (MaxSessionBytes), and matches the
// heap it takes; the traces are still each call's exact conversation,
// a branch (two calls continuing one response) included.
func TestResponsesChainStoredOnce(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	s := f.open(t, gateway.SessionConfig{MaxCalls: 2000})
	const calls = 1500
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	prev := ""
	ids := []string{}
	for i := range calls {
		extra := map[string]any{}
		if prev != "" {
			extra["previous_response_id"] = prev
		}
		input := fmt.Sprintf("step %04d: %s", i, strings.Repeat("z", 64))
		code, body := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(false, input, extra))
		if code != 200 {
			t.Fatalf("call %d: %d %s", i, code, body)
		}
		var r struct{ ID string }
		_ = json.Unmarshal(body, &r)
		prev = r.ID
		ids = append(ids, r.ID)
	}
	// A branch: a second continuation of call 700.
	code, body := f.post(t, "/sessions/"+s.ID+"/v1/responses", s.Token, responsesBody(false, "another way", map[string]any{"previous_response_id": ids[700]}))
	if code != 200 {
		t.Fatalf("branch: %d %s", code, body)
	}
	tr := s.Traces()
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	var naive int64 // a copy of every trace's messages and prompt ids
	for _, x := range tr {
		naive += int64(len(x.PromptIDs))*8 + int64(len(x.Messages))*int64(unsafe.Sizeof(episode.Message{}))
	}
	stored := s.StoredBytes()
	t.Logf("%d calls: %d bytes stored by the session's count, %d bytes of heap, %d bytes if each trace held its own copy", len(tr), stored, heap, naive)
	if stored > 16<<20 || naive < 50*stored {
		t.Errorf("the chain stores %d bytes (a copy per trace would be %d): not stored once", stored, naive)
	}
	if heap > 2*stored+(16<<20) {
		t.Errorf("the heap grew by %d bytes, more than the %d bytes the session counts", heap, stored)
	}
	for _, i := range []int{0, 1, 699, 700, 701, calls - 1, calls} {
		x := tr[i]
		if want := gatewaytest.Render(x.Messages, x.Tools); !slices.Equal(x.PromptIDs, want) {
			t.Fatalf("call %d: its prompt ids are not its messages' (%d ids, want %d)", i, len(x.PromptIDs), len(want))
		}
		wantMsgs := 2 + 2*i
		if i == calls {
			wantMsgs = 2 + 2*701
		}
		if len(x.Messages) != wantMsgs {
			t.Fatalf("call %d has %d messages, want %d", i, len(x.Messages), wantMsgs)
		}
	}
	if last := tr[calls].Messages; last[len(last)-1].Content != "another way" || tr[701].Messages[len(tr[701].Messages)-1].Content == "another way" {
		t.Fatal("the branch changed the chain's call it branched beside")
	}
}
