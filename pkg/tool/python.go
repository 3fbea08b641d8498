package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

func init() {
	Register(Definition{
		Name:        "python",
		Description: "code interpreter: runs the model's Python program in the sandbox (sandbox.*), a fresh process each call, and returns its output",
		Params:      PythonParams{},
		// No python tool without a sandbox to run its calls in.
		Validate: func(registry.Values) error {
			_, err := sandbox.Shared(context.Background())
			return err
		},
		New: func(v registry.Values) (Tool, error) {
			pool, err := sandbox.Shared(context.Background())
			if err != nil {
				return nil, err
			}
			return &Python{Runner: pool, Params: registry.As[PythonParams](v)}, nil
		},
	})
}

// PythonParams are the python tool's arguments (tools.args.python).
type PythonParams struct {
	MaxOutputChars int     `arg:"max_output_chars" default:"4096" range:"[64,1000000]" doc:"characters of output returned to the model; longer output keeps its start and end"`
	TimeoutS       float64 `arg:"timeout_s" default:"10" range:"(0,3600]" doc:"wall and CPU seconds of one call (within sandbox.limits)"`
}

// Python runs {"code": "..."} with python3 in the sandbox. No state is
// kept between calls: each is a fresh program in a fresh work directory,
// so the model must repeat the definitions it needs.
type Python struct {
	Runner sandbox.Runner
	Params PythonParams
}

// Spec describes the tool to the model.
func (p *Python) Spec() sampler.Tool {
	return sampler.Tool{Type: "function", Function: sampler.ToolFunction{
		Name:        "python",
		Description: "Run a Python 3 program and return what it prints (stdout, then stderr). Each call starts a fresh interpreter with no network and no files from earlier calls; print what you want to see.",
		Parameters:  json.RawMessage(`{"type": "object", "properties": {"code": {"type": "string", "description": "the complete Python program to run"}}, "required": ["code"]}`),
	}}
}

// Call runs the program. A program that fails is an error result the
// model sees (with its traceback or the limit it hit); an error is the
// sandbox failing.
func (p *Python) Call(ctx context.Context, arguments string) (Result, error) {
	var in struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal([]byte(arguments), &in); err != nil {
		return Errorf("error: arguments must be a JSON object with a code string: %v", err), nil
	}
	t := time.Duration(p.Params.TimeoutS * float64(time.Second))
	res, err := p.Runner.Run(ctx, sandbox.Request{
		Command: []string{"python3", "main.py"},
		Files:   map[string][]byte{"main.py": []byte(in.Code)},
		Limits:  sandbox.Limits{WallTime: t, CPUTime: t},
	})
	if err != nil {
		return Result{}, err
	}
	return Result{Text: truncateMiddle(runOutput(res, false), p.Params.MaxOutputChars), IsError: !res.OK()}, nil
}

// runOutput is what a run shows the model: its stdout, then its stderr,
// then, on a line of its own, the limit it hit or its exit status (that
// one only when it failed, unless always).
func runOutput(res sandbox.Result, always bool) string {
	var b strings.Builder
	b.Write(res.Stdout)
	if len(res.Stderr) > 0 {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		b.Write(res.Stderr)
	}
	if !res.OK() || always {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		if res.OK() {
			b.WriteString("[exit status 0]")
		} else {
			fmt.Fprintf(&b, "[%s]", res.Reason())
		}
	}
	return b.String()
}

// truncateMiddle keeps the first and last parts of s within n characters
// (runes), saying how many were left out.
func truncateMiddle(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n <= 0 {
		return s
	}
	note := fmt.Sprintf("\n[... %d characters left out ...]\n", len(r)-n)
	keep := max(n-len([]rune(note)), 2)
	head := keep / 2
	return string(r[:head]) + note + string(r[len(r)-(keep-head):])
}
