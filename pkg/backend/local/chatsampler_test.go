package local

import (
	"context"
	"slices"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

func TestChatSampler(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, smallConfig())
	s1 := publish(t, b)
	cs := NewChatSampler(s1)
	msgs := []episode.Message{{Role: "user", Content: "2+2="}}
	resp, err := cs.Sample(ctx, sampler.Request{Messages: msgs, Params: sampler.Params{Temperature: 1, TopK: -1, MaxTokens: 5, Seed: seed(1)}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.PromptIDs, Tokenizer{}.ChatTemplate(msgs, true)) {
		t.Error("prompt ids are not the chat template's")
	}
	if n, err := sampler.CountPromptTokens(ctx, cs, sampler.Request{Messages: msgs}); err != nil || n != len(resp.PromptIDs) {
		t.Errorf("counted %d (%v), sampled a prompt of %d", n, err, len(resp.PromptIDs))
	}
	if len(resp.CompletionIDs) != len(resp.Logprobs) || len(resp.CompletionIDs) == 0 || resp.Model != "local-v1" {
		t.Fatalf("response %+v", resp)
	}
	if want, _ := (Tokenizer{}).Decode(resp.CompletionIDs, true); resp.Text != want {
		t.Errorf("text %q, decoded ids %q", resp.Text, want)
	}
	if resp.FinishReason != "stop" && resp.FinishReason != "length" {
		t.Errorf("finish reason %q", resp.FinishReason)
	}
	// The same request by prompt ids gives the same reply.
	again, err := cs.Sample(ctx, sampler.Request{PromptIDs: resp.PromptIDs, Params: sampler.Params{Temperature: 1, TopK: -1, MaxTokens: 5, Seed: seed(1)}})
	if err != nil || !slices.Equal(again.CompletionIDs, resp.CompletionIDs) {
		t.Fatalf("prompt-id request: %v, %v vs %v", err, again.CompletionIDs, resp.CompletionIDs)
	}
	cs.Swap(publish(t, b))
	if cs.Current().Name() != "local-v2" {
		t.Error("Swap did not take effect")
	}
	if _, err := cs.Sample(ctx, sampler.Request{Messages: msgs, PromptIDs: []int{1}}); err == nil {
		t.Error("messages and prompt ids both accepted")
	}
}

func TestReplyTextCutsStopString(t *testing.T) {
	text, err := ReplyText(backendSeq([]int{'4', '2', '\n'}, "\n"))
	if err != nil || text != "42" {
		t.Fatalf("ReplyText = %q, %v", text, err)
	}
	text, _ = ReplyText(backendSeq([]int{'7', TokenImEnd}, ""))
	if text != "7" {
		t.Fatalf("ReplyText with im_end = %q", text)
	}
}

func backendSeq(tokens []int, stop string) backend.SampledSequence {
	return backend.SampledSequence{Tokens: tokens, MatchedStop: stop, StopReason: "stop"}
}

// scripted is a token sampler that replies with the given texts in turn
// (each closed by <|im_end|>) and records the prompts it was given.
type scripted struct {
	replies []string
	prompts [][]int
}

func (s *scripted) Name() string { return "scripted" }
func (s *scripted) Version() int { return 1 }
func (s *scripted) Sample(_ context.Context, req backend.SampleRequest) (backend.SampleResult, error) {
	s.prompts = append(s.prompts, req.Prompt)
	ids := append(Tokenizer{}.Encode(s.replies[0], false), TokenImEnd)
	s.replies = s.replies[1:]
	return backend.SampleResult{Sequences: []backend.SampledSequence{{Tokens: ids, Logprobs: make([]float64, len(ids)), StopReason: backend.StopReasonStop}}}, nil
}

var bashTool = sampler.Tool{Type: "function", Function: sampler.ToolFunction{Name: "bash", Description: "Run a command.",
	Parameters: []byte(`{"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}`)}}

// The embedded policy calls tools: the tools are in the system message,
// a <tool_call> reply comes back as a ToolCall, and the next turn's
// prompt (the call and its result appended, as the tool agent does)
// extends the first prompt and the sampled reply token for token.
func TestChatSamplerTools(t *testing.T) {
	ctx := context.Background()
	call := "Let me look.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls /app\"}}\n</tool_call>"
	s := &scripted{replies: []string{call, "Done."}}
	cs := NewChatSampler(s)
	msgs := []episode.Message{{Role: "system", Content: "Work in the container."}, {Role: "user", Content: "Fix the bug."}}
	tools := []sampler.Tool{bashTool}
	first, err := cs.Sample(ctx, sampler.Request{Messages: msgs, Tools: tools, Params: sampler.Params{MaxTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	prompt, _ := Tokenizer{}.Decode(first.PromptIDs, false)
	want := "<|im_start|>system\nWork in the container.\n\n# Tools\n\nYou may call the functions whose signatures are within <tools></tools>:\n<tools>\n" +
		`{"type":"function","function":{"name":"bash","description":"Run a command.","parameters":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}}` +
		"\n</tools>\n\nTo call one, reply with its name and arguments as a JSON object within <tool_call></tool_call>:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\nFix the bug.<|im_end|>\n<|im_start|>assistant\n"
	if prompt != want {
		t.Fatalf("prompt\n%q\nwant\n%q", prompt, want)
	}
	if first.Text != "Let me look." || len(first.ToolCalls) != 1 || first.FinishReason != "tool_calls" ||
		first.ToolCalls[0].Function != (episode.FunctionCall{Name: "bash", Arguments: `{"command": "ls /app"}`}) {
		t.Fatalf("reply %+v", first)
	}
	if n, err := cs.CountPromptTokens(ctx, sampler.Request{Messages: msgs, Tools: tools}); err != nil || n != len(first.PromptIDs) {
		t.Errorf("counted %d (%v), sampled %d", n, err, len(first.PromptIDs))
	}
	msgs = append(msgs,
		episode.Message{Role: "assistant", Content: first.Text, ToolCalls: first.ToolCalls},
		episode.Message{Role: "tool", ToolCallID: first.ToolCalls[0].ID, Content: "pkg\ntests"},
		episode.Message{Role: "tool", ToolCallID: "call_9", Content: "second"})
	second, err := cs.Sample(ctx, sampler.Request{Messages: msgs, Tools: tools, Params: sampler.Params{MaxTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	head := append(slices.Clone(first.PromptIDs), first.CompletionIDs...)
	if !slices.Equal(second.PromptIDs[:len(head)], head) {
		t.Fatal("the second prompt does not extend the first prompt and its reply")
	}
	rest, _ := Tokenizer{}.Decode(second.PromptIDs[len(head):], false)
	if rest != "\n<|im_start|>user\n<tool_response>\npkg\ntests\n</tool_response>\n<tool_response>\nsecond\n</tool_response><|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("the tool results render as %q", rest)
	}
	if second.Text != "Done." || len(second.ToolCalls) != 0 || second.FinishReason != "stop" {
		t.Errorf("final reply %+v", second)
	}
	// Without tools offered, <tool_call> text is text.
	plain, err := NewChatSampler(&scripted{replies: []string{call}}).Sample(ctx, sampler.Request{Messages: msgs[:2]})
	if err != nil || plain.Text != call || len(plain.ToolCalls) != 0 {
		t.Errorf("without tools: %+v, %v", plain, err)
	}
	// A chat without tools renders as it always did.
	if got, _ := (Tokenizer{}).Decode(Tokenizer{}.RenderChat(msgs[:2], nil, false), false); got != "<|im_start|>system\nWork in the container.<|im_end|>\n<|im_start|>user\nFix the bug.<|im_end|>\n" {
		t.Errorf("plain chat %q", got)
	}
}
