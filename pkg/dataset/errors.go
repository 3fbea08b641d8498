package dataset

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
)

// Error is a problem with a dataset file that its owner can fix: the file
// is missing, has an unknown format, or a row is malformed. It names the
// file and, when it applies, the line or row, so the message alone is
// enough to find the fault.
type Error struct {
	Path string
	// Line is the 1-based line (JSON lines, CSV); 0 when not applicable.
	Line int
	// Row is the 0-based row index (parquet, JSON, loader checks), the
	// index `datasets` would show for ds[Row]; -1 when not applicable.
	Row int
	// Msg says what is wrong (and, where it helps, what would fix it).
	Msg string
	// Err is the underlying cause, if any.
	Err error
}

func (e *Error) Error() string {
	s := e.Path
	switch {
	case s == "":
	case e.Line > 0:
		s += ":" + strconv.Itoa(e.Line)
	case e.Row >= 0:
		s += ": row " + strconv.Itoa(e.Row)
	}
	if s != "" {
		s += ": "
	}
	s += e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode marks the error as one the user fixes (exit code 2).
func (e *Error) ExitCode() int { return 2 }

func fileError(path string, err error, format string, args ...any) *Error {
	return &Error{Path: path, Row: -1, Msg: fmt.Sprintf(format, args...), Err: err}
}

func lineError(path string, line int, err error, format string, args ...any) *Error {
	return &Error{Path: path, Line: line, Row: -1, Msg: fmt.Sprintf(format, args...), Err: err}
}

func rowError(path string, row int, err error, format string, args ...any) *Error {
	return &Error{Path: path, Row: row, Msg: fmt.Sprintf(format, args...), Err: err}
}

// openError turns the error of opening a dataset file into one sentence a
// user can act on; failures that are not the user's (I/O errors) stay
// plain errors.
func openError(path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fileError(path, nil, "no such file; check the path")
	case errors.Is(err, fs.ErrPermission):
		return fileError(path, nil, "permission denied; make the file readable")
	}
	return fmt.Errorf("%s: %w", path, err)
}
