package tracking

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
)

// jsonlSink appends one JSON object per row to <run dir>/metrics.jsonl:
// the record every other sink is a view of.
type jsonlSink struct {
	mu   sync.Mutex
	file *os.File
	w    *bufio.Writer
	// kept are the validation rows a resumed run kept from before.
	kept []Row
}

// openJSONL opens metrics.jsonl: a fresh file for a new run; for a
// resumed one the records up to the step it resumes after, without the
// steps a crash made the run redo and without a line a kill cut short,
// then appends.
func openJSONL(spec Spec) (*jsonlSink, error) {
	if err := os.MkdirAll(spec.Dir, atomicfile.DirMode); err != nil {
		return nil, err
	}
	s := &jsonlSink{}
	path := filepath.Join(spec.Dir, spec.JSONLFile)
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if spec.ResumedAt >= 0 {
		kept, err := truncateJSONL(path, spec.ResumedAt)
		if err != nil {
			return nil, err
		}
		s.kept = kept
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(path, flags, atomicfile.FileMode)
	if err != nil {
		return nil, err
	}
	s.file, s.w = f, bufio.NewWriter(f)
	return s, nil
}

// truncateJSONL rewrites path keeping the complete records whose step is
// at most step, in order, and returns the validations among them.
func truncateJSONL(path string, step int) ([]Row, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var vals []Row
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
				vals = append(vals, Row{Step: *rec.Step, Metrics: numbers(line), Kind: KindValidation})
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

func (s *jsonlSink) Name() string { return JSONLines }

func (s *jsonlSink) write(line []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return
	}
	s.w.Write(line)
	s.w.Flush()
}

func (s *jsonlSink) Log(r Row)     { s.write(jsonRow(r.Step, r.Metrics)) }
func (s *jsonlSink) Event(e Event) { s.write(EventLine(e)) }

func (s *jsonlSink) Close(context.Context, Summary) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == nil {
		return nil
	}
	err := errors.Join(s.w.Flush(), s.file.Close())
	s.file, s.w = nil, nil
	return err
}
