package chattemplate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// repoRoot is the repository's top directory.
func repoRoot(t testing.TB) string { return repotest.Root(t) }

// realTemplate loads the chat template shipped with the real tokenizer in
// .cache/tokenizers/NAME (scripts/fetch-tokenizers.sh). Missing files skip
// the test, except in CI, where they fail it.
func realTemplate(t testing.TB, name string) *Template {
	t.Helper()
	path := filepath.Join(repoRoot(t), ".cache", "tokenizers", name, "tokenizer_config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		msg := "tokenizer files missing in .cache/tokenizers/" + name + ": run scripts/fetch-tokenizers.sh"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
		BOS          string `json:"bos_token"`
		EOS          string `json:"eos_token"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	tpl, err := New(cfg.ChatTemplate, Options{SpecialTokens: map[string]string{"bos_token": cfg.BOS, "eos_token": cfg.EOS}})
	if err != nil {
		t.Fatalf("parse %s template: %v", name, err)
	}
	return tpl
}

// The Qwen3 tool block: the template writes this header, one tojson line
// per tool, then this footer (its literal strings, concatenated).
const (
	qwen3ToolsHead = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>"
	qwen3ToolsFoot = "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
)

var weatherTool = sampler.Tool{Type: "function", Function: sampler.ToolFunction{
	Name:        "get_weather",
	Description: "Get the weather",
	Parameters:  json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}`),
}}

// TestQwen3Template checks the real Qwen3 template against outputs worked
// out by hand from its source; each case says which branch it exercises.
func TestQwen3Template(t *testing.T) {
	tpl := realTemplate(t, "qwen3")
	sys := episode.Message{Role: "system", Content: "You are a helpful assistant."}
	user := episode.Message{Role: "user", Content: "What is 2+2?"}
	cases := []struct {
		name string
		in   Input
		want string
	}{{
		// system first -> its own block; user -> im_start/im_end block;
		// add_generation_prompt -> assistant header; thinking left on, so
		// no empty think block.
		name: "system user generation prompt",
		in:   Input{Messages: []episode.Message{sys, user}, AddGenerationPrompt: true},
		want: "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
	}, {
		// enable_thinking is false -> the template pre-fills an empty
		// think block after the assistant header.
		name: "thinking disabled",
		in:   Input{Messages: []episode.Message{user}, AddGenerationPrompt: true, Kwargs: map[string]any{"enable_thinking": false}},
		want: "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
	}, {
		// enable_thinking true is not "false": nothing added.
		name: "thinking enabled explicitly",
		in:   Input{Messages: []episode.Message{user}, AddGenerationPrompt: true, Kwargs: map[string]any{"enable_thinking": true}},
		want: "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
	}, {
		// an assistant turn before the last user query: the template
		// splits its content at </think> and keeps only the answer.
		name: "earlier reasoning dropped",
		in: Input{Messages: []episode.Message{
			user,
			{Role: "assistant", Content: "<think>\nadd them\n</think>\n\nThe answer is 4."},
			{Role: "user", Content: "And 3+3?"},
		}, AddGenerationPrompt: true},
		want: "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\nThe answer is 4.<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n",
	}, {
		// the last message is an assistant turn after the last query with
		// reasoning_content (our Message.Reasoning): rendered as a think
		// block, reasoning stripped of newlines, no generation prompt.
		name: "final assistant with reasoning",
		in: Input{Messages: []episode.Message{
			user,
			{Role: "assistant", Content: "\n4", Reasoning: "\n2 plus 2 is 4\n"},
		}},
		want: "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n2 plus 2 is 4\n</think>\n\n4<|im_end|>\n",
	}, {
		// final assistant without reasoning still gets the (empty) think
		// block, because it is loop.last after the last query.
		name: "final assistant without reasoning",
		in:   Input{Messages: []episode.Message{user, {Role: "assistant", Content: "4"}}},
		want: "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>\n",
	}, {
		// tools with a system message: the system text goes first in the
		// tools system block, then one tojson line per tool, parameters
		// in the order the schema was written (see TestQwen3ToolKeyOrder).
		// The assistant tool call (no content, not last, no reasoning)
		// gets a plain header then <tool_call> with the arguments parsed
		// and re-serialized by tojson; two consecutive tool results share
		// one user block.
		name: "tools, tool call and two tool results",
		in: Input{
			Messages: []episode.Message{
				sys,
				{Role: "user", Content: "Weather in Paris and Rome?"},
				{Role: "assistant", ToolCalls: []episode.ToolCall{
					{ID: "c1", Type: "function", Function: episode.FunctionCall{Name: "get_weather", Arguments: `{"city":"Paris"}`}},
					{ID: "c2", Type: "function", Function: episode.FunctionCall{Name: "get_weather", Arguments: `{"city": "Rome"}`}},
				}},
				{Role: "tool", Content: "sunny", ToolCallID: "c1"},
				{Role: "tool", Content: "rainy", ToolCallID: "c2"},
			},
			Tools:               []sampler.Tool{weatherTool},
			AddGenerationPrompt: true,
		},
		want: "<|im_start|>system\nYou are a helpful assistant.\n\n" + qwen3ToolsHead +
			"\n" + `{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}` +
			qwen3ToolsFoot +
			"<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n" +
			"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call><|im_end|>\n" +
			"<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrainy\n</tool_response><|im_end|>\n" +
			"<|im_start|>assistant\n",
	}, {
		// tools without a system message: the tools block opens the
		// system turn directly. Assistant content before a tool call is
		// followed by a newline, and arguments that are not JSON are
		// printed as the model wrote them.
		name: "tools without system, content and raw arguments",
		in: Input{
			Messages: []episode.Message{
				{Role: "user", Content: "hi"},
				{Role: "assistant", Content: "Let me check.", ToolCalls: []episode.ToolCall{
					{Type: "function", Function: episode.FunctionCall{Name: "f", Arguments: `not json`}},
				}},
			},
			Tools: []sampler.Tool{{Type: "function", Function: sampler.ToolFunction{Name: "f"}}},
		},
		want: "<|im_start|>system\n" + qwen3ToolsHead + "\n" + `{"type": "function", "function": {"name": "f"}}` + qwen3ToolsFoot +
			"<|im_start|>user\nhi<|im_end|>\n" +
			"<|im_start|>assistant\n<think>\n\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": not json}\n</tool_call><|im_end|>\n",
	}, {
		// a user message that is a wrapped tool response does not count
		// as the last query, so the assistant after the real query keeps
		// its reasoning (index > last_query_index) -- here as a think block.
		name: "tool_response user message is not a query",
		in: Input{Messages: []episode.Message{
			{Role: "user", Content: "q"},
			{Role: "assistant", Content: "a", Reasoning: "r"},
			{Role: "user", Content: "<tool_response>x</tool_response>"},
		}, AddGenerationPrompt: true},
		want: "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\na<|im_end|>\n<|im_start|>user\n<tool_response>x</tool_response><|im_end|>\n<|im_start|>assistant\n",
	}, {
		// a second system message (not first) renders like a user block.
		name: "later system message",
		in:   Input{Messages: []episode.Message{user, {Role: "system", Content: "Be brief."}}},
		want: "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>system\nBe brief.<|im_end|>\n",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := tpl.Render(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got:\n%q\nwant:\n%q", got, c.want)
			}
		})
	}
}

// TestQwen3ToolKeyOrder: tools given as JSON keep the user's key order in
// tojson, as Python dicts do (this is what vLLM renders).
func TestQwen3ToolKeyOrder(t *testing.T) {
	tpl := realTemplate(t, "qwen3")
	tools, err := DecodeJSON([]byte(`[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","enum":["Paris","Zürich"]},"days":{"type":"integer","minimum":1}},"required":["city"]}}}]`))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := DecodeJSON([]byte(`[{"role":"user","content":"hi"}]`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.RenderValues(Values{Messages: msgs.([]any), Tools: tools.([]any)})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\n" + qwen3ToolsHead + "\n" +
		`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Zürich"]}, "days": {"type": "integer", "minimum": 1}}, "required": ["city"]}}}` +
		qwen3ToolsFoot + "<|im_start|>user\nhi<|im_end|>\n"
	if got != want {
		t.Errorf("got:\n%q\nwant:\n%q", got, want)
	}
}

// TestLlama3Template: the Llama 3 template shipped with the npm package
// (bos_token first, header per message, content trimmed).
func TestLlama3Template(t *testing.T) {
	tpl := realTemplate(t, "llama3")
	got, err := tpl.Render(Input{Messages: []episode.Message{
		{Role: "system", Content: "Be nice. "},
		{Role: "user", Content: "  hi\n"},
	}, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe nice.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	if got != want {
		t.Errorf("got:\n%q\nwant:\n%q", got, want)
	}
}
