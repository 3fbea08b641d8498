package episodestore

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxRecord bounds one record's JSON (a 1M-token response takes about
// 40 MB): a longer record is an error naming the file, not a growing
// buffer.
var MaxRecord int64 = 512 << 20

// ReadIndex returns the entries of a data file: its index's lines while
// they point inside the file, then, when the data file holds more than
// the index covers (the index missing, or a kill between a record and
// its line), entries read from the records themselves. A cut last line
// or record is skipped.
func ReadIndex(dataPath, indexPath string) ([]Entry, error) {
	f, err := os.Open(dataPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	var entries []Entry
	var end int64
	if indexPath != "" {
		b, err := os.ReadFile(indexPath)
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		for len(b) > 0 {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				break // cut by a kill
			}
			var e Entry
			if json.Unmarshal(b[:i], &e) == nil && e.Offset == end && e.Length > 0 && e.Offset+e.Length <= size {
				entries = append(entries, e)
				end = e.Offset + e.Length
			}
			b = b[i+1:]
		}
	}
	if end < size {
		if _, err := f.Seek(end, io.SeekStart); err != nil {
			return nil, err
		}
		err := Scan(f, end, func(off, n int64, rec *Record) error {
			e := Summarize(rec)
			e.Offset, e.Length = off, n
			entries = append(entries, e)
			return nil
		})
		if err != nil {
			return entries, fmt.Errorf("%s: %w", dataPath, err)
		}
	}
	return entries, nil
}

// ReadRecord reads the record an entry points at.
func ReadRecord(dataPath string, e Entry) (*Record, error) {
	if e.Length <= 0 || e.Offset < 0 {
		return nil, fmt.Errorf("%s: no record at offset %d", dataPath, e.Offset)
	}
	f, err := os.Open(dataPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rec *Record
	err = Scan(io.NewSectionReader(f, e.Offset, e.Length), e.Offset, func(_, _ int64, r *Record) error {
		rec = r
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, fmt.Errorf("%s at offset %d: %w", dataPath, e.Offset, err)
	}
	if rec == nil {
		return nil, fmt.Errorf("%s: the record at offset %d is cut short", dataPath, e.Offset)
	}
	return rec, nil
}

var errStop = errors.New("stop")

// ReadAll returns every complete record of a data file (a test's and a
// small file's reader; viewers page through ReadIndex and ReadRecord).
func ReadAll(path string) ([]*Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*Record
	err = Scan(f, 0, func(_, _ int64, r *Record) error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// countingReader counts the bytes taken from a buffered reader; it is a
// flate.Reader, so gzip reads from it byte-exactly and a member's end is
// the count after it.
type countingReader struct {
	r *bufio.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// Scan calls fn with every complete record of r (gzip members or JSON
// lines, told apart by the first bytes), its offset (base + position)
// and its length in r. A record cut at the end of r (a kill while it was
// written) is skipped; a damaged record before the end is an error
// naming its offset. Blank lines are skipped.
func Scan(r io.Reader, base int64, fn func(off, n int64, rec *Record) error) error {
	cr := &countingReader{r: bufio.NewReaderSize(r, 64<<10)}
	head, err := cr.r.Peek(2)
	if err != nil {
		return nil // empty, or one byte: nothing complete
	}
	if head[0] == 0x1f && head[1] == 0x8b {
		return scanGzip(cr, base, fn)
	}
	return scanLines(cr, base, fn)
}

func scanGzip(cr *countingReader, base int64, fn func(off, n int64, rec *Record) error) error {
	var zr *gzip.Reader
	for {
		start := cr.n
		if _, err := cr.r.Peek(1); err == io.EOF {
			return nil
		}
		var err error
		if zr == nil {
			zr, err = gzip.NewReader(cr)
		} else {
			err = zr.Reset(cr)
		}
		if err != nil {
			if cut(err) {
				return nil
			}
			return fmt.Errorf("offset %d: %w", base+start, err)
		}
		zr.Multistream(false)
		var buf bytes.Buffer
		n, err := io.Copy(&buf, io.LimitReader(zr, MaxRecord+1))
		if err != nil {
			if cut(err) {
				return nil
			}
			return fmt.Errorf("offset %d: %w", base+start, err)
		}
		if n > MaxRecord {
			return fmt.Errorf("offset %d: the record is larger than the limit of %d bytes", base+start, MaxRecord)
		}
		line := bytes.TrimSpace(buf.Bytes())
		if len(line) == 0 {
			continue
		}
		rec, err := decode(line)
		if err != nil {
			return fmt.Errorf("offset %d: %w", base+start, err)
		}
		if err := fn(base+start, cr.n-start, rec); err != nil {
			return err
		}
	}
}

func scanLines(cr *countingReader, base int64, fn func(off, n int64, rec *Record) error) error {
	for {
		start := cr.n
		var line []byte
		for {
			chunk, err := cr.r.ReadSlice('\n')
			cr.n += int64(len(chunk))
			line = append(line, chunk...)
			if int64(len(line)) > MaxRecord {
				return fmt.Errorf("offset %d: the record is larger than the limit of %d bytes", base+start, MaxRecord)
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err == io.EOF {
				return nil // no newline: nothing, or a line a kill cut short
			}
			if err != nil {
				return err
			}
			break
		}
		t := bytes.TrimSpace(line)
		if len(t) == 0 {
			continue
		}
		rec, err := decode(t)
		if err != nil {
			return fmt.Errorf("offset %d: %w", base+start, err)
		}
		if err := fn(base+start, cr.n-start, rec); err != nil {
			return err
		}
	}
}

func cut(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func decode(line []byte) (*Record, error) {
	var rec Record
	if err := json.Unmarshal(line, &rec); err != nil {
		return nil, fmt.Errorf("not an episode record: %w", err)
	}
	if rec.Phase == "" {
		rec.Phase = PhaseEval // an episode as rllm eval wrote it before records
	}
	return &rec, nil
}

// IsEpisodesFile reports whether path starts with a complete episode
// record (plain or gzip), so a command may replace it without losing a
// file of the user's.
func IsEpisodesFile(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	ok := false
	Scan(f, 0, func(_, _ int64, rec *Record) error {
		ok = rec.ID != "" && rec.Trajectories != nil
		return errStop
	})
	return ok, nil
}
