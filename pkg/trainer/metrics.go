package trainer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
)

// metricsSink appends one JSON object per step to
// default_local_dir/metrics.jsonl (logger "jsonl") and echoes steps to the
// log as text or JSON (logger "console").
type metricsSink struct {
	file    *os.File
	w       *bufio.Writer
	console bool
	opts    Options
}

// MetricsFile is the name of the metrics log in trainer.default_local_dir.
const MetricsFile = "metrics.jsonl"

func openMetrics(p *Plan, opts Options, appendToOld bool) (*metricsSink, error) {
	s := &metricsSink{console: p.Cadence.Console, opts: opts}
	if !p.Cadence.JSONL {
		return s, nil
	}
	dir := p.Dir
	if err := os.MkdirAll(dir, atomicfile.DirMode); err != nil {
		return nil, err
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendToOld {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(filepath.Join(dir, MetricsFile), flags, atomicfile.FileMode)
	if err != nil {
		return nil, err
	}
	s.file, s.w = f, bufio.NewWriter(f)
	return s, nil
}

// write records one step's metrics; non-finite values are written as null
// so the file stays valid JSON.
func (s *metricsSink) write(step int, m map[string]float64) {
	line := jsonLine(step, m)
	if s.w != nil {
		s.w.Write(line)
		s.w.Flush()
	}
	if s.console && s.opts.JSON {
		s.opts.Log.Write(line)
	}
}

func jsonLine(step int, m map[string]float64) []byte {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			out[k] = nil
		} else {
			out[k] = v
		}
	}
	out["step"] = step
	b, _ := json.Marshal(out)
	return append(b, '\n')
}

func (s *metricsSink) Close() error {
	if s.file == nil {
		return nil
	}
	s.w.Flush()
	return s.file.Close()
}

// printStep writes the readable one-line summary of a step.
func (t *Trainer) printStep(m map[string]float64) {
	if t.opts.JSON || !t.plan.Cadence.Console {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "step %d/%d", t.step, t.totalSteps)
	fmt.Fprintf(&b, " | score %.3f acc %.3f", m["critic/score/mean"], m["batch/accuracy"])
	if _, ok := m["actor/pg_loss"]; ok {
		fmt.Fprintf(&b, " | pg_loss %+.4f clip %.3f kl %+.4f grad %.3f", m["actor/pg_loss"], m["actor/pg_clipfrac"], m["actor/ppo_kl"], m["actor/grad_norm"])
	} else {
		b.WriteString(" | no update (filtered)")
	}
	fmt.Fprintf(&b, " | resp %.1f tok | %.1fs", m["response_length/mean"], m["timing_s/step"])
	if v, ok := m["val/pass@1"]; ok {
		fmt.Fprintf(&b, " | val pass@1 %.3f", v)
	}
	fmt.Fprintln(t.opts.Log, b.String())
}

// printVal writes a validation result (in JSON mode the step's metric
// object carries it).
func (t *Trainer) printVal(m map[string]float64) {
	if t.opts.JSON {
		return
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		if strings.HasPrefix(k, "val/") {
			parts = append(parts, fmt.Sprintf("%s %.3f", strings.TrimPrefix(k, "val/"), m[k]))
		}
	}
	t.logf("validation at step %d: %s", t.step, strings.Join(parts, ", "))
}

func itoa(n int) string { return strconv.Itoa(n) }
