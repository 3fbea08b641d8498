package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// jsonlSource reads one JSON object per line, each at most max bytes.
// Blank lines are skipped.
type jsonlSource struct {
	path  string
	lines *boundedio.LineReader
	line  int
	max   int64 // bound of one line
}

func newJSONLSource(path string, r *bufio.Reader, maxLine int64) *jsonlSource {
	return &jsonlSource{path: path, lines: boundedio.NewLineReader(r, path, maxLine), max: maxLine}
}

func (s *jsonlSource) next() (episode.Task, error) {
	for {
		line, err := s.lines.ReadLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, readError(s.path, s.line+1, err, s.max)
		}
		s.line++
		if s.line == 1 {
			line = bytes.TrimPrefix(line, utf8BOM)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		t, err := decodeJSONObject(line)
		if err != nil {
			return nil, lineError(s.path, s.line, nil, "%v", err)
		}
		return t, nil
	}
}

// decodeJSONObject decodes exactly one JSON object from b.
func decodeJSONObject(b []byte) (episode.Task, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("invalid JSON: %s", jsonErrorText(err))
	}
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return nil, errors.New("invalid JSON: more than one value on the line; put one object per line")
	}
	return asTask(v)
}

// jsonErrorText words decoder errors for a person; io.ErrUnexpectedEOF
// says nothing about JSON on its own.
func jsonErrorText(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input (is the value cut short?)"
	}
	return err.Error()
}
