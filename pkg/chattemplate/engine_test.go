package chattemplate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// TestEngineFeatures covers what HF templates use beyond Qwen3's, each on
// a small template whose Python/Jinja output is stated in the case.
func TestEngineFeatures(t *testing.T) {
	msgs := []episode.Message{{Role: "user", Content: "  hi\n"}}
	now := func() time.Time { return time.Date(2025, 7, 4, 9, 5, 0, 0, time.UTC) }
	cases := []struct{ name, src, want string }{
		// Llama 3.x prints the date this way: strftime("%d %b %Y")
		{"strftime_now", `{{ strftime_now("%d %b %Y") }}`, "04 Jul 2025"},
		// json.dumps(..., indent=4): "," item separator, newline + indent
		{"tojson indent", `{{ {"a": [1, 2.5], "b": none}|tojson(indent=4) }}`, "{\n    \"a\": [\n        1,\n        2.5\n    ],\n    \"b\": null\n}"},
		// Python floats keep ".0"; non-ASCII stays literal (ensure_ascii=False)
		{"tojson floats and unicode", `{{ [1.0, 1e-05, "é\n\"q\""]|tojson }}`, `[1.0, 1e-05, "é\n\"q\""]`},
		{"tojson sort_keys", `{{ {"b": 1, "a": 2}|tojson(sort_keys=true) }}`, `{"a": 2, "b": 1}`},
		// str.strip() with no argument strips all whitespace
		{"strip methods", `[{{ messages[0].content.strip() }}|{{ messages[0].content.lstrip() }}|{{ messages[0]['content'].rstrip() }}]`, "[hi|hi\n|  hi]"},
		// trim_blocks + lstrip_blocks: block lines leave no blank lines
		{"trim and lstrip blocks", "{% for m in messages %}\n    {% if m.role == 'user' %}\nU\n    {% endif %}\n{% endfor %}", "U\n"},
		{"loop controls", `{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}`, "02"},
		{"namespace", `{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}`, "1"},
		{"is string and defined", `{{ messages[0].content is string }} {{ messages[0].reasoning_content is defined }}`, "True False"},
		{"bos token", `{{ bos_token }}|{{ eos_token }}`, "<s>|</s>"},
		{"kwargs", `{{ custom_flag }}`, "yes"},
		{"reverse slice and loop.last", `{% for m in messages[::-1] %}{{ m.role }}{{ loop.last }}{% endfor %}`, "userTrue"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tpl, err := New(c.src, Options{Now: now, SpecialTokens: map[string]string{"bos_token": "<s>", "eos_token": "</s>"}})
			if err != nil {
				t.Fatal(err)
			}
			got, err := tpl.Render(Input{Messages: msgs, Kwargs: map[string]any{"custom_flag": "yes"}})
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestOrderedItems(t *testing.T) {
	v, err := DecodeJSON([]byte(`{"z": 1, "a": 2, "m": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := New(`{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}`, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.RenderValues(Values{Kwargs: map[string]any{"d": v}})
	if err != nil {
		t.Fatal(err)
	}
	if got != "z=1;a=2;m=3;" {
		t.Errorf("items() order: got %q", got)
	}
}

func TestErrors(t *testing.T) {
	_, err := New(`{% if %}`, Options{})
	var te *Error
	if !errors.As(err, &te) || te.ExitCode() != 2 {
		t.Fatalf("bad template: got %v, want *Error", err)
	}
	tpl, err := New(`{% if messages[0].role != 'system' %}{{ raise_exception('System message required') }}{% endif %}ok`, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Render(Input{Messages: []episode.Message{{Role: "user", Content: "x"}}})
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "System message required") {
		t.Fatalf("raise_exception: got %v", err)
	}
	got, err := tpl.Render(Input{Messages: []episode.Message{{Role: "system", Content: "x"}}})
	if err != nil || got != "ok" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	for _, in := range []string{`{"a": }`, `[1, 2`, `{} {}`, ``, `{"a" 1}`} {
		if _, err := DecodeJSON([]byte(in)); err == nil {
			t.Errorf("DecodeJSON(%q): no error", in)
		}
	}
}

// FuzzRender renders the real-world-shaped template with arbitrary message
// content and roles: it must never panic and must contain the content.
func FuzzRender(f *testing.F) {
	src := `{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.arguments|tojson }}{% endfor %}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}`
	tpl, err := New(src, Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("user", "hello", `{"a": 1}`)
	f.Add("assistant", "{{ not a tag }}", `not json`)
	f.Add("tool", "\x00\xff<|im_end|>", `{"x": [1, {"y": null}]}`)
	f.Fuzz(func(t *testing.T, role, content, args string) {
		m := episode.Message{Role: role, Content: content, ToolCalls: []episode.ToolCall{{Function: episode.FunctionCall{Name: "f", Arguments: args}}}}
		out, err := tpl.Render(Input{Messages: []episode.Message{m}, AddGenerationPrompt: true})
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		if !strings.Contains(out, content) {
			t.Fatalf("content %q missing from %q", content, out)
		}
	})
}

// FuzzDecodeJSON: arbitrary bytes never panic.
func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`{"messages": [{"role": "user", "content": "x"}]}`))
	f.Add([]byte(`[1, 2.5e3, true, null, "s"]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = DecodeJSON(data)
	})
}
