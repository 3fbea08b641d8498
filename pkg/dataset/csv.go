package dataset

import (
	"bufio"
	"encoding/csv"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// csvSource reads a CSV file with a header row. By default a cell that is
// the canonical text of an integer or a decimal becomes int64 or float64
// and an empty cell becomes null, the way pandas (and so Hugging Face
// `datasets`) reads CSV; see typeCSVCell for why only canonical text.
type csvSource struct {
	path     string
	r        *csv.Reader
	header   []string
	strings  bool
	budget   *boundedio.LimitReader // reset before each record; nil: none
	max      int64                  // bound of one record
	nextLine int                    // the line the next record starts on (about)
}

func newCSVSource(path string, r *bufio.Reader, keepStrings bool, budget *boundedio.LimitReader, maxRow int64) *csvSource {
	if b, err := r.Peek(len(utf8BOM)); err == nil && string(b) == string(utf8BOM) {
		r.Discard(len(utf8BOM))
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // counted here, for a clearer message
	cr.ReuseRecord = true
	return &csvSource{path: path, r: cr, strings: keepStrings, budget: budget, max: maxRow, nextLine: 1}
}

func (s *csvSource) next() (episode.Task, error) {
	if s.budget != nil {
		s.budget.Reset()
	}
	if s.header == nil {
		rec, err := s.read()
		if err != nil {
			return nil, err
		}
		s.header = csvHeader(rec)
	}
	rec, err := s.read()
	if err != nil {
		return nil, err
	}
	size := 0
	for _, cell := range rec {
		size += len(cell) + 1
	}
	if int64(size) > s.max+1 {
		line, _ := s.r.FieldPos(0)
		return nil, lineError(s.path, line, nil, "%s", rowTooLarge("a row", s.max))
	}
	if len(rec) != len(s.header) {
		line, _ := s.r.FieldPos(0)
		return nil, lineError(s.path, line, nil, "row has %d fields but the header has %d columns", len(rec), len(s.header))
	}
	t := make(episode.Task, len(rec))
	for i, cell := range rec {
		if s.strings {
			t[s.header[i]] = cell
		} else {
			t[s.header[i]] = typeCSVCell(cell)
		}
	}
	return t, nil
}

func (s *csvSource) parseError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return lineError(s.path, pe.Line, nil, "invalid CSV at column %d: %v", pe.Column, pe.Err)
	}
	// No record was read: FieldPos would panic; name where it began.
	return readError(s.path, s.nextLine, err, s.max)
}

// read reads the next record (io.EOF after the last) and notes where it
// ended.
func (s *csvSource) read() ([]string, error) {
	rec, err := s.r.Read()
	if errors.Is(err, io.EOF) {
		return nil, io.EOF
	}
	if err != nil {
		return nil, s.parseError(err)
	}
	line, _ := s.r.FieldPos(len(rec) - 1)
	s.nextLine = line + 1
	return rec, nil
}

// csvHeader names the columns as pandas does, so users find the names
// they know: an empty name at position i becomes "Unnamed: i" (the index
// column DataFrame.to_csv writes) and a repeated name gets ".1", ".2"...
func csvHeader(rec []string) []string {
	header := make([]string, len(rec))
	seen := make(map[string]bool, len(rec))
	for i, name := range rec {
		if name == "" {
			name = "Unnamed: " + strconv.Itoa(i)
		}
		base := name
		for n := 1; seen[name]; n++ {
			name = base + "." + strconv.Itoa(n)
		}
		seen[name] = true
		header[i] = name
	}
	return header
}

// typeCSVCell types a cell without losing its text: it becomes int64 or
// float64 only when formatting the number gives back exactly the cell, so
// "12" is 12 but "007", "+3", "1.50", "1e3", "NaN" and "0x1F" stay
// strings (an id with leading zeros keeps them). An empty cell is null.
func typeCSVCell(cell string) any {
	if cell == "" {
		return nil
	}
	c := cell[0]
	if c != '-' && (c < '0' || c > '9') {
		return cell
	}
	if !strings.ContainsAny(cell, ".eE") {
		if i, err := strconv.ParseInt(cell, 10, 64); err == nil && strconv.FormatInt(i, 10) == cell {
			return i
		}
		return cell
	}
	f, err := strconv.ParseFloat(cell, 64)
	if err != nil {
		return cell
	}
	if strconv.FormatFloat(f, 'f', -1, 64) == cell || strconv.FormatFloat(f, 'g', -1, 64) == cell {
		return f
	}
	return cell
}
