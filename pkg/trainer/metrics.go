package trainer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/internal/jsonline"
	"github.com/rllm-org/rllm-go/pkg/runs"
)

// metricsSink appends one JSON object per step to
// default_local_dir/metrics.jsonl (logger "jsonl") and echoes steps to the
// log as text or JSON (logger "console").
type metricsSink struct {
	file    *os.File
	w       *bufio.Writer
	console bool
	opts    Options
	// vals are the validations a resumed run kept from before (step
	// order), for the run's summary.
	vals []stepMetrics
}

// stepMetrics is one record of metrics.jsonl.
type stepMetrics struct {
	step int
	m    map[string]float64
}

// MetricsFile is the name of the metrics log in trainer.default_local_dir.
const MetricsFile = runs.MetricsFile

// openMetrics opens metrics.jsonl: a fresh file for a new run; for a
// resumed one (resumedAt ≥ 0) the records up to the checkpoint's step,
// without the steps a crash made the run redo and without a line a kill
// cut short, then appends.
func openMetrics(p *Plan, opts Options, resumedAt int) (*metricsSink, error) {
	s := &metricsSink{console: p.Cadence.Console, opts: opts}
	if !p.Cadence.JSONL {
		return s, nil
	}
	dir := p.Dir
	if err := os.MkdirAll(dir, atomicfile.DirMode); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, MetricsFile)
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if resumedAt >= 0 {
		vals, err := truncateMetrics(path, resumedAt)
		if err != nil {
			return nil, err
		}
		s.vals = vals
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(path, flags, atomicfile.FileMode)
	if err != nil {
		return nil, err
	}
	s.file, s.w = f, bufio.NewWriter(f)
	return s, nil
}

// truncateMetrics rewrites path keeping the complete records whose step is
// at most step, in order, and returns the validations among them.
func truncateMetrics(path string, step int) ([]stepMetrics, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var vals []stepMetrics
	var keep bytes.Buffer
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // a line a kill cut short
		}
		line := b[:i+1]
		b = b[i+1:]
		var rec struct {
			Step *int     `json:"step"`
			Val  *float64 `json:"val/pass@1"`
		}
		if json.Unmarshal(line, &rec) != nil || rec.Step == nil {
			continue
		}
		if *rec.Step <= step {
			keep.Write(line)
			if rec.Val != nil {
				vals = append(vals, stepMetrics{step: *rec.Step, m: numbers(line)})
			}
		}
	}
	return vals, atomicfile.WriteFile(path, keep.Bytes())
}

// numbers are the numeric fields of a metrics.jsonl record.
func numbers(line []byte) map[string]float64 {
	var all map[string]any
	json.Unmarshal(line, &all)
	m := make(map[string]float64, len(all))
	for k, v := range all {
		if f, ok := v.(float64); ok && k != "step" {
			m[k] = f
		}
	}
	return m
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

// warn records a warning as an event line of metrics.jsonl
// ({"step", "event": "warning", "kind", "message"}) and, in JSON mode, on
// the log.
func (s *metricsSink) warn(w Warning) {
	b, _ := jsonline.Marshal(struct {
		Step    int    `json:"step"`
		Event   string `json:"event"`
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}{w.Step, "warning", w.Kind, w.Message})
	if s.w != nil {
		s.w.Write(b)
		s.w.Flush()
	}
	if s.opts.JSON {
		s.opts.Log.Write(b)
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
	b, _ := jsonline.Marshal(out)
	return b
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
	t.say(stepLine(t.step, t.totalSteps, m))
}

// stepLine is the readable summary of a step, about 100 characters: what
// a user watches (reward, accuracy, validation, entropy, KL, time).
func stepLine(step, total int, m map[string]float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d/%d reward %.3f acc %.3f", step, total, m["critic/score/mean"], m["batch/accuracy"])
	if v, ok := m["val/pass@1"]; ok {
		fmt.Fprintf(&b, " val %.3f", v)
	}
	if v, ok := m["actor/entropy"]; ok {
		fmt.Fprintf(&b, " ent %.3f", v)
	}
	if v, ok := m["actor/kl_loss"]; ok {
		fmt.Fprintf(&b, " kl %.2g", v)
	}
	if _, ok := m["actor/pg_loss"]; !ok {
		b.WriteString(" no-update")
	}
	if v, ok := m["async/staleness_mean"]; ok {
		// Both sides of asynchronous training: how stale the trained
		// groups were, and how much of the step each side waited.
		fmt.Fprintf(&b, " stale %.1f idle roll %.0f%% train %.0f%%", v, 100*m["async/rollout_idle_ratio"], 100*m["async/trainer_idle_ratio"])
		if d := m["async/dropped_stale"]; d > 0 {
			fmt.Fprintf(&b, " dropped %.0f", d)
		}
	}
	fmt.Fprintf(&b, " %.1fs", m["timing_s/step"])
	return b.String()
}

// say prints a line of text above any progress bar.
func (t *Trainer) say(line string) {
	if t.opts.Progress != nil {
		t.opts.Progress.Println(line)
		return
	}
	fmt.Fprintln(t.opts.Log, line)
}

// printVal writes a validation result (in JSON mode the step's metric
// object carries it).
func (t *Trainer) printVal(m map[string]float64) {
	if t.opts.JSON {
		return
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if strings.HasPrefix(k, "val/") {
			parts = append(parts, fmt.Sprintf("%s %.3f", strings.TrimPrefix(k, "val/"), m[k]))
		}
	}
	t.logf("validation at step %d: %s", t.step, strings.Join(parts, ", "))
}

func itoa(n int) string { return strconv.Itoa(n) }
