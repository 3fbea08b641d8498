// Package chattemplate renders a model's own Jinja chat template (from
// tokenizer_config.json) for a conversation, as transformers'
// apply_chat_template and vLLM do, so that rllm builds the very prompt
// text, and hence token ids, the model was trained on.
//
// Templates run on the gonja engine, set up the way transformers sets up
// Jinja (trim_blocks, lstrip_blocks) and with the extras HF templates use:
// a Python-exact `tojson`, `raise_exception`, `strftime_now`, and Python's
// str.strip/lstrip/rstrip semantics.
package chattemplate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Error is a template that does not parse, or a conversation the template
// refuses (its raise_exception), or a template that exceeds its bounds:
// something the user can fix. Exit code 2.
type Error = usererr.Error

func templateError(format string, args ...any) *Error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

// Options set what a template sees besides the conversation.
type Options struct {
	// SpecialTokens are the special token strings by their template names
	// (bos_token, eos_token, pad_token, unk_token), as tokenizer_config.json
	// defines them.
	SpecialTokens map[string]string
	// Now is the clock for strftime_now (templates print today's date);
	// nil means time.Now.
	Now func() time.Time
	// Limits bound what a template may do; zero fields take defaults.
	Limits Limits
}

// Template is a parsed chat template; safe for concurrent Render calls.
type Template struct {
	tpl  *exec.Template
	opts Options
}

// Input is one conversation to render.
type Input struct {
	Messages []episode.Message
	Tools    []sampler.Tool
	// AddGenerationPrompt appends the header that starts the assistant's
	// reply (vLLM's default for chat requests).
	AddGenerationPrompt bool
	// Kwargs are chat_template_kwargs, e.g. {"enable_thinking": false};
	// they become template variables.
	Kwargs map[string]any
}

// Values is Input in the generic form templates consume, for callers
// whose messages or tools come as JSON (see DecodeJSON).
type Values struct {
	Messages            []any
	Tools               []any
	AddGenerationPrompt bool
	Kwargs              map[string]any
}

// New parses a template.
func New(source string, opts Options) (t *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, templateError("chat template does not parse: %v", r)
		}
	}()
	opts.Limits = opts.Limits.withDefaults()
	if err := checkSource(source, opts.Limits); err != nil {
		return nil, templateError("chat template refused: %v", err)
	}
	loader, err := loaders.NewFileSystemLoader("")
	if err != nil {
		return nil, err
	}
	root, err := loaders.NewShiftedLoader("chat_template", strings.NewReader(source), loader)
	if err != nil {
		return nil, err
	}
	tpl, err := exec.NewTemplate("chat_template", jinjaConfig(), root, environment())
	if err != nil {
		return nil, templateError("chat template does not parse: %s", oneLine(err.Error()))
	}
	rewrite(tpl.Root())
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Template{tpl: tpl, opts: opts}, nil
}

// jinjaConfig mirrors transformers' ImmutableSandboxedEnvironment(
// trim_blocks=True, lstrip_blocks=True).
func jinjaConfig() *config.Config {
	c := gonja.DefaultConfig.Inherit()
	c.TrimBlocks = true
	c.LeftStripBlocks = true
	c.KeepTrailingNewline = false
	c.AutoEscape = false
	return c
}

// environment is gonja's default one with the HF extras; built per
// template so nothing global is mutated.
func environment() *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{})
	filters.Update(builtins.Filters)
	filters.Update(exec.NewFilterSet(map[string]exec.FilterFunction{"tojson": filterToJSON}))
	methods := builtins.Methods
	methods.Str = pythonStrMethods(builtins.Methods.Str)
	methods.Dict = orderedDictMethods(builtins.Methods.Dict)
	ctx := gonja.DefaultContext.Inherit()
	ctx.Set("range", boundedRange)
	return &exec.Environment{
		Context:           ctx,
		Filters:           guardFilters(filters),
		Tests:             builtins.Tests,
		ControlStructures: controlStructureSet(),
		Methods:           methods,
	}
}

// Render renders a conversation.
func (t *Template) Render(in Input) (string, error) {
	return t.RenderContext(context.Background(), in)
}

// RenderContext renders a conversation, stopping when ctx is cancelled.
func (t *Template) RenderContext(ctx context.Context, in Input) (string, error) {
	v := Values{AddGenerationPrompt: in.AddGenerationPrompt, Kwargs: in.Kwargs}
	v.Messages = make([]any, len(in.Messages))
	for i, m := range in.Messages {
		v.Messages[i] = MessageValue(m)
	}
	for _, tool := range in.Tools {
		tv, err := ToolValue(tool)
		if err != nil {
			return "", err
		}
		v.Tools = append(v.Tools, tv)
	}
	return t.RenderValuesContext(ctx, v)
}

// raised carries a raise_exception message out of the engine.
type raised struct{ msg string }

// RenderValues renders messages and tools given as generic values.
func (t *Template) RenderValues(in Values) (out string, err error) {
	return t.RenderValuesContext(context.Background(), in)
}

// RenderValuesContext is RenderValues stopping when ctx is cancelled.
func (t *Template) RenderValuesContext(ctx context.Context, in Values) (out string, err error) {
	var raisedMsg *raised
	g := &guard{ctx: ctx, limits: t.opts.Limits}
	defer func() {
		if r := recover(); r != nil {
			if a, ok := r.(abort); ok {
				out, err = "", guardError(ctx, a.err)
				return
			}
			out, err = "", templateError("chat template failed: %v", r)
		}
	}()
	data := map[string]any{guardKey: g}
	for k, v := range t.opts.SpecialTokens {
		data[k] = v
	}
	maps.Copy(data, in.Kwargs)
	data["messages"] = orEmpty(in.Messages)
	if in.Tools != nil {
		data["tools"] = in.Tools
	} else {
		data["tools"] = nil
	}
	data["add_generation_prompt"] = in.AddGenerationPrompt
	data["raise_exception"] = func(_ *exec.Evaluator, params *exec.VarArgs) *exec.Value {
		msg := "raise_exception called"
		if len(params.Args) > 0 {
			msg = params.Args[0].String()
		}
		raisedMsg = &raised{msg: msg}
		return exec.AsValue(errors.New(msg))
	}
	now := t.opts.Now
	data["strftime_now"] = func(_ *exec.Evaluator, params *exec.VarArgs) *exec.Value {
		if len(params.Args) != 1 || !params.Args[0].IsString() {
			return exec.AsValue(errors.New("strftime_now takes one format string"))
		}
		return exec.AsValue(strftime(now(), params.Args[0].String()))
	}
	var b strings.Builder
	err = t.tpl.Execute(&guardedWriter{g: g, w: &b}, exec.NewContext(data))
	if g.err != nil { // a bound reached inside a call gonja turned into an error
		return "", guardError(ctx, g.err)
	}
	if err != nil {
		if raisedMsg != nil {
			return "", templateError("chat template refused the conversation: %s", raisedMsg.msg)
		}
		return "", templateError("chat template failed: %s", oneLine(err.Error()))
	}
	return b.String(), nil
}

// guardedWriter counts the output against the bound before keeping it.
type guardedWriter struct {
	g *guard
	w *strings.Builder
}

func (w *guardedWriter) Write(p []byte) (int, error) {
	w.g.Write(p)
	return w.w.Write(p)
}

// guardError is the context's own error when the render was cancelled,
// else a user error naming the bound.
func guardError(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return err
	}
	return templateError("chat template stopped: %v", err)
}

func orEmpty(l []any) []any {
	if l == nil {
		return []any{}
	}
	return l
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys).
func filterToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	j := newPyJSON()
	for name, v := range params.KwArgs {
		switch name {
		case "indent":
			if err := j.setIndent(v); err != nil {
				return exec.AsValue(err)
			}
		case "sort_keys":
			j.sortKeys = v.IsTrue()
		case "ensure_ascii":
			j.ensureASCII = v.IsTrue()
		case "separators":
			if !v.IsList() || v.Len() != 2 {
				return exec.AsValue(errors.New("tojson: separators must be a pair of strings"))
			}
			a, _ := v.GetItem(0)
			b, _ := v.GetItem(1)
			j.itemSep, j.keySep = a.String(), b.String()
		default:
			return exec.AsValue(fmt.Errorf("tojson: unknown argument %q", name))
		}
	}
	if len(params.Args) > 0 {
		if err := j.setIndent(params.Args[0]); err != nil {
			return exec.AsValue(err)
		}
	}
	if err := j.write(in); err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(j.b.String())
}

func (j *pyJSON) setIndent(v *exec.Value) error {
	switch {
	case v.IsNil():
		return nil
	case v.IsInteger():
		j.indent = strings.Repeat(" ", max(v.Integer(), 0))
	case v.IsString():
		j.indent = v.String()
	default:
		return errors.New("tojson: indent must be an integer or a string")
	}
	j.pretty = true
	if j.itemSep == ", " {
		j.itemSep = ","
	}
	return nil
}
