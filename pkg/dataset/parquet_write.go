package dataset

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"reflect"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/rllm-org/rllm-go/internal/anyval"
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

// node is the parquet schema node of a column of type t; every column
// is optional. Fields are sorted by name, as parquet.Group orders them.
func (t *wType) node() parquet.Node {
	var pn parquet.Node
	switch t.kind {
	case wStruct:
		if len(t.fields) == 0 {
			return parquet.Optional(parquet.String()) // parquet has no empty struct
		}
		g := parquet.Group{}
		for name, f := range t.fields {
			g[name] = f.node()
		}
		pn = g
	case wList:
		elem := t.elem
		if elem == nil {
			elem = &wType{}
		}
		pn = parquet.List(elem.node())
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
	return parquet.Optional(pn)
}

// shape makes v exactly what the column's parquet type takes: integers
// in a float column become float64, times microseconds since the epoch,
// and values of a column written as nulls (an always-empty struct) nil.
func (t *wType) shape(v any) any {
	if v == nil {
		return nil
	}
	switch t.kind {
	case wNull:
		return nil
	case wStruct:
		if len(t.fields) == 0 {
			return nil
		}
		m, _ := v.(map[string]any)
		out := make(map[string]any, len(t.fields))
		for name, f := range t.fields {
			out[name] = f.shape(m[name])
		}
		return out
	case wList:
		l, _ := v.([]any)
		out := make([]any, len(l))
		for i, e := range l {
			out[i] = t.elem.shape(e)
		}
		return out
	case wFloat:
		if i, ok := v.(int64); ok {
			v = float64(i)
		}
	case wTime:
		if tm, ok := v.(time.Time); ok {
			v = tm.UnixMicro()
		}
	}
	// parquet-go writes a zero value in an optional column as null; a
	// pointer to it is written as the value.
	switch x := v.(type) {
	case bool:
		return &x
	case int64:
		return &x
	case float64:
		return &x
	case string:
		return &x
	case []byte:
		return &x
	}
	return v
}

// writeTo writes the rows through parquet-go's generic writer, with the
// schema inferred from every row.
func (b *parquetBuilder) writeTo(out io.Writer) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: writing parquet: %v", b.path, p)
		}
	}()
	if len(b.root.fields) == 0 {
		return fileError(b.path, nil, "cannot write parquet without columns: every task is empty")
	}
	root := parquet.Group{}
	for name, f := range b.root.fields {
		root[name] = f.node()
	}
	pw := parquet.NewGenericWriter[map[string]any](out, parquet.NewSchema("schema", root),
		parquet.Compression(&parquet.Snappy),
		parquet.MaxRowsPerRowGroup(16384),
	)
	batch := make([]map[string]any, 0, 256)
	flush := func() error {
		if _, err := pw.Write(batch); err != nil {
			return fmt.Errorf("%s: writing parquet: %w", b.path, err)
		}
		batch = batch[:0]
		return nil
	}
	for _, m := range b.rows {
		row := make(map[string]any, len(b.root.fields))
		for name, f := range b.root.fields {
			row[name] = f.shape(m[name])
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

// plainValue converts a task value to the plain types the parquet writer
// knows: nil, bool, int64, float64, string, []byte, time.Time, []any and
// map[string]any. Other Go values (structs such as episode.Message, typed
// slices and maps) go through their JSON form.
func plainValue(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, []byte, time.Time:
		return x, nil
	case int, int8, int16, int32, uint, uint8, uint16, uint32, uint64:
		n, ok := anyval.Int64(x)
		if !ok {
			return nil, fmt.Errorf("integer %d does not fit in int64", x)
		}
		return n, nil
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
		maps.Copy(out, x) // the caller's task is left as it is
		if err := convertChildren(out, plainValue); err != nil {
			return nil, err
		}
		return out, nil
	case []any:
		out := append([]any{}, x...)
		if err := convertChildren(out, plainValue); err != nil {
			return nil, err
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
