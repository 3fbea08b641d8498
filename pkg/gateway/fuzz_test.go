package gateway

import (
	"net/http/httptest"
	"testing"
	"time"

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

// fuzzMemory is a session's memory with one response and one custom call.
type fuzzMemory struct{}

func (fuzzMemory) previous(id string) ([]episode.Message, bool) {
	return []episode.Message{{Role: "user", Content: "u"}, {Role: "assistant", Content: "a"}}, id == "resp_1"
}

func (fuzzMemory) customArgs(id string) (string, bool) { return `{"input": "x"}`, id == "c1" }

// FuzzDecodeResponses feeds arbitrary bodies to the Responses request
// parser and, for those accepted, writes the reply streamed and not: no
// panic, and every accepted request has messages to sample.
func FuzzDecodeResponses(f *testing.F) {
	for _, s := range []string{
		`{"input":"hi"}`,
		`{"instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"stream":true}`,
		`{"input":[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"rllm-reasoning:aGk="},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"5"}]}`,
		`{"input":[{"type":"custom_tool_call","call_id":"c1","name":"apply_patch","input":"x"},{"type":"custom_tool_call_output","call_id":"c1","output":[{"type":"input_text","text":"ok"}]}],"tools":[{"type":"custom","name":"apply_patch","format":{"type":"grammar","syntax":"lark","definition":"start: /.+/"}}]}`,
		`{"previous_response_id":"resp_1","input":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"x"}]}]}`,
		`{"store":false,"include":["reasoning.encrypted_content","message.output_text.logprobs"],"parallel_tool_calls":false,"input":"x","text":{"format":{"type":"text"}},"tool_choice":"auto"}`,
		`{"background":true,"input":"x"}`, `{"tools":[{"type":"web_search"}],"input":"x"}`,
		`{"input":{"nested":1}}`, `null`, `[]`, `{"input":[null]}`, `{"input":[{"role":"developer","content":null}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := decodeResponses(body, fuzzMemory{})
		if err != nil {
			return
		}
		if len(c.req.Messages) == 0 || c.responses == nil {
			t.Fatalf("accepted %s with no messages", body)
		}
		name := "f"
		for n := range c.responses.custom {
			name = n
		}
		tr := &Trace{TraceID: "x", PromptIDs: []int{1}, CompletionIDs: []int{2, 3}, Logprobs: []float64{-1},
			FinishReason: "length", Response: episode.Message{Role: "assistant", Content: "é", Reasoning: "r",
				ToolCalls: []episode.ToolCall{{ID: "c", Function: episode.FunctionCall{Name: name, Arguments: string(body)}}}}}
		for _, stream := range []bool{false, true} {
			c.stream = stream
			for _, fail := range []bool{false, true} {
				w := httptest.NewRecorder()
				c.responses.stream = nil
				if stream {
					c.responses.stream = beginResponseStream(w, "m", "resp_x", 0, c.responses, time.Hour)
				}
				if fail {
					writeResponsesFailure(w, c, 400, "invalid_request_error", "context_length_exceeded", "too long")
				} else {
					writeResponses(w, "m", tr, c)
				}
			}
		}
	})
}
