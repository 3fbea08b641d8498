package code

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rllm-org/rllm-go/internal/anyval"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/reward"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Kind is how a test runs the program.
type Kind string

const (
	// Stdin feeds Input on standard input and compares standard output
	// with Expected line by line (rLLM's LiveCodeBench comparison).
	Stdin Kind = "stdin"
	// Function calls FnName with Args and compares the JSON of the
	// result with Expected (Python ==).
	Function Kind = "function"
	// Program appends Script (asserts, a check() call, a LeetCode
	// harness) to the program; the test passes when it exits 0.
	Program Kind = "program"
)

// Test is one hidden test.
type Test struct {
	Kind     Kind
	Input    string            // Stdin: standard input
	Args     []json.RawMessage // Function: positional arguments
	Expected string            // Stdin: expected output; Function: expected JSON
	FnName   string            // Function
	Script   string            // Program
}

// Show is the test's input as a person reads it (for the episode).
func (t Test) Show() string {
	switch t.Kind {
	case Function:
		parts := make([]string, len(t.Args))
		for i, a := range t.Args {
			parts[i] = string(a)
		}
		return t.FnName + "(" + strings.Join(parts, ", ") + ")"
	case Program:
		return t.Script
	}
	return t.Input
}

// taskName names a task in errors: its id, else its question's start.
func taskName(task episode.Task) string {
	if id, ok := dataset.TaskID(task); ok {
		return "task " + id
	}
	q := question(task)
	if len(q) > 40 {
		q = q[:40] + "…"
	}
	return fmt.Sprintf("task %q", q)
}

func taskErr(task episode.Task, format string, args ...any) error {
	return &usererr.Error{Code: usererr.ExitFailure, Subject: taskName(task), Msg: fmt.Sprintf(format, args...)}
}

// ParseTests reads the hidden tests of a task row in any of rLLM's code
// dataset layouts (see docs/code.md): ground_truth (or verl's
// reward_model.ground_truth) as a JSON string or as values — a list of
// {input, output[, testtype, metadata]} (LiveCodeBench, Codeforces,
// DeepCoder), a TACO/APPS dict {inputs, outputs[, fn_name]}, a LeetCode
// dict {functional}, a HumanEval/KodCode test program (with the row's
// entry_point) or a list of MBPP assert strings. A row it cannot read is
// an error naming the task.
func ParseTests(task episode.Task) ([]Test, error) {
	gt, ok := reward.GroundTruth(task)
	if !ok {
		return nil, taskErr(task, "has no ground_truth (nor reward_model.ground_truth) holding its tests")
	}
	p := parser{task: task, fnName: rowFnName(task)}
	tests, err := p.value(gt, 0)
	if err != nil {
		return nil, err
	}
	if len(tests) == 0 {
		return nil, taskErr(task, "ground_truth holds no tests")
	}
	for i, t := range tests {
		if t.Kind == Function && t.FnName == "" {
			return nil, taskErr(task, "test %d is a function test but nothing names the function; set fn_name in the tests or metadata.func_name in the row", i)
		}
	}
	return tests, nil
}

// rowFnName is the function name a row gives its functional tests:
// fn_name, or metadata.func_name (LiveCodeBench; rLLM's
// scripts/data/code_dataset.py copies it into each test).
func rowFnName(task episode.Task) string {
	if s, ok := task["fn_name"].(string); ok && s != "" {
		return s
	}
	md := task["metadata"]
	if s, ok := md.(string); ok {
		var m map[string]any
		if json.Unmarshal([]byte(s), &m) == nil {
			md = m
		}
	}
	if m, ok := md.(map[string]any); ok {
		if s, ok := m["func_name"].(string); ok {
			return s
		}
	}
	return ""
}

type parser struct {
	task   episode.Task
	fnName string
}

func (p parser) value(v any, depth int) ([]Test, error) {
	if depth > 3 {
		return nil, taskErr(p.task, "ground_truth nests tests too deeply")
	}
	switch x := v.(type) {
	case string:
		s := strings.TrimSpace(x)
		if strings.HasPrefix(s, "[") || strings.HasPrefix(s, "{") {
			var dec any
			if err := json.Unmarshal([]byte(s), &dec); err == nil {
				return p.value(dec, depth+1)
			} else if !looksLikeCode(s) {
				return nil, taskErr(p.task, "ground_truth is not valid JSON: %v", err)
			}
		}
		if s == "" {
			return nil, taskErr(p.task, "ground_truth is empty")
		}
		return []Test{p.program(x)}, nil
	case []any:
		var out []Test
		for i, e := range x {
			switch y := e.(type) {
			case string:
				out = append(out, p.program(y))
			case map[string]any:
				ts, err := p.dict(y, depth)
				if err != nil {
					return nil, err
				}
				out = append(out, ts...)
			default:
				return nil, taskErr(p.task, "ground_truth[%d] is %s; a test is an {input, output} object or an assert string", i, anyval.Kind(e))
			}
		}
		return out, nil
	case map[string]any:
		return p.dict(x, depth)
	}
	return nil, taskErr(p.task, "ground_truth is %s; tests are a list, an {inputs, outputs} object or test code", anyval.Kind(v))
}

func looksLikeCode(s string) bool {
	return strings.Contains(s, "assert") || strings.Contains(s, "def ")
}

// program is an assert/check test: HumanEval's check(candidate) is
// called on the row's entry_point when the test does not call it.
func (p parser) program(script string) Test {
	if strings.Contains(script, "def check(") && !strings.Contains(script, "\ncheck(") {
		if ep, ok := p.task["entry_point"].(string); ok && ep != "" {
			script += "\n\ncheck(" + ep + ")\n"
		}
	}
	return Test{Kind: Program, Script: script}
}

func (p parser) dict(m map[string]any, depth int) ([]Test, error) {
	if f, ok := m["functional"].(string); ok { // LeetCode
		return []Test{{Kind: Program, Script: f}}, nil
	}
	if _, ok := m["inputs"]; ok { // TACO / APPS / code_contests
		return p.taco(m)
	}
	in, hasIn := m["input"]
	out, hasOut := m["output"]
	if !hasIn || !hasOut {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		return nil, taskErr(p.task, "a test object has keys %v; use {input, output} or {inputs, outputs, fn_name}", keys)
	}
	inS, ok1 := in.(string)
	outS, ok2 := out.(string)
	if !ok1 || !ok2 {
		return nil, taskErr(p.task, "a test's input and output must be strings, not %s and %s", anyval.Kind(in), anyval.Kind(out))
	}
	if tt, _ := m["testtype"].(string); tt == "functional" {
		fn := p.fnName
		if md, ok := m["metadata"].(map[string]any); ok {
			if s, ok := md["func_name"].(string); ok && s != "" {
				fn = s
			}
		}
		var args []json.RawMessage
		for i, line := range strings.Split(inS, "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			if !json.Valid([]byte(line)) {
				return nil, taskErr(p.task, "a functional test's input line %d is not JSON: %q", i+1, clip(line, 60))
			}
			args = append(args, json.RawMessage(line))
		}
		if !json.Valid([]byte(outS)) {
			return nil, taskErr(p.task, "a functional test's output is not JSON: %q", clip(outS, 60))
		}
		return []Test{{Kind: Function, FnName: fn, Args: args, Expected: outS}}, nil
	}
	return []Test{{Kind: Stdin, Input: inS, Expected: outS}}, nil
}

// taco reads {inputs, outputs[, fn_name]}. Call-based outputs are
// wrapped in a list and rLLM compares the first element.
func (p parser) taco(m map[string]any) ([]Test, error) {
	ins, ok1 := m["inputs"].([]any)
	outs, ok2 := m["outputs"].([]any)
	if !ok1 || !ok2 {
		return nil, taskErr(p.task, "inputs and outputs must both be arrays, not %s and %s", anyval.Kind(m["inputs"]), anyval.Kind(m["outputs"]))
	}
	if len(ins) != len(outs) {
		return nil, taskErr(p.task, "has %d inputs but %d outputs", len(ins), len(outs))
	}
	fn, _ := m["fn_name"].(string)
	if _, has := m["fn_name"]; has && fn == "" {
		return nil, taskErr(p.task, "fn_name must be a non-empty string")
	}
	out := make([]Test, 0, len(ins))
	for i := range ins {
		if fn == "" {
			in, ok := ins[i].(string)
			if !ok {
				return nil, taskErr(p.task, "inputs[%d] is %s; stdin tests take strings (add fn_name for function tests)", i, anyval.Kind(ins[i]))
			}
			out = append(out, Test{Kind: Stdin, Input: in, Expected: joinLines(outs[i])})
			continue
		}
		argList, ok := ins[i].([]any)
		if !ok {
			argList = []any{ins[i]}
		}
		args := make([]json.RawMessage, len(argList))
		for j, a := range argList {
			b, err := json.Marshal(a)
			if err != nil {
				return nil, taskErr(p.task, "inputs[%d][%d]: %v", i, j, err)
			}
			args[j] = b
		}
		want := outs[i]
		if l, ok := want.([]any); ok && len(l) > 0 {
			want = l[0]
		}
		b, err := json.Marshal(want)
		if err != nil {
			return nil, taskErr(p.task, "outputs[%d]: %v", i, err)
		}
		out = append(out, Test{Kind: Function, FnName: fn, Args: args, Expected: string(b)})
	}
	return out, nil
}

// joinLines turns a TACO output given as a list of lines into text.
func joinLines(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = fmt.Sprint(e)
		}
		return strings.Join(parts, "\n")
	}
	return fmt.Sprint(v)
}

// clip shortens s to n bytes (at a rune boundary) with a mark.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("… (%d bytes)", len(s))
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// question is the task's text: question, problem, prompt or
// question_content (LiveCodeBench).
func question(task episode.Task) string {
	for _, k := range []string{"question", "problem", "prompt", "question_content", "description"} {
		if s, ok := task[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}
