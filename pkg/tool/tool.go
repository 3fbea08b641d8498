// Package tool defines tools an agent can offer the model (OpenAI function
// tools): built-in ones selected by name from the registry here, and the
// tools of MCP servers (stdio or streamable HTTP, through the official MCP
// Go SDK). A Set gathers the configured tools under their own names and
// calls them with a timeout. Arguments arrive as the JSON string the model
// wrote: untrusted, possibly invalid; a bad call is an error result the
// model sees, never a crash.
package tool

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/rllm-org/rllm-go/pkg/expr"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// Result is what a call gives back to the model. IsError marks a call
// that failed in a way the model may correct (bad arguments, a tool's own
// error): MCP's isError.
type Result struct {
	Text    string `json:"text"`
	IsError bool   `json:"is_error,omitempty"`
}

// Errorf is an error result.
func Errorf(format string, args ...any) Result {
	return Result{Text: fmt.Sprintf(format, args...), IsError: true}
}

// Tool is one callable tool. Call returns the result given back to the
// model; an error is a failure of the tool itself (a lost connection, a
// crashed server), which ends the episode.
type Tool interface {
	Spec() sampler.Tool
	Call(ctx context.Context, arguments string) (Result, error)
}

// Factory builds a tool from its resolved arguments.
type Factory func(args registry.Values) (Tool, error)

// Definition registers a tool.
type Definition = registry.Entry[Factory]

// Registry holds the built-in tools selectable by name (tools.builtin).
var Registry = registry.New[Factory]("tool")

// Register makes a tool selectable by name. Call it from init().
func Register(d Definition) { Registry.Register(d) }

func init() {
	Register(Definition{
		Name:        "calculator",
		Description: "evaluates an arithmetic expression (+ - * / and parentheses) exactly, with big rationals",
		New:         func(registry.Values) (Tool, error) { return Calculator{}, nil },
	})
}

// Calculator evaluates {"expression": "..."} with exact rationals: no
// rounding and no overflow, however large the numbers.
type Calculator struct{}

// Spec describes the calculator to the model.
func (Calculator) Spec() sampler.Tool {
	return sampler.Tool{Type: "function", Function: sampler.ToolFunction{
		Name:        "calculator",
		Description: "Evaluate an arithmetic expression with + - * / and parentheses, exactly.",
		Parameters:  json.RawMessage(`{"type": "object", "properties": {"expression": {"type": "string", "description": "e.g. (12345678901234567890 + 1) / 3"}}, "required": ["expression"]}`),
	}}
}

// Call evaluates the expression; mistakes are error results.
func (Calculator) Call(_ context.Context, arguments string) (Result, error) {
	var in struct {
		Expression string `json:"expression"`
	}
	if err := json.Unmarshal([]byte(arguments), &in); err != nil {
		return Errorf("error: arguments must be a JSON object with an expression string: %v", err), nil
	}
	r, err := expr.Eval(in.Expression)
	if err != nil {
		return Errorf("error: %v", err), nil
	}
	return Result{Text: r.Value.RatString()}, nil
}
