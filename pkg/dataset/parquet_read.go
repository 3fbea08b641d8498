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
	"reflect"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"

	"github.com/rllm-org/rllm-go/internal/anyval"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// parquetSource streams the rows of a parquet file through parquet-go's
// generic reader, a few at a time, as map[string]any (structs are
// map[string]any, lists []any). Each row is then normalized against the
// schema so that every type maps to one documented Go type (see
// leafConverter) whatever Go type parquet-go chose for it; a corrupt file
// yields an *Error, not a panic.
type parquetSource struct {
	path   string
	root   *pqNode
	reader *parquet.GenericReader[map[string]any]
	buf    []map[string]any
	n, i   int // buf[i:n] are still to be returned
	row    int // index of the next row in the file
	eof    bool
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
	if err := checkRowGroups(f, size); err != nil {
		return nil, fileError(path, err, "not a readable parquet file")
	}
	root, err := compileParquet(f.Root())
	if err != nil {
		return nil, fileError(path, err, "unsupported parquet schema")
	}
	return &parquetSource{
		path:   path,
		root:   root,
		reader: parquet.NewGenericReader[map[string]any](f, readSchema(f.Schema())),
		buf:    make([]map[string]any, parquetReadAhead),
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
	m := s.buf[s.i]
	s.buf[s.i] = nil
	s.i++
	v, err := s.root.normalizeFields(m)
	if err != nil {
		return nil, rowError(s.path, s.row, err, "corrupt parquet row")
	}
	s.row++
	return episode.Task(v), nil
}

// fill reads the next rows into buf; it returns io.EOF after the last.
func (s *parquetSource) fill() (err error) {
	defer recoverCorrupt(s.path, s.row, &err)
	if s.eof {
		return io.EOF
	}
	for i := range s.buf {
		s.buf[i] = map[string]any{}
	}
	n, err := s.reader.Read(s.buf)
	s.i, s.n = 0, n
	switch {
	case errors.Is(err, io.EOF):
		s.eof = true
		if n == 0 {
			return io.EOF
		}
	case err != nil:
		return rowError(s.path, s.row+n, err, "cannot read parquet data")
	}
	return nil
}

func (s *parquetSource) Close() error {
	if s.reader != nil {
		err := s.reader.Close()
		s.reader = nil
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

// pqNode is one schema node, compiled for normalization.
type pqNode struct {
	name     string
	kind     pqKind
	repeated bool
	fields   []*pqNode // pqGroup
	// pqList and pqMap: rep is the repeated child. A list's elements are
	// elem, or rep itself when elem is nil (the legacy two-level form).
	rep      *pqNode
	elem     *pqNode
	key, val *pqNode // pqMap: the fields of rep
	conv     func(any) (any, error)
}

func compileParquet(c *parquet.Column) (*pqNode, error) {
	n := &pqNode{name: c.Name(), repeated: c.Repeated()}
	if c.Leaf() {
		n.kind, n.conv = pqLeaf, leafConverter(c.Type())
		return n, nil
	}
	n.kind = pqGroup
	for _, child := range c.Columns() {
		f, err := compileParquet(child)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name(), err)
		}
		n.fields = append(n.fields, f)
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

var errCorrupt = errors.New("the value does not match the column's type")

// columnError names the column whose value could not be normalized.
type columnError struct {
	path string
	v    any
	err  error
}

func (e *columnError) Error() string {
	return fmt.Sprintf("column %s: %v (a Go %T)", e.path, e.err, e.v)
}

func (e *columnError) Unwrap() error { return e.err }

// normalize maps the value parquet-go reconstructed for node n to the
// documented Go types. A repeated node holds a list of its values.
func (n *pqNode) normalize(v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	if n.repeated {
		return n.normalizeList(v, func(e any) (any, error) { return n.normalizeOne(e) })
	}
	return n.normalizeOne(v)
}

func (n *pqNode) normalizeOne(v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch n.kind {
	case pqLeaf:
		return n.conv(v)
	case pqList:
		if m, ok := v.(map[string]any); ok { // reconstructed as a plain group
			v = m[n.rep.name]
		}
		if n.elem != nil {
			return n.normalizeList(v, n.elem.normalize)
		}
		return n.normalizeList(v, n.rep.normalizeOne)
	case pqMap:
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.Map {
			return nil, errCorrupt
		}
		out := make(map[string]any, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			k, err := n.key.normalizeOne(it.Key().Interface())
			if err != nil {
				return nil, err
			}
			x, err := n.val.normalize(it.Value().Interface())
			if err != nil {
				return nil, err
			}
			out[mapKey(k)] = x
		}
		return out, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errCorrupt
	}
	return n.normalizeFields(m)
}

// normalizeFields normalizes a group's fields in place; a field the row
// lacks is null.
func (n *pqNode) normalizeFields(m map[string]any) (map[string]any, error) {
	for _, f := range n.fields {
		x, err := f.normalize(m[f.name])
		if err != nil {
			var ce *columnError
			if errors.As(err, &ce) {
				ce.path = f.name + "." + ce.path
				return nil, ce
			}
			return nil, &columnError{path: f.name, v: m[f.name], err: err}
		}
		m[f.name] = x
	}
	return m, nil
}

func (n *pqNode) normalizeList(v any, elem func(any) (any, error)) ([]any, error) {
	if l, ok := v.([]any); ok { // the usual case: normalize in place
		for i, e := range l {
			x, err := elem(e)
			if err != nil {
				return nil, err
			}
			l[i] = x
		}
		return l, nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, errCorrupt
	}
	out := make([]any, rv.Len())
	for i := range out {
		x, err := elem(rv.Index(i).Interface())
		if err != nil {
			return nil, err
		}
		out[i] = x
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
//
// The converters accept whichever Go type parquet-go reconstructs for the
// column (a raw int32 for a DATE, a time.Time for a TIMESTAMP, a [16]byte
// or a string for a UUID...).
func leafConverter(t parquet.Type) func(any) (any, error) {
	var lt any
	if l := t.LogicalType(); l != nil {
		lt = l.Value
	}
	switch lt := lt.(type) {
	case *format.StringType, *format.EnumType:
		return func(v any) (any, error) {
			if _, ok := v.(string); ok {
				return v, nil // no copy: parquet-go's strings are the row's own
			}
			if b, ok := asBytes(v); ok {
				return string(b), nil
			}
			return nil, errCorrupt
		}
	case *format.JsonType:
		return func(v any) (any, error) {
			b, ok := asBytes(v)
			if !ok {
				return normalizeJSON(v)
			}
			var x any
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			if err := dec.Decode(&x); err != nil {
				return string(b), nil
			}
			return normalizeJSON(x)
		}
	case *format.UUIDType:
		return func(v any) (any, error) {
			if s, ok := v.(string); ok && len(s) == 36 {
				return s, nil
			}
			b, ok := asBytes(v)
			if !ok {
				return nil, errCorrupt
			}
			return formatUUID(b), nil
		}
	case *format.IntType:
		if !lt.IsSigned {
			return func(v any) (any, error) {
				var u uint64
				switch x := v.(type) {
				case int32:
					u = uint64(uint32(x))
				case int64:
					u = uint64(x)
				default:
					rv := reflect.ValueOf(v)
					switch rv.Kind() {
					case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
						u = rv.Uint()
					case reflect.Int, reflect.Int8, reflect.Int16:
						u = uint64(rv.Int())
					default:
						return nil, errCorrupt
					}
				}
				if u > math.MaxInt64 {
					return u, nil
				}
				return int64(u), nil
			}
		}
	case *format.DecimalType:
		scale := lt.Scale
		return func(v any) (any, error) { return decimalValue(v, scale) }
	case *format.DateType:
		return instantValue(func(days int64) time.Time { return time.Unix(days*86400, 0) })
	case *format.TimestampType:
		unit := timeUnit(lt.Unit)
		return instantValue(func(n int64) time.Time { return time.Unix(0, 0).Add(time.Duration(n) * unit) })
	case *format.TimeType:
		unit := timeUnit(lt.Unit)
		return func(v any) (any, error) {
			var d time.Duration
			if x, ok := v.(time.Duration); ok {
				d = x
			} else if n, ok := anyval.Int64(v); ok {
				d = time.Duration(n) * unit
			} else {
				return nil, errCorrupt
			}
			return time.Unix(0, 0).UTC().Add(d).Format("15:04:05.999999999"), nil
		}
	case *format.NullType:
		return func(any) (any, error) { return nil, nil }
	}
	return physicalValue
}

func physicalValue(v any) (any, error) {
	switch x := v.(type) {
	case bool, int64, float64:
		return v, nil
	case float32:
		f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
		return f, nil
	case deprecated.Int96:
		// Legacy (Impala/Spark) timestamps: nanoseconds of the day in the
		// low 8 bytes, the Julian day number in the high 4.
		nanos := int64(uint64(x[1])<<32 | uint64(x[0]))
		days := int64(x[2]) - 2440588 // Julian day of 1970-01-01
		return time.Unix(days*86400, nanos).UTC(), nil
	case time.Time:
		return x.UTC(), nil
	}
	if i, ok := anyval.Int64(v); ok {
		return i, nil
	}
	if b, ok := asBytes(v); ok {
		return append([]byte(nil), b...), nil
	}
	return nil, fmt.Errorf("unsupported parquet value of Go type %T", v)
}

// instantValue converts a DATE or TIMESTAMP value: a time.Time as
// parquet-go decoded it, or the stored integer, which at turns into one.
func instantValue(at func(int64) time.Time) func(any) (any, error) {
	return func(v any) (any, error) {
		if tm, ok := v.(time.Time); ok {
			return tm.UTC(), nil
		}
		n, ok := anyval.Int64(v)
		if !ok {
			return nil, errCorrupt
		}
		return at(n).UTC(), nil
	}
}

// asBytes reads a string, a []byte or a byte array.
func asBytes(v any) ([]byte, bool) {
	switch x := v.(type) {
	case []byte:
		return x, true
	case string:
		return []byte(x), true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Array && rv.Type().Elem().Kind() == reflect.Uint8 {
		b := make([]byte, rv.Len())
		reflect.Copy(reflect.ValueOf(b), rv)
		return b, true
	}
	return nil, false
}

func timeUnit(u format.TimeUnit) time.Duration {
	if u.Value == nil {
		return time.Microsecond
	}
	return u.Value.Duration()
}

func decimalValue(v any, scale int32) (any, error) {
	var unscaled *big.Int
	if i, ok := anyval.Int64(v); ok {
		unscaled = big.NewInt(i)
	} else if b, ok := asBytes(v); ok { // big-endian two's complement
		unscaled = new(big.Int).SetBytes(b)
		if len(b) > 0 && b[0]&0x80 != 0 {
			unscaled.Sub(unscaled, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
		}
	} else if f, ok := v.(float64); ok { // parquet-go applied the scale
		return f, nil
	} else if f, ok := v.(float32); ok { // INT32 decimals: 7 digits kept
		return physicalValue(f)
	} else if f, ok := v.(*big.Float); ok {
		x, _ := f.Float64()
		return x, nil
	} else {
		return nil, errCorrupt
	}
	f, _ := new(big.Float).Quo(new(big.Float).SetInt(unscaled), new(big.Float).SetFloat64(math.Pow10(int(scale)))).Float64()
	return f, nil
}

func formatUUID(b []byte) string {
	if len(b) != 16 {
		return hex.EncodeToString(b)
	}
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// readSchema is the file's schema with JSON and DECIMAL leaves read as
// their plain physical type: parquet-go would decode JSON numbers as
// float64 (losing 1 versus 1.0) and INT32 decimals as float32; the
// converters do both exactly from the raw values.
func readSchema(s *parquet.Schema) *parquet.Schema {
	n, changed := plainLeaves(s)
	if !changed {
		return s
	}
	return parquet.NewSchema(s.Name(), n)
}

func plainLeaves(n parquet.Node) (parquet.Node, bool) {
	if n.Leaf() {
		t := n.Type()
		if lt := t.LogicalType(); lt != nil {
			switch lt.Value.(type) {
			case *format.JsonType, *format.DecimalType:
				return rawLeaf{Node: n, typ: physicalType(t)}, true
			}
		}
		return n, false
	}
	fields := n.Fields()
	out := make([]parquet.Field, len(fields))
	changed := false
	for i, f := range fields {
		c, ch := plainLeaves(f)
		changed = changed || ch
		out[i] = namedField{Node: c, Field: f}
	}
	if !changed {
		return n, false
	}
	return groupWithFields{Node: n, fields: out}, true
}

func physicalType(t parquet.Type) parquet.Type {
	switch t.Kind() {
	case parquet.Int32:
		return parquet.Int32Type
	case parquet.Int64:
		return parquet.Int64Type
	case parquet.FixedLenByteArray:
		return parquet.FixedLenByteArrayType(t.Length())
	}
	return parquet.ByteArrayType
}

// rawLeaf is a leaf read as its physical type.
type rawLeaf struct {
	parquet.Node
	typ parquet.Type
}

func (l rawLeaf) Type() parquet.Type { return l.typ }
func (l rawLeaf) GoType() reflect.Type {
	t := parquet.Leaf(l.typ).GoType()
	switch {
	case l.Repeated():
		return reflect.SliceOf(t)
	case l.Optional():
		return reflect.PointerTo(t)
	}
	return t
}

// groupWithFields is a group whose fields were replaced.
type groupWithFields struct {
	parquet.Node
	fields []parquet.Field
}

func (g groupWithFields) Fields() []parquet.Field { return g.fields }

// namedField is a replaced node under its field's name.
type namedField struct {
	parquet.Node
	Field parquet.Field
}

func (f namedField) Name() string                           { return f.Field.Name() }
func (f namedField) Value(base reflect.Value) reflect.Value { return f.Field.Value(base) }
