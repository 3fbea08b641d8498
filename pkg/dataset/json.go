package dataset

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rllm-org/rllm-go/internal/anyval"
	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// jsonSource streams a .json file: a top-level array of objects, or an
// object with exactly one array-valued field ({"data": [...]}) whose
// elements are the rows; the object's other fields are skipped. Rows are
// decoded one at a time with json.Decoder tokens, never the whole file.
type jsonSource struct {
	path   string
	dec    *json.Decoder
	state  jsonState
	row    int    // index of the next row
	field  string // the array field, in object mode
	budget *boundedio.LimitReader
	max    int64 // bound of one row
}

type jsonState int

const (
	jsonStart      jsonState = iota
	jsonInArray              // inside the top-level array
	jsonInField              // inside the array field of the top-level object
	jsonAfterField           // the array field is done; other fields may follow
	jsonDone
)

func newJSONSource(path string, r *bufio.Reader, budget *boundedio.LimitReader, maxRow int64) *jsonSource {
	if b, err := r.Peek(len(utf8BOM)); err == nil && string(b) == string(utf8BOM) {
		r.Discard(len(utf8BOM))
	}
	dec := json.NewDecoder(r)
	dec.UseNumber()
	return &jsonSource{path: path, dec: dec, budget: budget, max: maxRow}
}

func (s *jsonSource) next() (episode.Task, error) {
	for {
		switch s.state {
		case jsonStart:
			tok, err := s.dec.Token()
			if errors.Is(err, io.EOF) {
				s.state = jsonDone
				continue
			}
			if err != nil {
				return nil, s.syntax(err)
			}
			switch tok {
			case json.Delim('['):
				s.state = jsonInArray
			case json.Delim('{'):
				if err := s.findArrayField(); err != nil {
					return nil, err
				}
				s.state = jsonInField
			default:
				return nil, fileError(s.path, nil, "top-level value is %s; a .json dataset is an array of objects or an object with one array field such as {\"data\": [...]} (for one object per line, name the file .jsonl)", anyval.Kind(tokenValue(tok)))
			}
		case jsonInArray, jsonInField:
			if s.dec.More() {
				return s.decodeRow()
			}
			if _, err := s.dec.Token(); err != nil { // the closing ']'
				return nil, s.syntax(err)
			}
			if s.state == jsonInArray {
				if err := s.expectEnd(); err != nil {
					return nil, err
				}
				s.state = jsonDone
			} else {
				s.state = jsonAfterField
			}
		case jsonAfterField:
			if err := s.skipRestOfObject(); err != nil {
				return nil, err
			}
			if err := s.expectEnd(); err != nil {
				return nil, err
			}
			s.state = jsonDone
		case jsonDone:
			return nil, io.EOF
		}
	}
}

func (s *jsonSource) decodeRow() (episode.Task, error) {
	if s.budget != nil {
		s.budget.Reset()
	}
	var v any
	start := s.dec.InputOffset()
	if err := s.dec.Decode(&v); err != nil {
		return nil, s.syntax(err)
	}
	if s.dec.InputOffset()-start > s.max {
		return nil, rowError(s.path, s.row, nil, "%s", rowTooLarge("the row", s.max))
	}
	t, err := asTask(v)
	if err != nil {
		return nil, rowError(s.path, s.row, nil, "%v", err)
	}
	s.row++
	return t, nil
}

// nextArrayField walks the fields of the top-level object, skipping their
// values, up to the next array-valued one, which it enters (found); at
// the end of the object found is false.
func (s *jsonSource) nextArrayField() (key string, found bool, err error) {
	for s.dec.More() {
		tok, err := s.dec.Token()
		if err != nil {
			return "", false, s.syntax(err)
		}
		if found, err = s.enterOrSkipValue(); err != nil || found {
			key, _ = tok.(string)
			return key, found, err
		}
	}
	return "", false, nil
}

// findArrayField leaves the decoder inside the top-level object's first
// array field.
func (s *jsonSource) findArrayField() error {
	key, found, err := s.nextArrayField()
	if err != nil {
		return err
	}
	if !found {
		return fileError(s.path, nil, "the top-level object has no array field; a .json dataset is an array of objects or an object with one array field such as {\"data\": [...]} (for one object per line, name the file .jsonl)")
	}
	s.field = key
	return nil
}

// skipRestOfObject skips the fields after the array field and refuses a
// second array field: which one holds the rows would be a guess.
func (s *jsonSource) skipRestOfObject() error {
	key, found, err := s.nextArrayField()
	if err != nil {
		return err
	}
	if found {
		return fileError(s.path, nil, "the top-level object has two array fields, %q and %q; keep the rows in one field", s.field, key)
	}
	if _, err := s.dec.Token(); err != nil { // the closing '}'
		return s.syntax(err)
	}
	return nil
}

// enterOrSkipValue reads the next value's first token: an array is
// entered (true); anything else is skipped whole (false).
func (s *jsonSource) enterOrSkipValue() (bool, error) {
	tok, err := s.dec.Token()
	if err != nil {
		return false, s.syntax(err)
	}
	switch tok {
	case json.Delim('['):
		return true, nil
	case json.Delim('{'):
		for depth := 1; depth > 0; {
			tok, err := s.dec.Token()
			if err != nil {
				return false, s.syntax(err)
			}
			switch tok {
			case json.Delim('{'), json.Delim('['):
				depth++
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
		}
	}
	return false, nil
}

func (s *jsonSource) expectEnd() error {
	if _, err := s.dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return s.syntax(err)
		}
		return fileError(s.path, nil, "unexpected data after the top-level value (at byte %d); a .json dataset holds one array (for one object per line, name the file .jsonl)", s.dec.InputOffset())
	}
	return nil
}

func (s *jsonSource) syntax(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	var syn *json.SyntaxError
	if !errors.As(err, &syn) && !errors.Is(err, io.ErrUnexpectedEOF) {
		var tl *boundedio.TooLargeError
		if errors.As(err, &tl) {
			return rowError(s.path, s.row, nil, "%s", rowTooLarge("the row", s.max))
		}
		return fmt.Errorf("%s: %w", s.path, err) // an I/O error, not the file's content
	}
	if s.state == jsonInArray || s.state == jsonInField {
		return rowError(s.path, s.row, nil, "invalid JSON near byte %d: %s", s.dec.InputOffset(), jsonErrorText(err))
	}
	return fileError(s.path, nil, "invalid JSON near byte %d: %s", s.dec.InputOffset(), jsonErrorText(err))
}

// tokenValue turns a scalar token back into the value anyval.Kind describes.
func tokenValue(tok json.Token) any {
	if d, ok := tok.(json.Delim); ok {
		return string(d)
	}
	return tok
}
