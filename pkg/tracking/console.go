package tracking

import (
	"context"
	"fmt"
	"io"
	"math"

	"github.com/rllm-org/rllm-go/internal/jsonline"
)

// ConsoleOptions say how logger console shows rows: one JSON object per
// line on Out when JSON is set, else the readable line StepLine makes of
// each training step, through Say (above any progress bar).
type ConsoleOptions struct {
	JSON bool
	Out  io.Writer
	// Say prints a line of text; nil prints to Out.
	Say func(line string)
	// StepLine is the readable line of a training step; nil prints none
	// (the command prints its own results).
	StepLine func(r Row) string
}

type consoleSink struct{ o ConsoleOptions }

func newConsole(o ConsoleOptions) *consoleSink {
	if o.Say == nil {
		out := o.Out
		o.Say = func(line string) { fmt.Fprintln(out, line) }
	}
	return &consoleSink{o: o}
}

func (c *consoleSink) Name() string { return Console }

func (c *consoleSink) Log(r Row) {
	switch {
	case c.o.JSON:
		c.o.Out.Write(jsonRow(r.Step, r.Metrics))
	case r.Kind == KindStep && c.o.StepLine != nil:
		c.o.Say(c.o.StepLine(r))
	}
}

// Event prints nothing: warnings are diagnostics, which the program
// prints whatever the loggers (EventLine is their JSON form).
func (c *consoleSink) Event(Event) {}

func (c *consoleSink) Close(context.Context, Summary) error { return nil }

// jsonRow is a row as a metrics.jsonl record: its metrics and "step";
// non-finite values are null, so the line stays JSON.
func jsonRow(step int, m map[string]float64) []byte {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			out[k] = nil
		} else {
			out[k] = v
		}
	}
	out["step"] = step
	b, _ := jsonline.Marshal(out)
	return b
}

// EventLine is a warning as an event record of metrics.jsonl and the
// JSON log: {"step", "event": "warning", "kind", "message"}.
func EventLine(e Event) []byte {
	b, _ := jsonline.Marshal(struct {
		Step    int    `json:"step"`
		Event   string `json:"event"`
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}{e.Step, "warning", e.Kind, e.Message})
	return b
}
