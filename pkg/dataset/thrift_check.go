package dataset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
)

// checkParquetFooter walks a parquet file's footer (thrift compact
// protocol) before parquet-go decodes it, and refuses one whose lists,
// maps or strings claim more elements or bytes than the footer holds.
// parquet-go allocates what such a header claims, so a corrupt or hostile
// footer of a few bytes could otherwise make it allocate gigabytes.
func checkParquetFooter(r io.ReaderAt, size int64) error {
	if size < 12 {
		return errors.New("file is too small to be parquet")
	}
	var tail [8]byte
	if _, err := r.ReadAt(tail[:], size-8); err != nil {
		return err
	}
	if string(tail[4:]) != "PAR1" {
		return nil // not plain parquet; parquet-go says what is wrong
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n > size-12 {
		return fmt.Errorf("footer length %d exceeds the file size %d", n, size)
	}
	footer := make([]byte, n)
	if _, err := r.ReadAt(footer, size-8-n); err != nil {
		return err
	}
	c := compactChecker{b: footer}
	if err := c.structure(0); err != nil {
		return fmt.Errorf("corrupt footer: %w", err)
	}
	return nil
}

// compactChecker skips thrift compact-protocol values, checking every
// length against what is left.
type compactChecker struct {
	b   []byte
	pos int
}

var errShortFooter = errors.New("a length exceeds the bytes left")

const maxThriftDepth = 64

func (c *compactChecker) byte1() (byte, error) {
	if c.pos >= len(c.b) {
		return 0, errShortFooter
	}
	v := c.b[c.pos]
	c.pos++
	return v, nil
}

func (c *compactChecker) varint() (uint64, error) {
	v, n := binary.Uvarint(c.b[c.pos:])
	if n <= 0 {
		return 0, errShortFooter
	}
	c.pos += n
	return v, nil
}

func (c *compactChecker) skip(n uint64) error {
	if n > uint64(len(c.b)-c.pos) {
		return errShortFooter
	}
	c.pos += int(n)
	return nil
}

func (c *compactChecker) structure(depth int) error {
	if depth > maxThriftDepth {
		return errors.New("nesting too deep")
	}
	for {
		h, err := c.byte1()
		if err != nil {
			return err
		}
		typ := h & 0x0f
		if typ == 0 { // stop
			return nil
		}
		if h>>4 == 0 { // long form: the field id follows
			if _, err := c.varint(); err != nil {
				return err
			}
		}
		if err := c.value(typ, depth); err != nil {
			return err
		}
	}
}

func (c *compactChecker) value(typ byte, depth int) error {
	switch typ {
	case 1, 2: // bool, in the field header
		return nil
	case 3:
		return c.skip(1)
	case 4, 5, 6:
		_, err := c.varint()
		return err
	case 7:
		return c.skip(8)
	case 8:
		n, err := c.varint()
		if err != nil {
			return err
		}
		return c.skip(n)
	case 9, 10:
		return c.list(depth)
	case 11:
		return c.mapping(depth)
	case 12:
		return c.structure(depth + 1)
	}
	return fmt.Errorf("unknown thrift type %d", typ)
}

func (c *compactChecker) list(depth int) error {
	h, err := c.byte1()
	if err != nil {
		return err
	}
	n, elem := uint64(h>>4), h&0x0f
	if n == 15 {
		if n, err = c.varint(); err != nil {
			return err
		}
	}
	// Every element takes at least one byte.
	if n > uint64(len(c.b)-c.pos) {
		return errShortFooter
	}
	if elem == 1 || elem == 2 { // bools in a list take a byte each
		return c.skip(n)
	}
	for range n {
		if err := c.value(elem, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (c *compactChecker) mapping(depth int) error {
	n, err := c.varint()
	if err != nil || n == 0 {
		return err
	}
	if n > uint64(len(c.b)-c.pos) {
		return errShortFooter
	}
	kv, err := c.byte1()
	if err != nil {
		return err
	}
	for range n {
		for _, typ := range []byte{kv >> 4, kv & 0x0f} {
			if typ == 1 || typ == 2 {
				if err := c.skip(1); err != nil {
					return err
				}
			} else if err := c.value(typ, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkRowGroups refuses column chunks that claim bytes outside the file
// or more values than their bytes could hold, before parquet-go reads
// them: it sizes buffers from these claims.
func checkRowGroups(f *parquet.File, size int64) error {
	for i, rg := range f.Metadata().RowGroups {
		if rg.NumRows < 0 {
			return fmt.Errorf("row group %d claims %d rows", i, rg.NumRows)
		}
		for j, cc := range rg.Columns {
			md := cc.MetaData
			end := md.DataPageOffset + md.TotalCompressedSize
			if md.DictionaryPageOffset > 0 && md.DictionaryPageOffset < md.DataPageOffset {
				end = md.DictionaryPageOffset + md.TotalCompressedSize
			}
			switch {
			case md.TotalCompressedSize < 0 || md.TotalCompressedSize > size,
				md.DataPageOffset < 0 || md.DataPageOffset >= size,
				md.DictionaryPageOffset < 0 || md.DictionaryPageOffset >= size,
				end > size:
				return fmt.Errorf("row group %d, column %d claims bytes outside the file", i, j)
			case md.NumValues < 0 || md.TotalUncompressedSize < 0 || md.TotalUncompressedSize > maxUncompressedChunk:
				return fmt.Errorf("row group %d, column %d claims %d values in %d bytes", i, j, md.NumValues, md.TotalUncompressedSize)
			}
		}
	}
	return nil
}

// maxUncompressedChunk bounds one column chunk once decompressed.
const maxUncompressedChunk = 1 << 30
