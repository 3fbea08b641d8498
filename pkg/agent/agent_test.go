package agent

import (
	"reflect"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

func TestParseToolCallText(t *testing.T) {
	fc := func(id, name, args string) episode.ToolCall {
		return episode.ToolCall{ID: id, Type: "function", Function: episode.FunctionCall{Name: name, Arguments: args}}
	}
	tests := []struct {
		text string
		want []episode.ToolCall
	}{
		{"no calls", nil},
		{`<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>`, []episode.ToolCall{fc("p0", "f", `{"x": 1}`)}},
		{"<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 2}\"}\n</tool_call> and <tool_call>{\"name\": \"g\"}</tool_call>",
			[]episode.ToolCall{fc("p0", "f", `{"x": 2}`), fc("p1", "g", "{}")}},
		{`<tool_call>{"name": f}</tool_call>`, []episode.ToolCall{fc("p0", "", `{"name": f}`)}},
		// Calls inside the reasoning are not calls.
		{`<think><tool_call>{"name": "f"}</tool_call></think>done`, nil},
	}
	for _, tt := range tests {
		if got := ParseToolCallText(tt.text, "p"); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: %+v, want %+v", tt.text, got, tt.want)
		}
	}
}

func FuzzParseToolCallText(f *testing.F) {
	f.Add(`<tool_call>{"name": "f", "arguments": {}}</tool_call>`)
	f.Add(`<tool_call><tool_call></tool_call>`)
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range ParseToolCallText(s, "x") {
			if c.Function.Name != "" && c.Function.Arguments == "" {
				t.Fatalf("call %+v has no arguments", c)
			}
		}
	})
}

func TestObservationMessage(t *testing.T) {
	for _, tt := range []struct {
		obs  any
		want string
	}{
		{"plain", "plain"},
		{map[string]any{"text": "t", "prompt": "p"}, "t"},
		{map[string]any{"prompt": "p", "question": "q"}, "p"},
		{map[string]any{"question": "q"}, "q"},
		{map[string]any{"board": []any{1.0, 2.0}}, `{"board":[1,2]}`},
		{[]any{"a"}, `["a"]`},
		{nil, ""},
		{map[string]any{}, `{}`},
		{map[string]any{"text": 1, "prompt": "p"}, "p"},
	} {
		if got := ObservationMessage(tt.obs); got != tt.want {
			t.Errorf("%v: %q, want %q", tt.obs, got, tt.want)
		}
	}
}

type stringer struct{}

func (stringer) String() string { return "stringer" }

// TestObservationText: how agents of built-in tasks see an observation,
// by other fields than ObservationMessage and with fmt for the rest.
func TestObservationText(t *testing.T) {
	for _, tt := range []struct {
		obs  any
		want string
	}{
		{"plain", "plain"},
		{nil, ""},
		{stringer{}, "stringer"},
		{map[string]any{}, ""},
		{map[string]any(nil), ""},
		{map[string]any{"question": "q", "problem": "p"}, "q"},
		{map[string]any{"problem": "p", "prompt": "x"}, "p"},
		{map[string]any{"prompt": "x", "observation": "o"}, "x"},
		{map[string]any{"observation": "o", "text": "t"}, "o"},
		{map[string]any{"text": "t"}, "map[text:t]"},
		{map[string]any{"question": 3}, "map[question:3]"},
		{[]any{"a", 1}, "[a 1]"},
	} {
		if got := ObservationText(tt.obs); got != tt.want {
			t.Errorf("%v: %q, want %q", tt.obs, got, tt.want)
		}
	}
}

func TestChatAgent(t *testing.T) {
	d, v, err := Resolve("chat", map[string]any{"system_prompt": "be brief"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.New(v)
	if err != nil {
		t.Fatal(err)
	}
	a.UpdateFromEnv(map[string]any{"text": "hello"}, 0, false, nil)
	act := a.UpdateFromModel(sampler.Response{Text: "hi"})
	a.UpdateFromEnv("bye", 1, true, nil)
	m := a.Messages()
	if act.Content != "hi" || len(m) != 3 || m[0].Content != "be brief" || m[1].Content != "hello" || m[2].Role != "assistant" {
		t.Fatalf("%+v %+v", act, m)
	}
}

func TestRegisterPrompt(t *testing.T) {
	RegisterPrompt("test_prompt", "a prompt agent for this test", PromptParams{Instruction: "Answer briefly."})
	for _, tt := range []struct {
		args             map[string]any
		system, instruct string
	}{
		{nil, "", "Answer briefly."},
		{map[string]any{"system_prompt": "be kind", "instruction": ""}, "be kind", ""},
	} {
		d, v, err := Resolve("test_prompt", tt.args)
		if err != nil {
			t.Fatal(err)
		}
		a, err := d.New(v)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := a.(*Prompt)
		if !ok || p.System != tt.system || p.Instruction != tt.instruct {
			t.Errorf("%v: %#v, want system %q instruction %q", tt.args, a, tt.system, tt.instruct)
		}
	}
}
