package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// Anthropic's stop_reason through servers that report the stop match
// their own way: SGLang's matched_stop names the end-of-sequence token's
// id on an ordinary end (vLLM's stop_reason is null), and a stop token id
// is reported the same way. Only a stop string of the request is a
// stop_sequence; agent loops test for end_turn.
func TestAnthropicStopReason(t *testing.T) {
	type want struct{ reason, sequence string }
	for _, flavor := range []fakevllm.Flavor{fakevllm.SGLang, fakevllm.VLLM} {
		up := fakevllm.New(fakevllm.Config{Flavor: flavor, Reply: func(in fakevllm.ReplyInput) *fakevllm.Reply {
			if strings.Contains(fakevllm.RenderChat(in.Messages, false), "use a tool") {
				return &fakevllm.Reply{ToolCalls: []episode.ToolCall{{ID: "c1", Type: "function", Function: episode.FunctionCall{Name: "calc", Arguments: `{"x":2}`}}}}
			}
			return &fakevllm.Reply{Content: " the cat sat on the mat"}
		}})
		t.Cleanup(up.Close)
		client, err := rollout.NewClient(rollout.Options{Endpoints: []string{up.URL}, Model: up.Model()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.Close)
		f := newFixture(t, gateway.Options{Sampler: client})
		base := sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 64}
		for _, tc := range []struct {
			name  string
			edit  func(p *sampler.Params)
			tools bool
			want  want
		}{
			{"end of sequence", func(*sampler.Params) {}, false, want{"end_turn", ""}},
			{"stop strings configured, none matched", func(p *sampler.Params) { p.Stop = []string{"</answer>"} }, false, want{"end_turn", ""}},
			{"a stop string matched", func(p *sampler.Params) { p.Stop = []string{"</answer>", " on"} }, false, want{"stop_sequence", " on"}},
			{"a stop token id matched", func(p *sampler.Params) { p.StopTokenIDs = up.Vocab().Encode(" mat") }, false, want{"end_turn", ""}},
			{"max_tokens", func(p *sampler.Params) { p.MaxTokens = 2 }, false, want{"max_tokens", ""}},
			{"tool call", func(p *sampler.Params) { p.MaxTokens = 256 }, true, want{"tool_use", ""}},
		} {
			for _, stream := range []bool{false, true} {
				t.Run(string(flavor)+"/"+tc.name+map[bool]string{true: "/stream"}[stream], func(t *testing.T) {
					p := base
					tc.edit(&p)
					s := f.open(t, gateway.SessionConfig{Params: &p})
					body := map[string]any{"model": "claude-x", "max_tokens": 100, "stream": stream,
						"messages": []any{map[string]any{"role": "user", "content": "hi"}}}
					if tc.tools {
						body["messages"] = []any{map[string]any{"role": "user", "content": "use a tool"}}
						body["tools"] = []any{map[string]any{"name": "calc", "input_schema": map[string]any{"type": "object"}}}
					}
					code, out := f.post(t, "/sessions/"+s.ID+"/v1/messages", s.Token, body)
					if code != 200 {
						t.Fatalf("%d %s", code, out)
					}
					got := anthropicStop(t, out, stream)
					if got != tc.want {
						t.Errorf("stop_reason %q, stop_sequence %q; want %q, %q\n%s", got.reason, got.sequence, tc.want.reason, tc.want.sequence, out)
					}
				})
			}
		}
	}
}

// anthropicStop reads stop_reason and stop_sequence (null as "") from a
// Messages reply or the message_delta event of its stream.
func anthropicStop(t *testing.T, body []byte, stream bool) struct{ reason, sequence string } {
	t.Helper()
	var d struct {
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}
	if !stream {
		if err := json.Unmarshal(body, &d); err != nil {
			t.Fatal(err)
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(body))
		found := false
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev struct {
				Type  string
				Delta json.RawMessage
			}
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Type == "message_delta" {
				if err := json.Unmarshal(ev.Delta, &d); err != nil {
					t.Fatal(err)
				}
				found = true
			}
		}
		if !found {
			t.Fatalf("no message_delta in\n%s", body)
		}
	}
	var out struct{ reason, sequence string }
	if d.StopReason != nil {
		out.reason = *d.StopReason
	}
	if d.StopSequence != nil {
		out.sequence = *d.StopSequence
	}
	return out
}
