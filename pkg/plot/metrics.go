// Package plot draws a training run's metrics as PNG charts (gonum.org/v1/plot):
// training reward, validation pass@1 per data source, loss, entropy, KL and
// response length against the step, several runs overlaid. It reads
// metrics.jsonl as pkg/trainer writes it: one JSON object per step with
// "step" and the metric keys (null for a non-finite value).
package plot

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// MetricsFile is the name of the metrics log in a run directory.
const MetricsFile = "metrics.jsonl"

// Record is one step's metrics; a null value is NaN.
type Record struct {
	Step   int
	Values map[string]float64
}

// Run is the metrics of one run directory.
type Run struct {
	// Name labels the run in legends; Dir is where it was read from.
	Name, Dir string
	// Records are sorted by step, one per step.
	Records []Record
}

// maxMetricsLine bounds one line of metrics.jsonl; a step's record is a
// few KB, so a longer line is not one (a file that is not a metrics log).
const maxMetricsLine = 16 << 20

// ReadMetrics parses metrics.jsonl from r. Records of a step seen before
// replace the earlier ones (a run resumed after a crash redoes the steps
// after its checkpoint), so each step appears once, in step order. A
// last line without its newline that does not parse is a write cut short
// and is skipped; any other line that does not parse is an error naming
// name:line, and so is a line longer than maxMetricsLine.
func ReadMetrics(r io.Reader, name string) ([]Record, error) {
	lines := boundedio.NewLineReader(bufio.NewReader(r), name, maxMetricsLine)
	byStep := map[int]int{} // step -> index in out
	var out []Record
	for line := 1; ; line++ {
		b, err := lines.ReadLine()
		if errors.Is(err, io.EOF) {
			break
		}
		if tl := (*boundedio.TooLargeError)(nil); errors.As(err, &tl) {
			return nil, usererr.Errorf("%s:%d: the line is larger than %s; every line of %s is one step's record (a few KB)", name, line, boundedio.Size(tl.Limit), MetricsFile)
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		complete := len(b) > 0 && b[len(b)-1] == '\n'
		if t := bytes.TrimSpace(b); len(t) > 0 {
			rec, perr := parseRecord(t)
			switch {
			case perr == errEvent:
				// A warning or other event of the run, not a step's metrics.
			case perr != nil && !complete:
				// Partial last line: the writer was killed mid-line.
			case perr != nil:
				return nil, usererr.Errorf("%s:%d: %v; every line of %s is one JSON object with a \"step\" number", name, line, perr, MetricsFile)
			default:
				if i, ok := byStep[rec.Step]; ok {
					out[i] = rec
				} else {
					byStep[rec.Step] = len(out)
					out = append(out, rec)
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}

// errEvent marks a line that records an event (a training warning), which
// is not a step's metrics.
var errEvent = errors.New("an event line")

func parseRecord(b []byte) (Record, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return Record{}, errors.New("not a JSON object")
	}
	var step float64
	rs, ok := raw["step"]
	if !ok || json.Unmarshal(rs, &step) != nil || step < 0 || step != math.Trunc(step) || step > math.MaxInt32 {
		return Record{}, errors.New("no \"step\" number")
	}
	if _, ok := raw["event"]; ok {
		return Record{}, errEvent
	}
	rec := Record{Step: int(step), Values: make(map[string]float64, len(raw))}
	for k, v := range raw {
		if k == "step" {
			continue
		}
		var f *float64
		if json.Unmarshal(v, &f) != nil {
			continue // not a number (an event line's text): not a metric
		}
		if f == nil {
			rec.Values[k] = math.NaN()
		} else {
			rec.Values[k] = *f
		}
	}
	return rec, nil
}

// ReadRun reads dir/metrics.jsonl (dir may also name the file itself).
func ReadRun(dir string) (Run, error) {
	path := dir
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		path = filepath.Join(dir, MetricsFile)
	} else if errors.Is(err, fs.ErrNotExist) {
		return Run{}, usererr.Errorf("%s does not exist; give a run directory (trainer.default_local_dir) that holds %s", dir, MetricsFile)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Run{}, usererr.Errorf("%s has no %s; give a run directory (trainer.default_local_dir) of a run with trainer.logger including jsonl", dir, MetricsFile)
	}
	if err != nil {
		return Run{}, err
	}
	defer f.Close()
	recs, err := ReadMetrics(f, path)
	if err != nil {
		return Run{}, err
	}
	if len(recs) == 0 {
		return Run{}, usererr.Errorf("%s holds no step records yet; plot it after the first step", path)
	}
	return Run{Name: filepath.Base(filepath.Clean(dir)), Dir: dir, Records: recs}, nil
}
