package gateway

import (
	"net/http/httptest"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// FuzzDecode feeds arbitrary bodies to the three request decoders and,
// for those accepted, writes every reply shape: nothing may panic.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stream":true,"stream_options":{"include_usage":true},"logprobs":true}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
		`{"prompt":[1,2,3],"logprobs":1}`,
		`{"prompt":[[1]],"stream":true}`,
		`{"system":[{"type":"text","text":"s"}],"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"5"}]}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"calc","input":{"a":1}}]}]}`,
		`{"messages":[{"role":"user","content":{"nested":[1]}}]}`,
		`null`, `[]`, `{"n":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, dec := range []func([]byte) (call, error){decodeChat, decodeCompletion, decodeMessages} {
			c, err := dec(body)
			if err != nil {
				continue
			}
			tr := &Trace{TraceID: "x", PromptIDs: []int{1}, CompletionIDs: []int{2, 3}, Logprobs: []float64{-1},
				FinishReason: "tool_calls", Response: episode.Message{Role: "assistant", Content: "é", Reasoning: "r",
					ToolCalls: []episode.ToolCall{{ID: "c", Function: episode.FunctionCall{Name: "f", Arguments: string(body)}}}}}
			for _, stream := range []bool{false, true} {
				c.stream = stream
				c.asked = askedFor{logprobs: true, tokenIDs: true, includeUsage: true}
				writeChat(httptest.NewRecorder(), "m", tr, c)
				writeCompletion(httptest.NewRecorder(), "m", tr, c)
				writeMessages(httptest.NewRecorder(), "m", tr, c)
			}
		}
	})
}
