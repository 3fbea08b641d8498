// Package tool defines tools an agent can offer the model (OpenAI function
// tools) and the registry they are selected from by name. Arguments
// arrive as the JSON string the model wrote: untrusted, possibly invalid.
package tool

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/rllm-org/rllm-go/pkg/expr"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// Tool is one callable tool. Call returns the text given back to the
// model; an error is a failure of the tool itself, while a bad call
// (invalid arguments) is reported as text so the model can correct it.
type Tool interface {
	Spec() sampler.Tool
	Call(ctx context.Context, arguments string) (string, error)
}

// Factory builds a tool from its resolved arguments.
type Factory func(args registry.Values) (Tool, error)

// Definition registers a tool.
type Definition = registry.Entry[Factory]

var tools = registry.New[Factory]("tool")

// Register makes a tool selectable by name. Call it from init().
func Register(d Definition) { tools.Register(d) }

// Lookup returns the definition registered under name.
func Lookup(name string) (Definition, error) { return tools.Lookup(name) }

// List describes every registered tool.
func List() []registry.Info { return tools.List() }

// New builds tool name; keyPrefix is the config path of args.
func New(name, keyPrefix string, args map[string]any) (Tool, error) {
	d, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	v, err := d.Resolve(keyPrefix, args)
	if err != nil {
		return nil, err
	}
	return d.New(v)
}

func init() {
	Register(Definition{
		Name:        "calculator",
		Description: "evaluates an arithmetic expression (+ - * / and parentheses) exactly",
		New:         func(registry.Values) (Tool, error) { return Calculator{}, nil },
	})
}

// Calculator evaluates {"expression": "..."} with exact rationals.
type Calculator struct{}

// Spec describes the calculator to the model.
func (Calculator) Spec() sampler.Tool {
	return sampler.Tool{Type: "function", Function: sampler.ToolFunction{
		Name:        "calculator",
		Description: "Evaluate an arithmetic expression with + - * / and parentheses.",
		Parameters:  json.RawMessage(`{"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}`),
	}}
}

// Call evaluates the expression; mistakes come back as text.
func (Calculator) Call(_ context.Context, arguments string) (string, error) {
	var in struct {
		Expression string `json:"expression"`
	}
	if err := json.Unmarshal([]byte(arguments), &in); err != nil {
		return fmt.Sprintf("error: arguments must be a JSON object with an expression string: %v", err), nil
	}
	r, err := expr.Eval(in.Expression)
	if err != nil {
		return "error: " + err.Error(), nil
	}
	return r.Value.RatString(), nil
}
