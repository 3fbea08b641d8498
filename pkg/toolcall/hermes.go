// Package toolcall reads and writes tool calls in the Hermes/Qwen text
// format, the one Qwen2.5/Qwen3 and Hermes models are trained on and
// vLLM's hermes tool parser reads:
//
//	<tool_call>
//	{"name": "bash", "arguments": {"command": "ls"}}
//	</tool_call>
//
// Every reader of model text that finds tool calls (a chat sampler
// acting as vLLM's parser, the tool agent reading a server's plain text)
// and every chat template that writes them back uses this package, so
// the calls a model wrote render back to the bytes it wrote.
package toolcall

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// Open starts a tool-call block; a stream that parses tool calls holds
// back the text from it.
const Open = "<tool_call>"

// Block is one <tool_call>…</tool_call> block of a text.
type Block struct {
	// Start and End are the block's byte offsets in the text.
	Start, End int
	// Body is what the block holds, without surrounding white space.
	Body string
	// OK says Body is a JSON object with a non-empty string "name".
	OK bool
	// Name and Arguments are the call's, when OK; Arguments is the raw
	// JSON the model wrote ("{}" when it wrote none or null).
	Name, Arguments string
}

var blockRE = regexp.MustCompile(`(?s)<tool_call>\s*(.*?)\s*</tool_call>`)

// Blocks finds the tool-call blocks of text, in order.
func Blocks(text string) []Block {
	var out []Block
	for _, m := range blockRE.FindAllStringSubmatchIndex(text, -1) {
		b := Block{Start: m[0], End: m[1], Body: text[m[2]:m[3]]}
		var call struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(b.Body), &call); err == nil && call.Name != "" {
			b.OK, b.Name = true, call.Name
			b.Arguments = strings.TrimSpace(string(call.Arguments))
			if b.Arguments == "" || b.Arguments == "null" {
				b.Arguments = "{}"
			}
		}
		out = append(out, b)
	}
	return out
}

// Strip takes the readable tool calls out of a reply, as vLLM's hermes
// parser does: it returns the text without them (trimmed) and the calls,
// with ids idPrefix + the block's index. A block whose body does not
// parse stays in the text, so the agent sees what the model wrote.
// Without a readable block the text comes back unchanged.
func Strip(text, idPrefix string) (string, []episode.ToolCall) {
	var calls []episode.ToolCall
	var rest strings.Builder
	prev := 0
	for i, b := range Blocks(text) {
		if !b.OK {
			continue
		}
		calls = append(calls, episode.ToolCall{ID: idPrefix + strconv.Itoa(i), Type: "function",
			Function: episode.FunctionCall{Name: b.Name, Arguments: b.Arguments}})
		rest.WriteString(text[prev:b.Start])
		prev = b.End
	}
	if len(calls) == 0 {
		return text, nil
	}
	rest.WriteString(text[prev:])
	return strings.TrimSpace(rest.String()), calls
}

// Render writes an assistant message's content and tool calls as the
// Qwen2.5 chat template does after the "assistant" role line: the
// content, then each call on lines of its own,
//
//	<tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>
//
// separated from what precedes it by a newline. ARGS is the arguments
// exactly as the model wrote them when they are JSON (so a reply the
// model wrote in this shape renders back byte for byte), else the
// arguments as a JSON string.
func Render(content string, calls []episode.ToolCall) string {
	var b strings.Builder
	b.WriteString(content)
	for i, c := range calls {
		if i > 0 || content != "" {
			b.WriteByte('\n')
		}
		b.WriteString("<tool_call>\n{\"name\": ")
		b.WriteString(jsonString(c.Function.Name))
		b.WriteString(", \"arguments\": ")
		args := strings.TrimSpace(c.Function.Arguments)
		switch {
		case args == "":
			args = "{}"
		case !json.Valid([]byte(args)):
			args = jsonString(c.Function.Arguments)
		}
		b.WriteString(args)
		b.WriteString("}\n</tool_call>")
	}
	return b.String()
}

// jsonString is s as a JSON string with <, > and & left as they are
// (Go's HTML escaping would write them as \u003c…).
func jsonString(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(buf.String(), "\n")
}
