package dataset

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// parquetSource streams the rows of a parquet file, a few at a time per
// row group, and assembles each row's flat column values back into nested
// Go values (structs become map[string]any, lists []any) from the
// repetition and definition levels, as the Dremel encoding defines them.
//
// We assemble rows ourselves rather than let parquet-go reflect into
// map[string]any so that every type maps to one documented Go type (see
// leafConverter) and so that a corrupt file yields an error, not a panic.
type parquetSource struct {
	path      string
	root      *pqNode
	groups    []parquet.RowGroup
	group     int           // next row group to open
	rows      parquet.Rows  // the open row group, or nil
	buf       []parquet.Row // rows read ahead from the open row group
	n, i      int           // buf[i:n] are still to be returned
	row       int           // index of the next row in the file
	cols      [][]parquet.Value
	rowsAtEOF bool
}

const parquetReadAhead = 64

func newParquetSource(path string, r io.ReaderAt, size int64) (src *parquetSource, err error) {
	defer recoverCorrupt(path, -1, &err)
	if err := checkParquetFooter(r, size); err != nil {
		return nil, fileError(path, err, "not a readable parquet file")
	}
	f, err := parquet.OpenFile(r, size,
		parquet.SkipPageIndex(true),
		parquet.SkipBloomFilters(true),
		parquet.ReadBufferSize(256<<10),
	)
	if err != nil {
		return nil, fileError(path, err, "not a readable parquet file")
	}
	root, err := compileParquet(f.Root())
	if err != nil {
		return nil, fileError(path, err, "unsupported parquet schema")
	}
	return &parquetSource{
		path:   path,
		root:   root,
		groups: f.RowGroups(),
		buf:    make([]parquet.Row, parquetReadAhead),
		cols:   make([][]parquet.Value, root.ncols),
	}, nil
}

// recoverCorrupt turns a panic inside parquet-go (it panics on some
// malformed files) into an *Error, so no file can crash the program.
func recoverCorrupt(path string, row int, err *error) {
	if p := recover(); p != nil {
		cause := fmt.Errorf("%v", p)
		if row >= 0 {
			*err = rowError(path, row, cause, "corrupt parquet file")
		} else {
			*err = fileError(path, cause, "corrupt parquet file")
		}
	}
}

func (s *parquetSource) next() (t episode.Task, err error) {
	for s.i == s.n {
		if err := s.fill(); err != nil {
			return nil, err
		}
	}
	defer recoverCorrupt(s.path, s.row, &err)
	row := s.buf[s.i]
	s.i++
	v, err := s.root.assembleRow(row, s.cols)
	if err != nil {
		return nil, rowError(s.path, s.row, err, "corrupt parquet row")
	}
	s.row++
	return episode.Task(v), nil
}

// fill reads the next rows into buf, moving through the row groups; it
// returns io.EOF after the last one.
func (s *parquetSource) fill() (err error) {
	defer recoverCorrupt(s.path, s.row, &err)
	for {
		if s.rows == nil {
			if s.group == len(s.groups) {
				return io.EOF
			}
			s.rows = s.groups[s.group].Rows()
			s.group++
			s.rowsAtEOF = false
		}
		if s.rowsAtEOF {
			s.rows.Close()
			s.rows = nil
			continue
		}
		n, err := s.rows.ReadRows(s.buf)
		s.i, s.n = 0, n
		if errors.Is(err, io.EOF) {
			s.rowsAtEOF = true
		} else if err != nil {
			return rowError(s.path, s.row, err, "cannot read parquet data")
		}
		if n > 0 {
			return nil
		}
	}
}

func (s *parquetSource) Close() error {
	if s.rows != nil {
		err := s.rows.Close()
		s.rows = nil
		return err
	}
	return nil
}

type pqKind int

const (
	pqLeaf pqKind = iota
	pqGroup
	pqList
	pqMap
)

// pqNode is one schema node, compiled for assembly.
type pqNode struct {
	name     string
	kind     pqKind
	optional bool
	repeated bool
	ncols    int       // leaf columns under this node
	fields   []*pqNode // pqGroup
	// pqList and pqMap: rep is the repeated child. A list's elements are
	// elem, or rep itself when elem is nil (the legacy two-level form).
	rep      *pqNode
	elem     *pqNode
	key, val *pqNode // pqMap: the fields of rep
	conv     func(parquet.Value) (any, error)
}

func compileParquet(c *parquet.Column) (*pqNode, error) {
	n := &pqNode{name: c.Name(), optional: c.Optional(), repeated: c.Repeated()}
	if c.Leaf() {
		n.kind, n.ncols, n.conv = pqLeaf, 1, leafConverter(c.Type())
		return n, nil
	}
	n.kind = pqGroup
	for _, child := range c.Columns() {
		f, err := compileParquet(child)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name(), err)
		}
		n.fields = append(n.fields, f)
		n.ncols += f.ncols
	}
	var lt any
	if t := c.Type().LogicalType(); t != nil {
		lt = t.Value
	}
	switch lt.(type) {
	case *format.ListType:
		// LogicalTypes.md, "Lists" and its backward-compatibility rules.
		if len(n.fields) == 1 && n.fields[0].repeated {
			rep := n.fields[0]
			n.kind, n.rep = pqList, rep
			if rep.kind != pqLeaf && len(rep.fields) == 1 && rep.name != "array" && rep.name != n.name+"_tuple" {
				n.elem = rep.fields[0]
			}
		}
	case *format.MapType:
		if len(n.fields) == 1 && n.fields[0].repeated && len(n.fields[0].fields) == 2 {
			rep := n.fields[0]
			n.kind, n.rep, n.key, n.val = pqMap, rep, rep.fields[0], rep.fields[1]
		}
	}
	return n, nil
}

var errCorrupt = errors.New("column values do not match the schema's levels")

// assembleRow splits a row's values by column and assembles the top-level
// group. cols is scratch space of root.ncols entries.
func (n *pqNode) assembleRow(row parquet.Row, cols [][]parquet.Value) (map[string]any, error) {
	start, col := 0, 0
	for i, v := range row {
		c := v.Column()
		if c < col || c >= len(cols) {
			return nil, errCorrupt
		}
		if c != col {
			cols[col] = row[start:i]
			for col++; col < c; col++ {
				cols[col] = nil
			}
			start = i
		}
	}
	if len(cols) > 0 {
		cols[col] = row[start:]
		for col++; col < len(cols); col++ {
			cols[col] = nil
		}
	}
	v, err := n.required(cols, 0, 0)
	if err != nil {
		return nil, err
	}
	m, _ := v.(map[string]any)
	return m, nil
}

// decode assembles the value of node n from its columns' values in this
// row (or list element). def counts the optional and repeated ancestors
// known to be present; rep is the repetition depth so far.
func (n *pqNode) decode(cols [][]parquet.Value, def, rep int) (any, error) {
	switch {
	case n.repeated:
		return n.list(n, nil, cols, def, rep)
	case n.optional:
		if n.ncols == 0 {
			return map[string]any{}, nil
		}
		if len(cols[0]) == 0 {
			return nil, errCorrupt
		}
		if cols[0][0].DefinitionLevel() <= def {
			return nil, nil
		}
		return n.required(cols, def+1, rep)
	}
	return n.required(cols, def, rep)
}

// required assembles n's value once n itself is known to be present.
func (n *pqNode) required(cols [][]parquet.Value, def, rep int) (any, error) {
	switch n.kind {
	case pqLeaf:
		if len(cols) != 1 || len(cols[0]) == 0 {
			return nil, errCorrupt
		}
		v := cols[0][0]
		if v.IsNull() {
			return nil, nil
		}
		return n.conv(v)
	case pqList:
		return n.list(n.rep, n.elem, cols, def, rep)
	case pqMap:
		items, err := n.list(n.rep, nil, cols, def, rep)
		if err != nil {
			return nil, err
		}
		m := make(map[string]any, len(items))
		for _, it := range items {
			kv, _ := it.(map[string]any)
			m[mapKey(kv[n.key.name])] = kv[n.val.name]
		}
		return m, nil
	}
	m := make(map[string]any, len(n.fields))
	off := 0
	for _, f := range n.fields {
		v, err := f.decode(cols[off:off+f.ncols], def, rep)
		if err != nil {
			return nil, err
		}
		m[f.name] = v
		off += f.ncols
	}
	return m, nil
}

// list assembles the elements of the repeated node rep: each element is
// elem's value, or rep's own (as a required node) when elem is nil.
func (n *pqNode) list(rep, elem *pqNode, cols [][]parquet.Value, def, depth int) ([]any, error) {
	if rep.ncols == 0 {
		return []any{}, nil
	}
	if len(cols[0]) == 0 {
		return nil, errCorrupt
	}
	if cols[0][0].DefinitionLevel() <= def {
		return []any{}, nil
	}
	def, depth = def+1, depth+1
	// An element starts at each value whose repetition level is at most
	// depth; every column must hold the same number of elements.
	count := 1
	for _, v := range cols[0][1:] {
		if v.RepetitionLevel() <= depth {
			count++
		}
	}
	out := make([]any, 0, count)
	rest := make([][]parquet.Value, len(cols))
	copy(rest, cols)
	sub := make([][]parquet.Value, len(cols))
	for range count {
		for j, c := range rest {
			if len(c) == 0 {
				return nil, errCorrupt
			}
			end := 1
			for end < len(c) && c[end].RepetitionLevel() > depth {
				end++
			}
			sub[j], rest[j] = c[:end], c[end:]
		}
		var v any
		var err error
		if elem != nil {
			v, err = elem.decode(sub, def, depth)
		} else {
			v, err = rep.required(sub, def, depth)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	for _, c := range rest {
		if len(c) != 0 {
			return nil, errCorrupt
		}
	}
	return out, nil
}

func mapKey(k any) string {
	switch k := k.(type) {
	case string:
		return k
	case nil:
		return ""
	case []byte:
		return string(k)
	}
	return fmt.Sprint(k)
}

// leafConverter maps a parquet leaf type to the Go value a task holds:
//
//	STRING, ENUM, UUID              string
//	JSON                            the decoded JSON value (numbers as in .json files)
//	BOOLEAN                         bool
//	INT32, INT64, INT(n, signed)    int64
//	INT(n, unsigned)                int64, or uint64 above math.MaxInt64
//	FLOAT, DOUBLE                   float64 (a FLOAT keeps its shortest decimal form)
//	DECIMAL                         float64
//	DATE, TIMESTAMP, INT96          time.Time in UTC
//	TIME                            string "15:04:05.999999999"
//	other BYTE_ARRAY, FIXED_LEN     []byte
func leafConverter(t parquet.Type) func(parquet.Value) (any, error) {
	var lt any
	if l := t.LogicalType(); l != nil {
		lt = l.Value
	}
	switch lt := lt.(type) {
	case *format.StringType, *format.EnumType:
		return func(v parquet.Value) (any, error) { return string(v.ByteArray()), nil }
	case *format.JsonType:
		return func(v parquet.Value) (any, error) {
			b := v.ByteArray()
			var x any
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			if err := dec.Decode(&x); err != nil {
				return string(b), nil
			}
			return normalizeJSON(x)
		}
	case *format.UUIDType:
		return func(v parquet.Value) (any, error) { return formatUUID(v.ByteArray()), nil }
	case *format.IntType:
		if !lt.IsSigned {
			return func(v parquet.Value) (any, error) {
				var u uint64
				if v.Kind() == parquet.Int32 {
					u = uint64(v.Uint32())
				} else {
					u = v.Uint64()
				}
				if u > math.MaxInt64 {
					return u, nil
				}
				return int64(u), nil
			}
		}
	case *format.DecimalType:
		scale := lt.Scale
		return func(v parquet.Value) (any, error) { return decimalValue(v, scale), nil }
	case *format.DateType:
		return func(v parquet.Value) (any, error) {
			return time.Unix(int64(v.Int32())*86400, 0).UTC(), nil
		}
	case *format.TimestampType:
		unit := timeUnit(lt.Unit)
		return func(v parquet.Value) (any, error) {
			return time.Unix(0, 0).Add(time.Duration(v.Int64()) * unit).UTC(), nil
		}
	case *format.TimeType:
		unit := timeUnit(lt.Unit)
		return func(v parquet.Value) (any, error) {
			n := v.Int64()
			if v.Kind() == parquet.Int32 {
				n = int64(v.Int32())
			}
			d := time.Duration(n) * unit
			return time.Unix(0, 0).UTC().Add(d).Format("15:04:05.999999999"), nil
		}
	case *format.NullType:
		return func(parquet.Value) (any, error) { return nil, nil }
	}
	return physicalValue
}

func physicalValue(v parquet.Value) (any, error) {
	switch v.Kind() {
	case parquet.Boolean:
		return v.Boolean(), nil
	case parquet.Int32:
		return int64(v.Int32()), nil
	case parquet.Int64:
		return v.Int64(), nil
	case parquet.Int96:
		// Legacy (Impala/Spark) timestamps: nanoseconds of the day in the
		// low 8 bytes, the Julian day number in the high 4.
		i := v.Int96()
		nanos := int64(uint64(i[1])<<32 | uint64(i[0]))
		days := int64(i[2]) - 2440588 // Julian day of 1970-01-01
		return time.Unix(days*86400, nanos).UTC(), nil
	case parquet.Float:
		f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(v.Float()), 'g', -1, 32), 64)
		return f, nil
	case parquet.Double:
		return v.Double(), nil
	case parquet.ByteArray, parquet.FixedLenByteArray:
		return append([]byte(nil), v.ByteArray()...), nil
	}
	return nil, fmt.Errorf("unsupported parquet value kind %v", v.Kind())
}

func timeUnit(u format.TimeUnit) time.Duration {
	if u.Value == nil {
		return time.Microsecond
	}
	return u.Value.Duration()
}

func decimalValue(v parquet.Value, scale int32) float64 {
	var unscaled *big.Int
	switch v.Kind() {
	case parquet.Int32:
		unscaled = big.NewInt(int64(v.Int32()))
	case parquet.Int64:
		unscaled = big.NewInt(v.Int64())
	default: // big-endian two's complement
		b := v.ByteArray()
		unscaled = new(big.Int).SetBytes(b)
		if len(b) > 0 && b[0]&0x80 != 0 {
			unscaled.Sub(unscaled, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
		}
	}
	f, _ := new(big.Float).Quo(new(big.Float).SetInt(unscaled), new(big.Float).SetFloat64(math.Pow10(int(scale)))).Float64()
	return f
}

func formatUUID(b []byte) string {
	if len(b) != 16 {
		return hex.EncodeToString(b)
	}
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
