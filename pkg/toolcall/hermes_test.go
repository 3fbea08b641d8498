package toolcall

import (
	"slices"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func call(name, args string) episode.ToolCall {
	return episode.ToolCall{Type: "function", Function: episode.FunctionCall{Name: name, Arguments: args}}
}

// A reply the model wrote in the template's shape renders back byte for
// byte from what Strip takes out of it: that is what keeps a multi-turn
// conversation's prompts extending the tokens that were sampled.
func TestRenderGivesBackTheCanonicalReply(t *testing.T) {
	for _, text := range []string{
		"<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls -la /app\"}}\n</tool_call>",
		"Let me look.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\":\"cat a.py\"}}\n</tool_call>",
		"<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"g<x>\", \"arguments\": {\"s\": \"<&>\"}}\n</tool_call>",
	} {
		content, calls := Strip(text, "call_")
		if len(calls) == 0 {
			t.Fatalf("no calls in %q", text)
		}
		for i := range calls {
			calls[i].ID = "other" // ids are not rendered
		}
		if got := Render(content, calls); got != text {
			t.Errorf("Render(Strip(%q)) = %q", text, got)
		}
	}
}

func TestStrip(t *testing.T) {
	for _, tc := range []struct {
		text, rest string
		calls      []episode.ToolCall
	}{
		{"no calls here", "no calls here", nil},
		{"a <tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_call> b", "a  b", []episode.ToolCall{call("f", `{"x": 1}`)}},
		{"<tool_call>{\"name\": \"f\"}</tool_call>", "", []episode.ToolCall{call("f", "{}")}},
		{"<tool_call>{\"name\": \"f\", \"arguments\": null}</tool_call>", "", []episode.ToolCall{call("f", "{}")}},
		// An unreadable block stays in the text; the readable one's id
		// is its block's index.
		{"<tool_call>{\"name\": </tool_call> <tool_call>{\"name\": \"g\", \"arguments\": \"s\"}</tool_call>",
			"<tool_call>{\"name\": </tool_call>", []episode.ToolCall{call("g", `"s"`)}},
		{"<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", nil},
	} {
		rest, calls := Strip(tc.text, "call_")
		for i := range calls {
			calls[i].ID = ""
		}
		if rest != tc.rest || !slices.Equal(calls, tc.calls) {
			t.Errorf("Strip(%q) = %q, %+v; want %q, %+v", tc.text, rest, calls, tc.rest, tc.calls)
		}
	}
	if _, calls := Strip("<tool_call>x</tool_call><tool_call>{\"name\": \"g\"}</tool_call>", "c"); len(calls) != 1 || calls[0].ID != "c1" {
		t.Errorf("ids: %+v", calls)
	}
}

func TestRenderArguments(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"", `{"name": "f", "arguments": {}}`},
		{` {"a": 1} `, `{"name": "f", "arguments": {"a": 1}}`},
		{"not json", `{"name": "f", "arguments": "not json"}`},
	} {
		if got := Render("", []episode.ToolCall{call("f", tc.args)}); got != "<tool_call>\n"+tc.want+"\n</tool_call>" {
			t.Errorf("args %q: %q", tc.args, got)
		}
	}
}
