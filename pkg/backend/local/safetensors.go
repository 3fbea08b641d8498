package local

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// The safetensors format (as written by the Hugging Face library): an
// 8-byte little-endian header length N, N bytes of JSON mapping each
// tensor name to {dtype, shape, data_offsets:[begin,end]} (offsets into the
// byte buffer after the header) plus an optional "__metadata__" map of
// strings, then the tensor bytes, contiguous and in little-endian order.
// Only F32 tensors are read and written here.

// maxHeader bounds the JSON header a reader accepts (the library's limit).
const maxHeader = 100 << 20

type tensor struct {
	Shape []int
	Data  []float32
}

type tensorHeader struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// writeSafetensors writes tensors in the order of names.
func writeSafetensors(w io.Writer, names []string, tensors map[string]tensor, metadata map[string]string) error {
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for _, n := range names {
		t := tensors[n]
		size := int64(len(t.Data)) * 4
		header[n] = tensorHeader{DType: "F32", Shape: t.Shape, DataOffsets: [2]int64{off, off + size}}
		off += size
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	// Pad the header with spaces so the data starts 8-byte aligned.
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	buf := make([]byte, 8, 8+len(h)+int(off))
	binary.LittleEndian.PutUint64(buf, uint64(len(h)))
	buf = append(buf, h...)
	for _, n := range names {
		for _, v := range tensors[n].Data {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
	}
	_, err = w.Write(buf)
	return err
}

// parseSafetensors reads a whole file's bytes. file names it in errors.
func parseSafetensors(file string, b []byte) (map[string]tensor, map[string]string, error) {
	bad := func(format string, args ...any) error {
		// A file that is not valid safetensors: named, with the fix.
		return &usererr.Error{Subject: file, Msg: "not a valid safetensors file: " + fmt.Sprintf(format, args...), Fix: "the file is truncated or corrupt; save it again"}
	}
	if len(b) < 8 {
		return nil, nil, bad("it has %d bytes, fewer than the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeader || n > uint64(len(b)-8) {
		return nil, nil, bad("the header length %d exceeds the file's %d remaining bytes", n, len(b)-8)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b[8 : 8+n]))
	if err := dec.Decode(&raw); err != nil {
		return nil, nil, bad("its JSON header does not parse: %v", err)
	}
	data := b[8+n:]
	var metadata map[string]string
	type span struct {
		name       string
		begin, end int64
	}
	var spans []span
	tensors := map[string]tensor{}
	names := slices.Sorted(maps.Keys(raw))
	for _, name := range names {
		msg := raw[name]
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &metadata); err != nil {
				return nil, nil, bad("__metadata__ is not a map of strings: %v", err)
			}
			continue
		}
		var th tensorHeader
		if err := json.Unmarshal(msg, &th); err != nil {
			return nil, nil, bad("tensor %q has a malformed entry: %v", name, err)
		}
		if th.DType != "F32" {
			return nil, nil, bad("tensor %q has dtype %q; only F32 is supported", name, th.DType)
		}
		count := int64(1)
		for _, s := range th.Shape {
			if s < 0 || s > 1<<31 || count*int64(s) > int64(len(data)) {
				return nil, nil, bad("tensor %q has shape %v, larger than the file", name, th.Shape)
			}
			count *= int64(s)
		}
		begin, end := th.DataOffsets[0], th.DataOffsets[1]
		if begin < 0 || end < begin || end > int64(len(data)) {
			return nil, nil, bad("tensor %q has data_offsets [%d, %d] outside the %d data bytes", name, begin, end, len(data))
		}
		if end-begin != count*4 {
			return nil, nil, bad("tensor %q has shape %v (%d bytes) but data_offsets span %d bytes", name, th.Shape, count*4, end-begin)
		}
		spans = append(spans, span{name, begin, end})
		vals := make([]float32, count)
		for i := range vals {
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[begin+4*int64(i):]))
		}
		tensors[name] = tensor{Shape: slices.Clone(th.Shape), Data: vals}
	}
	// The format requires the tensors to tile the data buffer exactly.
	sort.Slice(spans, func(i, j int) bool { return spans[i].begin < spans[j].begin })
	var at int64
	for _, s := range spans {
		if s.begin != at {
			return nil, nil, bad("tensor %q starts at byte %d, expected %d (overlapping or gapped data)", s.name, s.begin, at)
		}
		at = s.end
	}
	if at != int64(len(data)) {
		return nil, nil, bad("the tensors cover %d bytes but %d data bytes follow the header", at, len(data))
	}
	return tensors, metadata, nil
}
