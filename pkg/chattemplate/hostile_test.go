package chattemplate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Templates come from downloaded repositories: none may crash the
// process, exhaust its memory or ignore cancellation.
func TestHostileTemplates(t *testing.T) {
	deep := strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000)
	tests := []struct {
		name, src string
		parseErr  string // refused by New
		renderErr string // refused by Render
	}{
		{"100k-deep expression", "{{ " + deep + " }}", "brackets nested more than 64 deep", ""},
		{"100k-deep list", "{{ " + strings.Repeat("[", 100000) + " }}", "brackets nested more than 64 deep", ""},
		{"100k nots", "{{ " + strings.Repeat("not ", 100000) + "x }}", "more than 1000 operators in one tag", ""},
		{"deeply nested blocks", strings.Repeat("{% if true %}", 1000) + strings.Repeat("{% endif %}", 1000), "blocks nested more than 64 deep", ""},
		{"huge source", strings.Repeat("x", 2<<20), "more than the limit of 1048576", ""},
		{"include reads no file", "{% include '/etc/passwd' %}", "does not parse", ""},
		{"recursive macro", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "", "recursed too deep"},
		{"mutually recursive macros", "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}", "", "recursed too deep"},
		{"string times a billion", "{{ 'x' * 1000000000 }}", "", "more than the limit of 8388608"},
		{"range of a billion", "{% for i in range(1000000000) %}{% endfor %}", "", "a range of 1000000000"},
		{"loops nested without output", "{% for a in range(3000) %}{% for b in range(3000) %}{% endfor %}{% endfor %}", "", "more than 2000000 steps"},
		{"doubling a string", "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "", "a string of"},
		{"doubling with ~", "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "", "a string of"},
		{"doubling a list", "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", "", "a list of"},
		{"output without end", "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "", "output is larger than the limit"},
		{"huge indent", "{{ 'a\nb' | indent(1000000000) }}", "", "filter indent got the argument 1000000000"},
		{"huge center", "{{ 'a' | center(1000000000) }}", "", "filter center got the argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpl, err := New(tt.src, Options{})
			if tt.parseErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.parseErr) || !usererr.Is(err) {
					t.Fatalf("New: err = %v, want a user error with %q", err, tt.parseErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			_, err = tpl.Render(Input{})
			if err == nil || !strings.Contains(err.Error(), tt.renderErr) || !usererr.Is(err) {
				t.Fatalf("Render: err = %v, want a user error with %q", err, tt.renderErr)
			}
		})
	}
}

// Real templates' habits still render: a recursive macro of modest
// depth (tool schemas), string building with + and ~, list
// concatenation, range, loops with filters, and multiplication.
func TestGuardKeepsRealTemplatesWorking(t *testing.T) {
	src := `{%- macro render(v, depth) -%}
{%- if v is mapping -%}{ {%- for k, x in v.items() -%}{{ k }}: {{ render(x, depth + 1) }}{{ ', ' if not loop.last }}{%- endfor -%} }
{%- elif v is iterable and v is not string -%}[{%- for x in v -%}{{ render(x, depth + 1) }}{{ ', ' if not loop.last }}{%- endfor -%}]
{%- else -%}{{ v }}{%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(s='', l=[]) -%}
{%- for m in messages -%}{%- set ns.s = ns.s ~ m.role ~ '|' -%}{%- set ns.l = ns.l + [m.role] -%}{%- endfor -%}
{{ ns.s }} {{ ns.l | length }} {{ '-' * 3 }} {{ 2 * 3 + 1 }} {{ 1.5 * 2 }} {{ 'a' + 'b' }}
{%- for i in range(3) %} {{ i }}{% endfor %}
{%- for i in range(10, 0, -4) %} {{ i }}{% endfor %}
{{ render(kw) }}`
	tpl, err := New(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tpl.RenderValues(Values{
		Messages: []any{map[string]any{"role": "system"}, map[string]any{"role": "user"}},
		Kwargs:   map[string]any{"kw": map[string]any{"a": []any{1, map[string]any{"b": []any{2, 3}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "system|user| 2 --- 7 3.0 ab 0 1 2 10 6 2{a: [1, {b: [2, 3]}]}" // trim_blocks eats the newline
	if out != want {
		t.Fatalf("got\n%q\nwant\n%q", out, want)
	}
}

// A recursive loop over data that contains itself recurses without end.
func TestRecursiveLoopOverItself(t *testing.T) {
	tpl, err := New("{% for x in [kw] recursive %}{{ loop(x.c) }}{% endfor %}", Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	m["c"] = []any{m}
	_, err = tpl.RenderValues(Values{Kwargs: map[string]any{"kw": m}})
	if err == nil || !strings.Contains(err.Error(), "recursed too deep") {
		t.Fatalf("err = %v", err)
	}
}

func TestRenderStopsOnCancel(t *testing.T) {
	// Under every bound, but long: cancellation must end it early.
	tpl, err := New("{% for a in range(1000) %}{% for b in range(1000) %}{{ b }}{% endfor %}{% endfor %}", Options{Limits: Limits{MaxSteps: 1 << 40, MaxOutputBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	_, err = tpl.RenderContext(ctx, Input{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// FuzzTemplate varies the template itself, under small bounds: any
// source either fails to parse or renders, with a user error at worst;
// nothing panics, hangs or grows without bound.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{
		`{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}`,
		`{%- set ns = namespace(s='') -%}{%- for m in messages -%}{%- set ns.s = ns.s ~ m.role -%}{%- endfor -%}{{ ns.s * 2 }}`,
		`{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(3) }}`,
		`{{ messages | tojson(indent=2) }}{{ 'a' | center(9) }}{{ range(3) | list }}`,
		`{% for x in [1, [2, [3]]] recursive %}{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}{% endif %}{% endfor %}`,
		`{{ raise_exception('no') }}`, `{{ (((1))) }}`, `{% if %}`, `{{ 'x' * 100 }}`,
	} {
		f.Add(s, "hello")
	}
	f.Fuzz(func(t *testing.T, src, content string) {
		tpl, err := New(src, Options{Limits: Limits{MaxSteps: 20000, MaxOutputBytes: 1 << 16, MaxStackFrames: 4000}})
		if err != nil {
			if !usererr.Is(err) {
				t.Fatalf("New: %v is not a user error", err)
			}
			return
		}
		_, err = tpl.Render(Input{Messages: []episode.Message{{Role: "user", Content: content}}, AddGenerationPrompt: true})
		if err != nil && !usererr.Is(err) {
			t.Fatalf("Render: %v is not a user error", err)
		}
	})
}
