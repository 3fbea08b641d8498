package chattemplate

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"unsafe"

	"github.com/nikolalohinski/gonja/v2/builtins"
	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// Templates come from downloaded model repositories, so a template is
// input to bound like any other: it must not crash the process (Go's
// stack overflow is fatal, not a panic), exhaust memory or ignore
// Ctrl-C. The bounds are far above what real chat templates use.
//
// Before parsing, the source is checked lexically: its size, the nesting
// of brackets inside one tag, the operators in one tag and the nesting of
// blocks (the parser recurses on each). While rendering, every call,
// loop, string or list operation, filter and write counts as a step, and
// checks the context and the depth of the Go stack; strings and lists
// built by *, + and ~, range() and the output are bounded in size.
type Limits struct {
	// MaxSourceBytes bounds the template text (default 1 MiB).
	MaxSourceBytes int
	// MaxNesting bounds brackets inside a tag and nested blocks (64).
	MaxNesting int
	// MaxOperators bounds the operators of one tag (1000).
	MaxOperators int
	// MaxSteps bounds the work of one render (default 2,000,000).
	MaxSteps int64
	// MaxOutputBytes bounds the rendered text and any string or list a
	// template builds (default 8 MiB).
	MaxOutputBytes int
	// MaxStackFrames bounds the Go stack while rendering, which bounds
	// macro and loop recursion (default 20,000 frames, a few MB).
	MaxStackFrames int
}

func (l Limits) withDefaults() Limits {
	if l.MaxSourceBytes <= 0 {
		l.MaxSourceBytes = 1 << 20
	}
	if l.MaxNesting <= 0 {
		l.MaxNesting = 64
	}
	if l.MaxOperators <= 0 {
		l.MaxOperators = 1000
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = 2_000_000
	}
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = 8 << 20
	}
	if l.MaxStackFrames <= 0 {
		l.MaxStackFrames = 20000
	}
	return l
}

// checkSource refuses a template whose shape alone would make the parser
// recurse too deep: brackets nested in one tag, operator chains, nested
// blocks.
func checkSource(src string, l Limits) error {
	if len(src) > l.MaxSourceBytes {
		return fmt.Errorf("the template is %d bytes, more than the limit of %d", len(src), l.MaxSourceBytes)
	}
	line := 1
	blocks := 0
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c == '\n' {
			line++
			continue
		}
		if c != '{' || i+1 >= len(src) {
			continue
		}
		open := src[i+1]
		var end string
		switch open {
		case '{':
			end = "}}"
		case '%':
			end = "%}"
		case '#':
			end = "#}"
		default:
			continue
		}
		start := i + 2
		j := start
		depth, ops := 0, 0
		var quote byte
	scan:
		for ; j < len(src); j++ {
			c := src[j]
			switch {
			case c == '\n':
				line++
			case quote != 0:
				if c == '\\' {
					j++
				} else if c == quote {
					quote = 0
				}
			case open == '#':
				if strings.HasPrefix(src[j:], end) {
					break scan
				}
			case c == '\'' || c == '"':
				quote = c
			case c == '(' || c == '[' || c == '{':
				depth++
				if depth > l.MaxNesting {
					return fmt.Errorf("line %d: brackets nested more than %d deep", line, l.MaxNesting)
				}
			case c == ')' || c == ']' || c == '}':
				if depth == 0 && strings.HasPrefix(src[j:], end) {
					break scan
				}
				depth = max(depth-1, 0)
			case strings.HasPrefix(src[j:], end) && depth == 0:
				break scan
			case strings.IndexByte("+-*/%~<>=!|.,", c) >= 0 || isWordOp(src, j):
				ops++
				if ops > l.MaxOperators {
					return fmt.Errorf("line %d: more than %d operators in one tag", line, l.MaxOperators)
				}
			}
		}
		if open == '%' {
			switch blockKind(src[start:min(j, len(src))]) {
			case 1:
				blocks++
				if blocks > l.MaxNesting {
					return fmt.Errorf("line %d: blocks nested more than %d deep", line, l.MaxNesting)
				}
			case -1:
				blocks = max(blocks-1, 0)
			}
		}
		i = j + 1
	}
	return nil
}

// isWordOp reports a "not", "and", "or", "in" or "is" starting at j.
func isWordOp(s string, j int) bool {
	if j > 0 && isIdent(s[j-1]) {
		return false
	}
	for _, w := range []string{"not", "and", "or", "in", "is"} {
		if strings.HasPrefix(s[j:], w) && (j+len(w) == len(s) || !isIdent(s[j+len(w)])) {
			return true
		}
	}
	return false
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// blockKind is 1 for a tag that opens a block, -1 for one that closes it.
func blockKind(tag string) int {
	f := strings.Fields(strings.Trim(tag, "-+ \t\r\n"))
	if len(f) == 0 {
		return 0
	}
	switch w := f[0]; {
	case strings.HasPrefix(w, "end"):
		return -1
	case w == "set":
		if !strings.Contains(tag, "=") {
			return 1 // {% set x %}...{% endset %}
		}
	case w == "if", w == "for", w == "macro", w == "call", w == "filter", w == "with", w == "raw", w == "block", w == "autoescape", w == "trans":
		return 1
	}
	return 0
}

// guard is the state of one render's bounds; it sits in the render's
// context under guardKey.
type guard struct {
	ctx    context.Context
	limits Limits
	steps  int64
	out    int
	err    error
}

const guardKey = "__rllm_guard"

// abort carries a bound's error out of the engine as a panic, which
// RenderValues recovers.
type abort struct{ err error }

func (g *guard) fail(err error) {
	g.err = err
	panic(abort{err})
}

// step counts n units of work and, now and then, checks the context and
// the stack.
func (g *guard) step(n int64) {
	before := g.steps
	g.steps += n
	if g.steps > g.limits.MaxSteps {
		g.fail(fmt.Errorf("the template did more than %d steps of work (a loop without end?)", g.limits.MaxSteps))
	}
	if before>>8 != g.steps>>8 {
		if err := g.ctx.Err(); err != nil {
			g.fail(err)
		}
	}
}

// deep checks the Go stack's depth; it costs a walk of the stack, so it
// runs on calls, where recursion happens.
func (g *guard) deep() {
	var pc [1]uintptr
	if runtime.Callers(g.limits.MaxStackFrames, pc[:]) > 0 {
		g.fail(fmt.Errorf("the template recursed too deep (over %d stack frames): a macro or recursive loop calls itself without end?", g.limits.MaxStackFrames))
	}
}

func (g *guard) size(n int, what string) {
	if n > g.limits.MaxOutputBytes {
		g.fail(fmt.Errorf("the template built %s of %d elements or bytes, more than the limit of %d", what, n, g.limits.MaxOutputBytes))
	}
}

// Write counts the output.
func (g *guard) Write(p []byte) (int, error) {
	g.out += len(p)
	if g.out > g.limits.MaxOutputBytes {
		g.fail(fmt.Errorf("the template's output is larger than the limit of %d bytes", g.limits.MaxOutputBytes))
	}
	g.step(1)
	return len(p), nil
}

func guardOf(e *exec.Evaluator) *guard {
	if e != nil && e.Environment != nil && e.Environment.Context != nil {
		if v, ok := e.Environment.Context.Get(guardKey); ok {
			if g, ok := v.(*guard); ok {
				return g
			}
		}
	}
	return nil
}

// Names of the filters the rewritten template calls.
const (
	filterCall  = "__rllm_call"
	filterIter  = "__rllm_iter"
	filterBinop = "__rllm_binop"
)

// guardFilters wrap every filter with a step and a bound on integer
// arguments (widths, counts), and add the filters the rewrite inserts.
func guardFilters(base *exec.FilterSet) *exec.FilterSet {
	out := exec.NewFilterSet(map[string]exec.FilterFunction{})
	for _, name := range filterNames(base) {
		fn, _ := base.Get(name)
		out.Update(exec.NewFilterSet(map[string]exec.FilterFunction{name: guardedFilter(name, fn)}))
	}
	out.Update(exec.NewFilterSet(map[string]exec.FilterFunction{
		filterCall:  callFilter,
		filterIter:  iterFilter,
		filterBinop: binopFilter,
	}))
	return out
}

// filterNames lists a filter set's names (gonja does not export them).
func filterNames(fs *exec.FilterSet) []string {
	m := reflect.ValueOf(fs).Elem().FieldByName("filters")
	names := make([]string, 0, m.Len())
	for _, k := range m.MapKeys() {
		names = append(names, k.String())
	}
	return names
}

func guardedFilter(name string, fn exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		if g := guardOf(e); g != nil {
			g.step(1)
			for _, a := range params.Args {
				checkIntArg(g, name, a)
			}
			for _, a := range params.KwArgs {
				checkIntArg(g, name, a)
			}
			out := fn(e, in, params)
			if out != nil && out.IsString() {
				g.size(len(out.String()), "a string")
			}
			return out
		}
		return fn(e, in, params)
	}
}

func checkIntArg(g *guard, filter string, v *exec.Value) {
	if v != nil && v.IsInteger() && v.Integer() > g.limits.MaxOutputBytes {
		g.fail(fmt.Errorf("filter %s got the argument %d, more than the limit of %d", filter, v.Integer(), g.limits.MaxOutputBytes))
	}
}

// callFilter runs before every call of a named function or macro: the
// place where recursion happens.
func callFilter(e *exec.Evaluator, in *exec.Value, _ *exec.VarArgs) *exec.Value {
	if g := guardOf(e); g != nil {
		g.step(1)
		g.deep()
	}
	return in
}

// iterFilter charges a loop for its items before it runs.
func iterFilter(e *exec.Evaluator, in *exec.Value, _ *exec.VarArgs) *exec.Value {
	if g := guardOf(e); g != nil && !in.IsError() {
		g.step(1)
		if in.IsList() || in.IsDict() || in.IsString() {
			g.step(int64(in.Len()))
		}
		g.deep()
	}
	return in
}

// binopFilter is left op right for +, * and ~, with gonja's semantics,
// refusing strings and lists larger than the bound before building them.
func binopFilter(e *exec.Evaluator, left *exec.Value, params *exec.VarArgs) *exec.Value {
	if left.IsError() {
		return left
	}
	right, op := params.Args[0], params.Args[1].String()
	g := guardOf(e)
	if g != nil {
		g.step(1)
	}
	bound := func(n int, what string) {
		if g != nil {
			g.size(n, what)
		}
	}
	switch op {
	case "+":
		if left.IsList() {
			if !right.IsList() {
				return exec.AsValue(fmt.Errorf("unable to concatenate list to %s", right.String()))
			}
			bound(left.Len()+right.Len(), "a list")
			out := make([]any, 0, left.Len()+right.Len())
			out = appendItems(out, left)
			return exec.AsValue(appendItems(out, right))
		}
		if left.IsFloat() || right.IsFloat() {
			return exec.AsValue(left.Float() + right.Float())
		}
		if left.IsString() || right.IsString() {
			bound(len(left.String())+len(right.String()), "a string")
			return exec.AsValue(left.String() + right.String())
		}
		return exec.AsValue(left.Integer() + right.Integer())
	case "*":
		if left.IsFloat() || right.IsFloat() {
			return exec.AsValue(left.Float() * right.Float())
		}
		if left.IsString() {
			n := max(right.Integer(), 0)
			if s := left.String(); len(s) > 0 && n > g.limitOr()/len(s) {
				bound(g.limitOr()+1, "a string")
			}
			return exec.AsValue(strings.Repeat(left.String(), n))
		}
		return exec.AsValue(left.Integer() * right.Integer())
	default: // "~"
		bound(len(left.String())+len(right.String()), "a string")
		return exec.AsValue(left.String() + right.String())
	}
}

func (g *guard) limitOr() int {
	if g == nil {
		return 8 << 20
	}
	return g.limits.MaxOutputBytes
}

func appendItems(out []any, v *exec.Value) []any {
	rv := reflect.ValueOf(v.Interface())
	for i := 0; i < rv.Len(); i++ {
		out = append(out, rv.Index(i).Interface())
	}
	return out
}

// boundedRange is Python's range() as a list, charged to the render and
// bounded in length.
func boundedRange(e *exec.Evaluator, params *exec.VarArgs) ([]int, error) {
	start, stop, step := 0, 0, 1
	ints := make([]int, len(params.Args))
	for i, a := range params.Args {
		if !a.IsInteger() {
			return nil, exec.ErrInvalidCall(errors.New("expected signature is [start, ]stop[, step] where all arguments are integers"))
		}
		ints[i] = a.Integer()
	}
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return nil, exec.ErrInvalidCall(errors.New("expected signature is [start, ]stop[, step] where all arguments are integers"))
	}
	if step == 0 {
		return nil, exec.ErrInvalidCall(errors.New("step cannot be 0"))
	}
	n := 0
	if step > 0 && stop > start {
		n = (stop - start + step - 1) / step
	} else if step < 0 && stop < start {
		n = (start - stop - step - 1) / -step
	}
	if g := guardOf(e); g != nil {
		g.size(n, "a range")
		g.step(int64(n))
	}
	out := make([]int, n)
	for i := range out {
		out[i] = start + i*step
	}
	return out, nil
}

// controlStructureSet is gonja's without the tags that read other files
// (include, import, from, extends: a template has no business reading
// the disk) and with loops rewritten to charge their items.
func controlStructureSet() *exec.ControlStructureSet {
	all := map[string]parser.ControlStructureParser{}
	for _, name := range []string{"autoescape", "block", "filter", "for", "if", "macro", "raw", "set", "with", "do", "break", "continue", "trans", "call"} {
		p, ok := builtins.ControlStructures.Get(name)
		if !ok {
			continue
		}
		if name == "for" {
			inner := p
			p = func(pa *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
				cs, err := inner(pa, args)
				if f, ok := cs.(*controlStructures.ForControlStructure); ok && err == nil {
					f.ObjectEvaluator = withFilter(f.ObjectEvaluator, filterIter, nil, pa.Current())
				}
				return cs, err
			}
		}
		all[name] = p
	}
	return exec.NewControlStructureSet(all)
}

// withFilter is expr|name(args...).
func withFilter(expr nodes.Expression, name string, args []nodes.Expression, tok *tokens.Token) nodes.Expression {
	if tok == nil {
		tok = &tokens.Token{Val: name}
	}
	return &nodes.FilteredExpression{Expression: expr, Filters: []*nodes.FilterCall{{Token: tok, Name: name, Args: args, Kwargs: map[string]nodes.Expression{}}}}
}

// rewrite walks a parsed template and routes the operations the guard
// must see through its filters: calls of named functions and macros, and
// the +, * and ~ operators.
func rewrite(root *nodes.Template) {
	seen := map[uintptr]bool{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() || seen[v.Pointer()] {
				return
			}
			seen[v.Pointer()] = true
			walk(v.Elem())
		case reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
				if v.CanSet() {
					if r := replacement(v.Elem()); r != nil {
						v.Set(reflect.ValueOf(r))
					}
				}
			}
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				f := v.Field(i)
				if !v.Type().Field(i).IsExported() {
					if !f.CanAddr() {
						continue
					}
					// gonja keeps most control structures' expressions in
					// unexported fields ({% set %}, {% if %}...).
					f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
				}
				walk(f)
			}
		case reflect.Slice, reflect.Array:
			for i := 0; i < v.Len(); i++ {
				walk(v.Index(i))
			}
		case reflect.Map:
			for _, k := range v.MapKeys() {
				e := v.MapIndex(k)
				walk(e)
				if e.Kind() == reflect.Interface && !e.IsNil() {
					if r := replacement(e.Elem()); r != nil {
						v.SetMapIndex(k, reflect.ValueOf(r))
					}
				}
			}
		}
	}
	walk(reflect.ValueOf(root))
}

// replacement is what node becomes, or nil to keep it.
func replacement(v reflect.Value) nodes.Expression {
	switch n := v.Interface().(type) {
	case *nodes.BinaryExpression:
		var op string
		switch n.Operator.Token.Type {
		case tokens.Addition:
			op = "+"
		case tokens.Multiply:
			op = "*"
		case tokens.Tilde:
			op = "~"
		default:
			return nil
		}
		tok := n.Operator.Token
		return withFilter(n.Left, filterBinop, []nodes.Expression{n.Right, &nodes.String{Location: tok, Val: op}}, tok)
	case *nodes.Call:
		if name, ok := n.Func.(*nodes.Name); ok {
			n.Func = withFilter(name, filterCall, nil, name.Name)
		}
	}
	return nil
}
