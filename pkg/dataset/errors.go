package dataset

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Error is a problem with a dataset file that its owner can fix: the file
// is missing, has an unknown format, or a row is malformed. Its subject
// names the file and, when it applies, the line ("file:line", JSON lines
// and CSV) or the 0-based row ("file: row N", the index `datasets` would
// show for ds[N]), so the message alone is enough to find the fault. Exit
// code 2.
type Error = usererr.Error

// RowError is an *Error about row (0-based) of the dataset file path.
func RowError(path string, row int, format string, args ...any) error {
	return rowError(path, row, nil, format, args...)
}

func newError(subject string, err error, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if err != nil {
		msg += ": " + err.Error()
	}
	return &Error{Subject: subject, Msg: msg, Err: err}
}

func fileError(path string, err error, format string, args ...any) *Error {
	return newError(path, err, format, args...)
}

func lineError(path string, line int, err error, format string, args ...any) *Error {
	return newError(path+":"+strconv.Itoa(line), err, format, args...)
}

func rowError(path string, row int, err error, format string, args ...any) *Error {
	return newError(path+": row "+strconv.Itoa(row), err, format, args...)
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

// readError words an error met while reading rows: a line or row over
// the limit is the user's to fix; cancellation and I/O errors are not.
func readError(path string, line int, err error, maxRow int64) error {
	var tl *boundedio.TooLargeError
	if errors.As(err, &tl) {
		what := "a row"
		if tl.What != "" {
			what = "a " + tl.What
		}
		msg := rowTooLarge(what, maxRow)
		if line > 0 {
			return lineError(path, line, nil, "%s", msg)
		}
		return fileError(path, nil, "%s", msg)
	}
	return fmt.Errorf("%s: %w", path, err)
}

func rowTooLarge(what string, maxRow int64) string {
	return fmt.Sprintf("%s is larger than the limit of %s; split the data or raise the limit (Options.MaxRowBytes)", what, boundedio.Size(maxRow))
}
