package toolcall

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzStrip: model output never panics the parser, every call it returns
// has a name and JSON arguments, text outside the blocks is kept, and
// the calls render back to blocks that parse to the same calls.
func FuzzStrip(f *testing.F) {
	f.Add(`hi <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>`)
	f.Add(`<tool_call>{"name": </tool_call><tool_call>{"name":"g"}</tool_call> tail`)
	f.Add(`<tool_call><tool_call>{"name":"x","arguments":"s"}</tool_call>`)
	f.Add("<tool_call>0</tool_call> ")
	f.Add("<tool_call>\n{\"name\": \"a<b>\", \"arguments\": null}\n</tool_call>")
	f.Fuzz(func(t *testing.T, s string) {
		text, calls := Strip(s, "call_")
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
		if strings.Contains(text, "<tool_call>") || strings.Contains(text, "</tool_call>") {
			return // leftover markup would be read again on the way back
		}
		again, back := Strip(Render(text, calls), "call_")
		if again != text || len(back) != len(calls) {
			t.Fatalf("render of %q + %+v reads back as %q + %+v", text, calls, again, back)
		}
		for i := range calls {
			if back[i].Function != calls[i].Function {
				t.Fatalf("call %d: %+v reads back as %+v", i, calls[i].Function, back[i].Function)
			}
		}
	})
}
