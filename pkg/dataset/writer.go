package dataset

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// WriteOptions tune writing.
type WriteOptions struct {
	// Format overrides the format the extension implies. CSV cannot be
	// written.
	Format Format
}

// Writer writes tasks to a dataset file. The file appears at its path only
// when Close succeeds: rows go to a temporary file in the same directory
// that Close renames, so an interrupted run never leaves half a dataset
// under the real name. JSON lines and JSON stream row by row; parquet
// needs every row to choose the column types, so it keeps the rows in
// memory until Close (see docs/datasets.md).
type Writer struct {
	path   string
	format Format
	tmp    *atomicfile.File
	buf    *bufio.Writer
	enc    *json.Encoder // encodes one row into line
	line   bytes.Buffer
	rows   int
	pq     *parquetBuilder
	err    error
	closed bool
}

// Create starts writing a dataset file; the format comes from the
// extension unless opts says otherwise.
func Create(path string, opts WriteOptions) (*Writer, error) {
	format, err := resolveFormat(path, opts.Format)
	if err != nil {
		return nil, err
	}
	if format == FormatCSV {
		return nil, fileError(path, nil, "writing CSV is not supported; write .parquet, .jsonl or .json")
	}
	dir := filepath.Dir(path)
	if dir == "" {
		dir = "."
	}
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return nil, fileError(path, nil, "is a directory; give a file name")
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, fileError(path, nil, "the directory %s does not exist; create it first", dir)
	}
	tmp, err := atomicfile.Create(path)
	if err != nil {
		return nil, openError(path, err)
	}
	w := &Writer{path: path, format: format, tmp: tmp, buf: bufio.NewWriterSize(tmp, 256<<10)}
	switch format {
	case FormatParquet:
		w.pq = newParquetBuilder(path)
	case FormatJSONL, FormatJSON:
		w.enc = json.NewEncoder(&w.line)
		w.enc.SetEscapeHTML(false)
	}
	return w, nil
}

// Write adds one task. Values must be JSON-like: nil, bool, numbers,
// strings, []byte, time.Time, slices and string-keyed maps of those.
func (w *Writer) Write(t episode.Task) error {
	if w.closed {
		return fmt.Errorf("%s: write after close", w.path)
	}
	if w.err != nil {
		return w.err
	}
	switch w.format {
	case FormatParquet:
		w.err = w.pq.add(t)
	case FormatJSONL, FormatJSON:
		w.line.Reset()
		if err := w.enc.Encode(t); err != nil {
			w.err = rowError(w.path, w.rows, err, "cannot encode the task as JSON")
			break
		}
		line := w.line.Bytes()
		if w.format == FormatJSON {
			sep := ",\n  "
			if w.rows == 0 {
				sep = "[\n  "
			}
			w.buf.WriteString(sep)
			line = bytes.TrimSuffix(line, []byte("\n"))
		}
		if _, err := w.buf.Write(line); err != nil {
			w.err = fmt.Errorf("%s: %w", w.path, err)
		}
	}
	if w.err == nil {
		w.rows++
	}
	return w.err
}

// Close finishes the file and moves it to its path. After an earlier
// error it discards the file and returns that error.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err == nil {
		w.err = w.finish()
	}
	if w.err != nil {
		w.tmp.Abort()
		return w.err
	}
	if err := w.tmp.Commit(); err != nil {
		w.err = err
	}
	return w.err
}

// Abort discards everything written; the path is left untouched.
func (w *Writer) Abort() {
	if w.closed {
		return
	}
	w.closed = true
	if w.err == nil {
		w.err = errors.New("aborted")
	}
	w.tmp.Abort()
}

func (w *Writer) finish() error {
	switch w.format {
	case FormatParquet:
		if err := w.pq.writeTo(w.buf); err != nil {
			return err
		}
	case FormatJSON:
		end := "\n]\n"
		if w.rows == 0 {
			end = "[]\n"
		}
		if _, err := w.buf.WriteString(end); err != nil {
			return err
		}
	}
	if err := w.buf.Flush(); err != nil {
		return fmt.Errorf("%s: %w", w.path, err)
	}
	return nil
}

// Write writes tasks to a dataset file in one go (see Writer). It checks
// ctx between rows and leaves no file behind when cancelled.
func Write(ctx context.Context, path string, tasks []episode.Task, opts WriteOptions) error {
	w, err := Create(path, opts)
	if err != nil {
		return err
	}
	for i, t := range tasks {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				w.Abort()
				return err
			}
		}
		if err := w.Write(t); err != nil {
			w.Abort()
			return err
		}
	}
	return w.Close()
}
