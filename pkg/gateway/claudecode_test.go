package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/gateway/gatewaytest"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// claudePost sends body as Claude Code does: the key in x-api-key
// (ANTHROPIC_API_KEY) or as a bearer token (ANTHROPIC_AUTH_TOKEN), with
// the anthropic-version and anthropic-beta headers and its session id.
func claudePost(t *testing.T, f *fixture, path string, key string, bearer bool, body any) (int, []byte) {
	t.Helper()
	h := http.Header{}
	h.Set("Anthropic-Version", "2023-06-01")
	h.Set("Anthropic-Beta", "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14")
	h.Set("X-Claude-Code-Session-Id", "0b6c-session")
	if bearer {
		h.Set("Authorization", "Bearer "+key)
	} else {
		h.Set("X-Api-Key", key)
	}
	return f.send(t, path+"?beta=true", h, body)
}

var bashTool = map[string]any{"name": "Bash", "description": "Run a shell command.",
	"input_schema": map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}, "required": []any{"command"}}}

// claudeRequest is a Messages request shaped as Claude Code sends it:
// system blocks with cache_control, a system turn among the messages,
// thinking enabled, metadata.
func claudeRequest(stream bool, msgs []any) map[string]any {
	return map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 32000, "stream": stream,
		"system": []any{map[string]any{"type": "text", "text": "You are Claude Code.", "cache_control": map[string]any{"type": "ephemeral"}}},
		"tools":  []any{bashTool}, "tool_choice": map[string]any{"type": "auto"},
		"thinking": map[string]any{"type": "enabled", "budget_tokens": 1024}, "metadata": map[string]any{"user_id": "u"},
		"messages": msgs}
}

func TestAnthropicCountTokens(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	s := f.open(t, gateway.SessionConfig{})
	msgs := []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "list the files", "cache_control": map[string]any{"type": "ephemeral"}}}}}
	for _, bearer := range []bool{false, true} {
		code, body := claudePost(t, f, "/sessions/"+s.ID+"/v1/messages/count_tokens", s.Token, bearer, claudeRequest(false, msgs))
		if code != 200 {
			t.Fatalf("bearer=%v: %d %s", bearer, code, body)
		}
		var got struct {
			InputTokens int `json:"input_tokens"`
		}
		_ = json.Unmarshal(body, &got)
		want := len(gatewaytest.Render([]episode.Message{{Role: "system", Content: "You are Claude Code."}, {Role: "user", Content: "list the files"}},
			[]sampler.Tool{{Type: "function", Function: sampler.ToolFunction{Name: "Bash"}}}))
		if got.InputTokens != want {
			t.Fatalf("input_tokens %d, want %d", got.InputTokens, want)
		}
	}
	// The count is the prompt the same messages call records.
	if code, body := claudePost(t, f, "/sessions/"+s.ID+"/v1/messages", s.Token, false, claudeRequest(false, msgs)); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	tr := s.Traces()
	if len(tr) != 1 || s.Calls() != 1 || s.Stats().CountTokens != 2 {
		t.Fatalf("%d traces, %d calls, stats %+v: count_tokens is no model call", len(tr), s.Calls(), s.Stats())
	}
	// A wrong key, either way, is refused.
	for _, bearer := range []bool{false, true} {
		if code, _ := claudePost(t, f, "/sessions/"+s.ID+"/v1/messages/count_tokens", "nope", bearer, claudeRequest(false, msgs)); code != 401 {
			t.Errorf("bearer=%v: wrong key got %d", bearer, code)
		}
	}
	// A sampler that cannot count says so.
	g := newFixture(t, gateway.Options{Sampler: noCount{}})
	s2 := g.open(t, gateway.SessionConfig{})
	if code, body := claudePost(t, g, "/sessions/"+s2.ID+"/v1/messages/count_tokens", s2.Token, false, claudeRequest(false, msgs)); code != http.StatusNotImplemented || !bytes.Contains(body, []byte(`"type":"error"`)) {
		t.Fatalf("%d %s", code, body)
	}
}

// noCount samples but cannot count.
type noCount struct{}

func (noCount) Sample(context.Context, sampler.Request) (sampler.Response, error) {
	return sampler.Response{}, nil
}

// TestAnthropicCountTokensVLLM counts through the rollout client, which
// asks the server's /tokenize: the count is the prompt the server then
// renders for the call.
func TestAnthropicCountTokensVLLM(t *testing.T) {
	up := newFakeVLLM(t)
	client, err := rollout.NewClient(rollout.Options{Endpoints: []string{up.URL}, Model: up.Model()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	f := newFixture(t, gateway.Options{Sampler: sampler.Seeded(client, 1)})
	s := f.open(t, gateway.SessionConfig{})
	req := map[string]any{"model": "m", "max_tokens": 8, "system": "be brief", "messages": []any{map[string]any{"role": "user", "content": "3+4="}}}
	code, body := claudePost(t, f, "/sessions/"+s.ID+"/v1/messages/count_tokens", s.Token, true, req)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var got struct {
		InputTokens int `json:"input_tokens"`
	}
	_ = json.Unmarshal(body, &got)
	if code, body := claudePost(t, f, "/sessions/"+s.ID+"/v1/messages", s.Token, true, req); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if tr := s.Traces(); got.InputTokens == 0 || got.InputTokens != len(tr[0].PromptIDs) {
		t.Fatalf("count %d, recorded prompt %d tokens", got.InputTokens, len(tr[0].PromptIDs))
	}
}

// claudeModel thinks and calls Bash, then answers with its output.
func claudeModel(req sampler.Request) gatewaytest.Reply {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == "tool" {
		return gatewaytest.Reply{Text: "Files: " + last.Content}
	}
	return gatewaytest.Reply{Reasoning: "I should list them.", ToolCalls: []episode.ToolCall{{ID: "toolu_1", Function: episode.FunctionCall{Name: "Bash", Arguments: `{"command":"ls"}`}}}}
}

// TestAnthropicClaudeCodeReplay plays a Claude Code tool turn: the model
// thinks and calls Bash; Claude Code replays the thinking (with its
// signature) and the tool_use, then the tool_result, with a system turn
// among the messages. The second call's prompt extends the first's
// prompt and reply token for token.
func TestAnthropicClaudeCodeReplay(t *testing.T) {
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = claudeModel
	// The key each way; the second turn streamed or not.
	for _, stream := range []bool{false, true} {
		s := f.open(t, gateway.SessionConfig{})
		url := "/sessions/" + s.ID + "/v1/messages"
		first := []any{
			map[string]any{"role": "system", "content": "Current directory: /work"},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "list the files"}}},
		}
		code, body := claudePost(t, f, url, s.Token, stream, claudeRequest(false, first))
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var msg struct{ Content []map[string]any }
		_ = json.Unmarshal(body, &msg)
		if len(msg.Content) != 2 || msg.Content[0]["type"] != "thinking" || msg.Content[1]["type"] != "tool_use" {
			t.Fatalf("reply %s", body)
		}
		msg.Content[0]["signature"] = "sig-from-the-reply"
		second := append(first, map[string]any{"role": "assistant", "content": msg.Content},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": []any{map[string]any{"type": "text", "text": "a.txt b.txt"}}},
			}})
		code, body = claudePost(t, f, url, s.Token, !stream, claudeRequest(stream, second))
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		tr := s.Traces()
		if len(tr) != 2 || tr[1].Response.Content != "Files: a.txt b.txt" || tr[1].Messages[0].Role != "system" || tr[1].Messages[1].Role != "system" || !reflect.DeepEqual(tr[1].Messages[3], tr[0].Response) {
			t.Fatalf("turn 2 messages %+v\nreply %+v", tr[1].Messages, tr[0].Response)
		}
		if tj := gateway.Trajectories(tr, "ep", "claude-code"); len(tj) != 1 || len(tj[0].Steps) != 2 {
			t.Fatalf("%d trajectories", len(tj))
		}
	}
}

// anthropicSDKCases is how many cases testdata/anthropic_sdk.mjs runs.
const anthropicSDKCases = 4

// TestAnthropicNodeSDK runs the official Anthropic SDK for Node against a
// session as Claude Code uses it: count_tokens with the key as x-api-key
// and as a bearer token, the beta route with betas, and a thinking +
// tool_use turn replayed with its tool_result.
func TestAnthropicNodeSDK(t *testing.T) {
	sdk := repotest.NodeModule(t, "node-anthropic", "@anthropic-ai/sdk", "scripts/fetch-anthropic-node.sh")
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = claudeModel
	s := f.open(t, gateway.SessionConfig{})
	want := len(gatewaytest.Render([]episode.Message{{Role: "system", Content: "You are Claude Code."}, {Role: "user", Content: "list the files"}},
		[]sampler.Tool{{Type: "function", Function: sampler.ToolFunction{Name: "Bash"}}}))
	ran, stderr := repotest.NodeCases(t, filepath.Join("testdata", "anthropic_sdk.mjs"),
		"ANTHROPIC_SDK="+sdk, "BASE_URL="+f.srv.URL+"/sessions/"+s.ID, "API_KEY="+s.Token, "WANT_TOKENS="+strconv.Itoa(want))
	if ran != anthropicSDKCases {
		t.Fatalf("%d SDK cases ran, want %d (stderr: %s)", ran, anthropicSDKCases, stderr)
	}
	tr := s.Traces()
	if tj := gateway.Trajectories(tr, "ep", "claude-code"); len(tr) != 2 || len(tj) != 1 || len(tj[0].Steps) != 2 || s.Stats().CountTokens != 3 {
		t.Fatalf("%d traces, %d trajectories, stats %+v", len(tr), len(tj), s.Stats())
	}
}

// TestCountTokensWithinTheBudget: count_tokens is inside the session's
// budget: its bodies count against the byte budget, and once the session's
// limit fired (max_calls, the byte budget) it is refused as every call is.
func TestCountTokensWithinTheBudget(t *testing.T) {
	msgs := []any{map[string]any{"role": "user", "content": "list the files"}}
	count := func(f *fixture, s *gateway.Session) int {
		code, _ := claudePost(t, f, "/sessions/"+s.ID+"/v1/messages/count_tokens", s.Token, false, claudeRequest(false, msgs))
		return code
	}
	// max_calls: answered while calls are left, refused after the limit.
	f := newFixture(t, gateway.Options{})
	s := f.open(t, gateway.SessionConfig{MaxCalls: 1})
	var codes []int
	codes = append(codes, count(f, s))
	for range 2 {
		code, _ := claudePost(t, f, "/sessions/"+s.ID+"/v1/messages", s.Token, false, claudeRequest(false, msgs))
		codes = append(codes, code)
	}
	codes = append(codes, count(f, s))
	if !reflect.DeepEqual(codes, []int{200, 200, 429, 429}) || s.Stats().CountTokens != 1 {
		t.Fatalf("count, call, call, count: %v; stats %+v", codes, s.Stats())
	}
	// The byte budget: count_tokens alone uses it up, and is refused past it.
	body, _ := json.Marshal(claudeRequest(false, msgs))
	g := newFixture(t, gateway.Options{MaxSessionBytes: int64(3*len(body) + len(body)/2)})
	s2 := g.open(t, gateway.SessionConfig{})
	codes = nil
	for range 4 {
		codes = append(codes, count(g, s2))
	}
	if code, _ := claudePost(t, g, "/sessions/"+s2.ID+"/v1/messages", s2.Token, false, claudeRequest(false, msgs)); code != 413 {
		codes = append(codes, code)
	}
	if !reflect.DeepEqual(codes, []int{200, 200, 200, 413}) {
		t.Fatalf("count_tokens against a budget of 3.5 bodies: %v", codes)
	}
	if n := count(g, s2); n != 413 {
		t.Errorf("count_tokens after the byte budget fired: %d, want 413", n)
	}
}
