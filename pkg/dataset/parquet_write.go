package dataset

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// Parquet files are written the way pyarrow (and so Hugging Face
// `datasets`) writes and reads them, with plain types only: every column
// optional; strings as STRING, integers as INT(64, signed), floats as
// DOUBLE, booleans, []byte as BYTE_ARRAY, time.Time as TIMESTAMP(UTC,
// micros); nested maps as groups (pyarrow structs, so reward_model.
// ground_truth reads back as it was written) and slices as three-level
// LISTs; snappy compression. Columns are sorted by name.
//
// The type of each column is inferred from all rows: integers and floats
// in one column make it DOUBLE; any other mix (a string in one row, a
// number in another) is an *Error, since parquet has one type per column
// (JSON lines keeps mixed types). A column that is null, an empty map or
// an empty list in every row is written as STRING (nulls) or a list of
// STRING; an empty map reads back as null because parquet has no empty
// struct.

type wKind int

const (
	wNull wKind = iota
	wBool
	wInt
	wFloat
	wString
	wBytes
	wTime
	wStruct
	wList
)

var wKindNames = [...]string{"null", "a boolean", "an integer", "a float", "a string", "bytes", "a time", "an object", "a list"}

// wType is the inferred type of a column (or a nested field).
type wType struct {
	kind   wKind
	fields map[string]*wType
	elem   *wType
}

type parquetBuilder struct {
	path string
	root *wType
	rows []map[string]any
}

func newParquetBuilder(path string) *parquetBuilder {
	return &parquetBuilder{path: path, root: &wType{kind: wStruct, fields: map[string]*wType{}}}
}

func (b *parquetBuilder) add(t episode.Task) error {
	v, err := plainValue(map[string]any(t))
	if err != nil {
		return rowError(b.path, len(b.rows), err, "cannot write the task")
	}
	m, _ := v.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	if err := b.root.merge(m, ""); err != nil {
		return rowError(b.path, len(b.rows), nil, "%v; parquet holds one type per column (write .jsonl to keep mixed types)", err)
	}
	b.rows = append(b.rows, m)
	return nil
}

// merge widens t to hold v; path names the column in messages.
func (t *wType) merge(v any, path string) error {
	k := kindOf(v)
	if k == wNull {
		return nil
	}
	switch {
	case t.kind == wNull:
		t.kind = k
	case t.kind == k:
	case t.kind == wFloat && k == wInt:
	case t.kind == wInt && k == wFloat:
		t.kind = wFloat
	default:
		return fmt.Errorf("column %q holds %s here but %s in an earlier row", path, wKindNames[k], wKindNames[t.kind])
	}
	switch x := v.(type) {
	case map[string]any:
		if t.fields == nil {
			t.fields = map[string]*wType{}
		}
		for name, e := range x {
			f := t.fields[name]
			if f == nil {
				f = &wType{}
				t.fields[name] = f
			}
			if err := f.merge(e, joinPath(path, name)); err != nil {
				return err
			}
		}
	case []any:
		if t.elem == nil {
			t.elem = &wType{}
		}
		for _, e := range x {
			if err := t.elem.merge(e, path+"[]"); err != nil {
				return err
			}
		}
	}
	return nil
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func kindOf(v any) wKind {
	switch v.(type) {
	case bool:
		return wBool
	case int64:
		return wInt
	case float64:
		return wFloat
	case string:
		return wString
	case []byte:
		return wBytes
	case time.Time:
		return wTime
	case map[string]any:
		return wStruct
	case []any:
		return wList
	}
	return wNull
}

// wNode is a column of the schema being written, in the schema's (sorted)
// field order, with the leaf column indexes striping needs.
type wNode struct {
	name   string
	kind   wKind // wStruct, wList, or a leaf kind; wNull is a STRING leaf
	fields []*wNode
	elem   *wNode
	col    int // first leaf column
	ncols  int
}

func (t *wType) node(name string, col int) (parquet.Node, *wNode) {
	n := &wNode{name: name, kind: t.kind, col: col}
	var pn parquet.Node
	switch t.kind {
	case wStruct:
		if len(t.fields) == 0 {
			n.kind, n.ncols = wNull, 1
			return parquet.Optional(parquet.String()), n
		}
		g := parquet.Group{}
		names := make([]string, 0, len(t.fields))
		for name := range t.fields {
			names = append(names, name)
		}
		slices.Sort(names) // parquet.Group orders fields by name too
		for _, name := range names {
			fn, fw := t.fields[name].node(name, col+n.ncols)
			g[name] = fn
			n.fields = append(n.fields, fw)
			n.ncols += fw.ncols
		}
		pn = g
	case wList:
		elem := t.elem
		if elem == nil {
			elem = &wType{}
		}
		en, ew := elem.node("element", col)
		n.elem, n.ncols = ew, ew.ncols
		pn = parquet.List(en)
	default:
		n.ncols = 1
		switch t.kind {
		case wBool:
			pn = parquet.Leaf(parquet.BooleanType)
		case wInt:
			pn = parquet.Int(64)
		case wFloat:
			pn = parquet.Leaf(parquet.DoubleType)
		case wBytes:
			pn = parquet.Leaf(parquet.ByteArrayType)
		case wTime:
			pn = parquet.Timestamp(parquet.Microsecond)
		default:
			pn = parquet.String()
		}
	}
	return parquet.Optional(pn), n
}

func (b *parquetBuilder) writeTo(out io.Writer) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: writing parquet: %v", b.path, p)
		}
	}()
	// The root is a required group of optional columns.
	root := parquet.Group{}
	top := &wNode{kind: wStruct}
	names := make([]string, 0, len(b.root.fields))
	for name := range b.root.fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		pn, wn := b.root.fields[name].node(name, top.ncols)
		root[name] = pn
		top.fields = append(top.fields, wn)
		top.ncols += wn.ncols
	}
	if top.ncols == 0 {
		return fileError(b.path, nil, "cannot write parquet without columns: every task is empty")
	}
	schema := parquet.NewSchema("schema", root)
	pw := parquet.NewWriter(out, schema,
		parquet.Compression(&parquet.Snappy),
		parquet.MaxRowsPerRowGroup(16384),
	)
	cols := make([][]parquet.Value, top.ncols)
	batch := make([]parquet.Row, 0, 256)
	flush := func() error {
		if _, err := pw.WriteRows(batch); err != nil {
			return fmt.Errorf("%s: writing parquet: %w", b.path, err)
		}
		batch = batch[:0]
		return nil
	}
	for _, m := range b.rows {
		for i := range cols {
			cols[i] = cols[i][:0]
		}
		for _, f := range top.fields {
			f.stripe(m[f.name], 0, 0, 0, cols)
		}
		row := make(parquet.Row, 0, top.ncols)
		for _, c := range cols {
			row = append(row, c...)
		}
		batch = append(batch, row)
		if len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if err := pw.Close(); err != nil {
		return fmt.Errorf("%s: writing parquet: %w", b.path, err)
	}
	return nil
}

// stripe appends v's leaf values, with their repetition and definition
// levels, to cols. Every written node is optional, so a present value
// adds one definition level and a non-empty list one more.
func (n *wNode) stripe(v any, def, rep, depth int, cols [][]parquet.Value) {
	if v == nil || n.kind == wNull {
		n.nulls(def, rep, cols)
		return
	}
	def++
	switch n.kind {
	case wStruct:
		m, _ := v.(map[string]any)
		for _, f := range n.fields {
			f.stripe(m[f.name], def, rep, depth, cols)
		}
	case wList:
		l, _ := v.([]any)
		if len(l) == 0 {
			n.nulls(def, rep, cols)
			return
		}
		for i, e := range l {
			r := rep
			if i > 0 {
				r = depth + 1
			}
			n.elem.stripe(e, def+1, r, depth+1, cols)
		}
	default:
		cols[n.col] = append(cols[n.col], leafValue(n.kind, v).Level(rep, def, n.col))
	}
}

func (n *wNode) nulls(def, rep int, cols [][]parquet.Value) {
	for c := n.col; c < n.col+n.ncols; c++ {
		cols[c] = append(cols[c], parquet.NullValue().Level(rep, def, c))
	}
}

func leafValue(kind wKind, v any) parquet.Value {
	switch x := v.(type) {
	case bool:
		return parquet.BooleanValue(x)
	case int64:
		if kind == wFloat {
			return parquet.DoubleValue(float64(x))
		}
		return parquet.Int64Value(x)
	case float64:
		return parquet.DoubleValue(x)
	case string:
		return parquet.ByteArrayValue([]byte(x))
	case []byte:
		return parquet.ByteArrayValue(x)
	case time.Time:
		return parquet.Int64Value(x.UnixMicro())
	}
	return parquet.NullValue()
}

// plainValue converts a task value to the plain types the parquet writer
// knows: nil, bool, int64, float64, string, []byte, time.Time, []any and
// map[string]any. Other Go values (structs such as episode.Message, typed
// slices and maps) go through their JSON form.
func plainValue(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, []byte, time.Time:
		return x, nil
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint:
		return plainUint(uint64(x))
	case uint64:
		return plainUint(x)
	case float32:
		f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
		return f, nil
	case json.Number:
		return jsonNumber(string(x))
	case json.RawMessage:
		var j any
		if err := decodeJSONValue(x, &j); err != nil {
			return nil, err
		}
		return normalizeJSON(j)
	case episode.Task:
		return plainValue(map[string]any(x))
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			p, err := plainValue(e)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", k, err)
			}
			out[k] = p
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			p, err := plainValue(e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out[i] = p
		}
		return out, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return nil, nil
		}
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = rv.Index(i).Interface()
		}
		return plainValue(out)
	case reflect.Map:
		if rv.Type().Key().Kind() == reflect.String {
			if rv.IsNil() {
				return nil, nil
			}
			out := make(map[string]any, rv.Len())
			for it := rv.MapRange(); it.Next(); {
				out[it.Key().String()] = it.Value().Interface()
			}
			return plainValue(out)
		}
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil, nil
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var j any
	if err := decodeJSONValue(b, &j); err != nil {
		return nil, err
	}
	return normalizeJSON(j)
}

func plainUint(u uint64) (any, error) {
	if u > math.MaxInt64 {
		return nil, fmt.Errorf("integer %d does not fit in int64", u)
	}
	return int64(u), nil
}
