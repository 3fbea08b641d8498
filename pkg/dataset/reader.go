package dataset

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// Options tune reading. The zero value reads by extension with the
// default CSV typing.
type Options struct {
	// Format overrides the format the extension implies.
	Format Format
	// CSVStrings keeps every CSV cell as a string (empty cells as "")
	// instead of typing canonical integers and decimals and reading empty
	// cells as null. See docs/datasets.md.
	CSVStrings bool
	// MaxRowBytes bounds one row (a line of JSON lines, a CSV record, an
	// element of a JSON array); 0 means DefaultMaxRowBytes. A longer row
	// is an *Error naming the file and line, so a file that never ends
	// (/dev/zero) or has no line breaks cannot exhaust memory.
	MaxRowBytes int64
}

// DefaultMaxRowBytes is the default bound of one row.
const DefaultMaxRowBytes = 64 << 20

// readAhead is the buffer between the file and the row decoders; a row's
// byte budget allows for it.
const readAhead = 256 << 10

// rowSource is one format's row decoder. next returns io.EOF after the
// last row and an *Error for a malformed row.
type rowSource interface {
	next() (episode.Task, error)
}

// Reader streams the rows of one dataset file as tasks. It is not safe
// for concurrent use.
type Reader struct {
	ctx    context.Context
	path   string
	format Format
	file   *boundedio.File
	src    rowSource
	rows   int
	err    error // sticky: after an error or io.EOF, Next keeps returning it
}

// Open opens a dataset file for streaming; opening and reads stop when
// ctx is cancelled (a FIFO with no writer, a pipe that stalls). A missing
// file, a directory or an unknown extension is an *Error.
func Open(ctx context.Context, path string, opts Options) (*Reader, error) {
	format, err := resolveFormat(path, opts.Format)
	if err != nil {
		return nil, err
	}
	if opts.MaxRowBytes <= 0 {
		opts.MaxRowBytes = DefaultMaxRowBytes
	}
	f, err := boundedio.Open(ctx, path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, openError(path, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if info.IsDir() {
		f.Close()
		return nil, fileError(path, nil, "is a directory; give one dataset file (%s)", knownExtensions)
	}
	r := &Reader{ctx: ctx, path: path, format: format, file: f}
	// Text formats read through a per-row budget: the row's bound plus
	// what the buffers may have read ahead.
	budget := boundedio.NewLimitReader(f, path, opts.MaxRowBytes+2*readAhead)
	budget.What = "row"
	switch format {
	case FormatParquet:
		if !info.Mode().IsRegular() {
			f.Close()
			return nil, fileError(path, nil, "is not a regular file; parquet is read by random access, so give the file itself")
		}
		r.src, err = newParquetSource(path, f, info.Size())
	case FormatJSONL:
		r.src = newJSONLSource(path, bufio.NewReaderSize(f, readAhead), opts.MaxRowBytes)
	case FormatJSON:
		r.src = newJSONSource(path, bufio.NewReaderSize(budget, readAhead), budget, opts.MaxRowBytes)
	case FormatCSV:
		r.src = newCSVSource(path, bufio.NewReaderSize(budget, readAhead), opts.CSVStrings, budget, opts.MaxRowBytes)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

// Next returns the next row, or io.EOF after the last one. A malformed
// row is an *Error naming the file and the line or row; reading stops
// there. Once the context given to Open is cancelled, an error is the
// context's: a read cut short leaves a half-written line, and what the
// parser makes of that line is not the file's fault.
func (r *Reader) Next() (episode.Task, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.src == nil {
		r.err = fmt.Errorf("%s: reader is closed", r.path)
		return nil, r.err
	}
	t, err := r.src.next()
	if err != nil {
		if cerr := r.ctx.Err(); cerr != nil && !errors.Is(err, io.EOF) {
			err = cerr
		}
		r.err = err
		return nil, err
	}
	r.rows++
	return t, nil
}

// Close releases the file. It is safe to call more than once.
func (r *Reader) Close() error {
	if r.file == nil {
		return nil
	}
	var err error
	if c, ok := r.src.(io.Closer); ok {
		err = c.Close()
	}
	if ferr := r.file.Close(); err == nil {
		err = ferr
	}
	r.file, r.src = nil, nil
	return err
}

// ReadAll reads every row of a dataset file, or of a directory a
// registered DirFormat recognises. It checks ctx between rows, so a huge
// file can be abandoned.
func ReadAll(ctx context.Context, path string, opts Options) ([]episode.Task, error) {
	if rows, ok, err := readDir(ctx, path); ok {
		return rows, err
	}
	r, err := Open(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var tasks []episode.Task
	for i := 0; ; i++ {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		t, err := r.Next()
		if errors.Is(err, io.EOF) {
			return tasks, nil
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
			return nil, err
		}
		tasks = append(tasks, t)
	}
}

// Load reads every row of a dataset file and gives each task an id
// (AssignIDs). It is what the trainer and `rllm eval` call.
func Load(ctx context.Context, path string, opts Options) ([]episode.Task, error) {
	tasks, err := ReadAll(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	if err := AssignIDs(path, tasks); err != nil {
		return nil, err
	}
	return tasks, nil
}
