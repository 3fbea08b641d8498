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
		Name:        "bash",
		Description: "runs the model's bash command in the episode's workspace (env.name=task: the task's container), bounded in time and output; files persist between calls",
		Params:      BashParams{},
		New: func(v registry.Values) (Tool, error) {
			return &Bash{Params: registry.As[BashParams](v)}, nil
		},
	})
	MarkWorkspace("bash")
}

// BashParams are the bash tool's arguments (tools.args.bash).
type BashParams struct {
	TimeoutS       float64 `arg:"timeout_s" default:"60" range:"(0,3600]" doc:"wall and CPU seconds of one command (within the agent's time left and tools.call_timeout_s)"`
	MaxOutputChars int     `arg:"max_output_chars" default:"8192" range:"[64,1000000]" doc:"characters of output returned to the model; longer output keeps its start and end"`
}

// bashOutputBytes bounds what one command may print (stdout and stderr
// each) before it is killed.
const bashOutputBytes = 4 << 20

// Bash runs {"command": "..."} with bash -c in the episode's workspace,
// as rLLM's bash and terminus harnesses do: each command starts in the
// task's directory; files, not processes or the shell's state, persist
// between commands. Unbound (no workspace), every call is an error
// result.
type Bash struct {
	Params BashParams
	w      *Workspace
}

// Spec describes the tool to the model.
func (b *Bash) Spec() sampler.Tool {
	return sampler.Tool{Type: "function", Function: sampler.ToolFunction{
		Name: "bash",
		Description: "Run a bash command in the task's Linux container and return its output (stdout, then stderr) and exit status. " +
			"Each command starts in the task's directory; files you write persist between commands. No network.",
		Parameters: json.RawMessage(`{"type": "object", "properties": {"command": {"type": "string", "description": "the bash command (or script) to run"}}, "required": ["command"]}`),
	}}
}

// Bind returns the tool running in w.
func (b *Bash) Bind(w Workspace) Tool {
	return &Bash{Params: b.Params, w: &w}
}

// Call runs the command. A command that fails is a result the model sees
// (with its exit status or the limit it hit); an error is the workspace
// failing, or the agent's time being over.
func (b *Bash) Call(ctx context.Context, arguments string) (Result, error) {
	var in struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal([]byte(arguments), &in); err != nil {
		return Errorf("error: arguments must be a JSON object with a command string: %v", err), nil
	}
	if strings.TrimSpace(in.Command) == "" {
		return Errorf("error: the command is empty"), nil
	}
	if b.w == nil {
		return Errorf("error: the bash tool has no workspace in this episode (it runs in env.name=task's container)"), nil
	}
	limit := time.Duration(b.Params.TimeoutS * float64(time.Second))
	if !b.w.Deadline.IsZero() {
		left := time.Until(b.w.Deadline)
		if left <= 0 {
			return Result{}, b.expired()
		}
		limit = min(limit, left)
	}
	res, err := b.w.WS.Exec(ctx, sandbox.ExecRequest{Command: []string{"bash", "-c", in.Command}, Dir: b.w.Dir, Env: b.w.Env,
		Limits: sandbox.Limits{WallTime: limit, CPUTime: limit, OutputBytes: bashOutputBytes}})
	if err != nil {
		return Result{}, err
	}
	if res.Limit == sandbox.LimitWallTime && !b.w.Deadline.IsZero() && !time.Now().Before(b.w.Deadline) {
		return Result{}, b.expired()
	}
	return Result{Text: truncateMiddle(strings.ToValidUTF8(runOutput(res, true), "\uFFFD"), b.Params.MaxOutputChars), IsError: !res.OK()}, nil
}

func (b *Bash) expired() error {
	if b.w.Expired != nil {
		return b.w.Expired
	}
	return fmt.Errorf("bash: the agent's time is over")
}
