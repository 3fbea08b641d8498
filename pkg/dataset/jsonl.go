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

// jsonlSource reads one JSON object per line. Blank lines are skipped;
// lines may be of any length.
type jsonlSource struct {
	path string
	r    *bufio.Reader
	line int
	buf  []byte
	max  int64 // bound of one line
}

func newJSONLSource(path string, r *bufio.Reader, maxLine int64) *jsonlSource {
	return &jsonlSource{path: path, r: r, max: maxLine}
}

// readLine returns the next line without its terminator, valid until the
// next call.
func (s *jsonlSource) readLine() ([]byte, error) {
	s.buf = s.buf[:0]
	for {
		chunk, err := s.r.ReadSlice('\n')
		if int64(len(s.buf)+len(chunk)) > s.max+1 { // +1: the line break
			return nil, &boundedio.TooLargeError{Path: s.path, Limit: s.max, What: "line"}
		}
		s.buf = append(s.buf, chunk...)
		switch {
		case err == nil:
			return s.buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(s.buf) > 0:
			return s.buf, nil
		default:
			return nil, err
		}
	}
}

func (s *jsonlSource) next() (episode.Task, error) {
	for {
		line, err := s.readLine()
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
