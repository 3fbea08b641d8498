package chatsampler

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzParseToolCalls: model output never panics the parser, every call it
// returns has a name and JSON arguments, and text outside the blocks is
// kept.
func FuzzParseToolCalls(f *testing.F) {
	f.Add(`hi <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>`)
	f.Add(`<tool_call>{"name": </tool_call><tool_call>{"name":"g"}</tool_call> tail`)
	f.Add(`<tool_call><tool_call>{"name":"x","arguments":"s"}</tool_call>`)
	f.Add("<tool_call>0</tool_call> ")
	f.Fuzz(func(t *testing.T, s string) {
		text, calls := parseToolCalls(s)
		for _, c := range calls {
			if c.Function.Name == "" || !json.Valid([]byte(c.Function.Arguments)) {
				t.Fatalf("call %+v from %q", c, s)
			}
		}
		if len(calls) == 0 && text != s {
			t.Fatalf("text changed without tool calls: %q -> %q", s, text)
		}
		if len(calls) > 0 && strings.Count(s, "<tool_call>") < len(calls) {
			t.Fatalf("%d calls from %q", len(calls), s)
		}
	})
}
