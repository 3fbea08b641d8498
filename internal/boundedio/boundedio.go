// Package boundedio reads files a user names (configs, datasets, chat
// templates, tokenizers, manifests) with a size bound and a context: a
// huge or endless file (/dev/zero) ends in a *TooLargeError naming the
// file and the limit instead of growing memory, and a read that waits (a
// FIFO with no writer yet, a slow pipe) stops when the context is
// cancelled.
package boundedio

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// TooLargeError is a file (or one line or row of it) longer than the
// limit its reader allows.
type TooLargeError struct {
	Path  string
	Limit int64
	// What is read: "file", "line", "row"...; "file" when empty.
	What string
}

func (e *TooLargeError) Error() string {
	what := e.What
	if what == "" {
		what = "file"
	}
	return fmt.Sprintf("%s: the %s is larger than the limit of %s", e.Path, what, Size(e.Limit))
}

// Size prints a byte count as people write limits: "64 MiB", "512 KiB".
func Size(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// File is an open file whose reads stop when ctx is cancelled.
type File struct {
	*os.File
	ctx  context.Context
	stop func() bool
}

// Open opens path for reading. Opening a FIFO waits for a writer, as
// os.Open does, but gives up when ctx is cancelled.
func Open(ctx context.Context, path string) (*File, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var f *os.File
	if fi, err := os.Stat(path); err == nil && fi.Mode()&fs.ModeNamedPipe != 0 {
		f, err = openFIFO(ctx, path)
		if err != nil {
			return nil, err
		}
	} else {
		f, err = os.Open(path)
		if err != nil {
			return nil, err
		}
	}
	bf := &File{File: f, ctx: ctx}
	// Pipes and FIFOs are read through the poller, so a deadline in the
	// past wakes a read that is waiting for data.
	bf.stop = context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	return bf, nil
}

// openFIFO opens a FIFO for reading in the background. If ctx ends
// first, opening it for writing (without blocking) releases the waiting
// open, whose file is then closed. That write-open finds no reader while
// the background open has not yet reached the kernel, so it is retried
// until the background open returns: openFIFO leaves no reader behind
// to take the next writer's data (which a later open of the same FIFO
// then never sees). After fifoReleaseBound of retries (the path replaced
// by another file, say) the background open is left to close itself.
func openFIFO(ctx context.Context, path string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := os.Open(path)
		done <- result{f, err}
	}()
	select {
	case r := <-done:
		return r.f, r.err
	case <-ctx.Done():
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	giveUp := time.NewTimer(fifoReleaseBound)
	defer giveUp.Stop()
	for {
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		select {
		case r := <-done:
			if r.f != nil {
				r.f.Close()
			}
			return nil, ctx.Err()
		case <-giveUp.C:
			go func() {
				if r := <-done; r.f != nil {
					r.f.Close()
				}
			}()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// fifoReleaseBound is how long openFIFO tries to release its own
// waiting open after a cancel.
const fifoReleaseBound = 5 * time.Second

// Read reads from the file, returning the context's error once it is
// cancelled.
func (f *File) Read(p []byte) (int, error) {
	if err := f.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := f.File.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if cerr := f.ctx.Err(); cerr != nil {
			return n, cerr
		}
	}
	return n, err
}

// Close closes the file.
func (f *File) Close() error {
	if f.stop != nil {
		f.stop()
	}
	return f.File.Close()
}

// ReadFile reads all of path, refusing more than limit bytes with a
// *TooLargeError. It stops when ctx is cancelled.
func ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	f, err := Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: syscall.EISDIR}
	} else if err == nil && fi.Mode().IsRegular() && fi.Size() > limit {
		return nil, &TooLargeError{Path: path, Limit: limit}
	}
	return ReadAll(NewLimitReader(f, path, limit), limit)
}

// ReadAll reads r to its end into a buffer that doubles as it grows but
// never beyond max bytes of capacity (r's own bound): its allocations
// total about twice what it holds, where io.ReadAll's (growing by a
// quarter) total about five times.
func ReadAll(r io.Reader, max int64) ([]byte, error) {
	b := make([]byte, 0, min(64<<10, max+1))
	for {
		if len(b) == cap(b) {
			grow := int64(2 * cap(b))
			if grow >= max {
				grow = max + 1 // the last step: room for max and the byte past it
			}
			if grow <= int64(cap(b)) {
				grow = int64(cap(b)) + 4096 // the reader went past max: let it say so
			}
			nb := make([]byte, len(b), grow)
			copy(nb, b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b, nil
			}
			return b, err
		}
	}
}

// LimitReader returns at most Limit bytes from R and then a
// *TooLargeError (not io.EOF) if R has more. Reset starts a new budget,
// so one reader can bound each line or row of a stream.
type LimitReader struct {
	R     io.Reader
	Path  string
	What  string
	Limit int64
	left  int64
}

// NewLimitReader bounds r to limit bytes in all.
func NewLimitReader(r io.Reader, path string, limit int64) *LimitReader {
	return &LimitReader{R: r, Path: path, Limit: limit, left: limit}
}

// Reset gives the reader a fresh budget of Limit bytes.
func (l *LimitReader) Reset() { l.left = l.Limit }

// Left is what remains of the budget.
func (l *LimitReader) Left() int64 { return l.left }

func (l *LimitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One byte more tells an exact fit from an overflow.
		var b [1]byte
		n, err := l.R.Read(b[:])
		if n > 0 {
			return 0, &TooLargeError{Path: l.Path, Limit: l.Limit, What: l.What}
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.R.Read(p)
	l.left -= int64(n)
	return n, err
}

// LineReader reads lines no longer than a bound: a longer one ends in a
// *TooLargeError (What "line") instead of growing memory.
type LineReader struct {
	r    *bufio.Reader
	path string
	max  int64
	buf  []byte
}

// NewLineReader reads lines of at most max bytes (the line break aside)
// from r; path names the source in errors.
func NewLineReader(r *bufio.Reader, path string, max int64) *LineReader {
	return &LineReader{r: r, path: path, max: max}
}

// ReadLine returns the next line with its '\n' (absent on a last line
// without one), valid until the next call, or io.EOF after the last.
func (l *LineReader) ReadLine() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		chunk, err := l.r.ReadSlice('\n')
		if int64(len(l.buf)+len(chunk)) > l.max+1 { // +1: the line break
			return nil, &TooLargeError{Path: l.path, Limit: l.max, What: "line"}
		}
		l.buf = append(l.buf, chunk...)
		switch {
		case err == nil:
			return l.buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(l.buf) > 0:
			return l.buf, nil
		default:
			return nil, err
		}
	}
}
