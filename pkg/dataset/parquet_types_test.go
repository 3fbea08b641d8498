package dataset

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// typedRow has one column of each logical type the leaf mapping of
// parquet_read.go documents, as other writers (pyarrow, Spark, Go) make
// them.
type typedRow struct {
	Enum   string           `parquet:"enum,enum"`
	UUID   [16]byte         `parquet:"uuid,uuid"`
	JSON   []byte           `parquet:"json,json"`
	Dec32  int32            `parquet:"dec32,decimal(2:9)"`
	Dec64  int64            `parquet:"dec64,decimal(3:18)"`
	DecFix [8]byte          `parquet:"decfix,decimal(1:18)"`
	Date   int32            `parquet:"date,date"`
	TS     time.Time        `parquet:"ts,timestamp(millisecond)"`
	TSNano int64            `parquet:"tsnano,timestamp(nanosecond)"`
	TimeMs int32            `parquet:"time_ms,time(millisecond)"`
	U32    uint32           `parquet:"u32"`
	U64    uint64           `parquet:"u64"`
	I8     int8             `parquet:"i8"`
	F32    float32          `parquet:"f32"`
	Bytes  []byte           `parquet:"bytes"`
	Fixed  [4]byte          `parquet:"fixed"`
	M      map[string]int64 `parquet:"m"`
	Legacy []int32          `parquet:"legacy"` // a bare repeated column
}

func TestParquetLogicalTypes(t *testing.T) {
	day := time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)
	ts := time.Date(2024, 2, 29, 13, 14, 15, 123e6, time.UTC)
	rows := []typedRow{{
		Enum: "RED", UUID: [16]byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8},
		JSON: []byte(`{"a":[1,2.5,"x"]}`), Dec32: 123456789, Dec64: -5, DecFix: [8]byte{0, 0, 0, 0, 0, 0, 0, 25},
		Date: int32(day.Unix() / 86400), TS: ts, TSNano: ts.UnixNano(), TimeMs: (13*3600 + 14*60 + 15) * 1000,
		U32: 4000000000, U64: 1 << 63, I8: -7, F32: 0.1, Bytes: []byte{0, 1, 255}, Fixed: [4]byte{'a', 'b', 'c', 'd'},
		M: map[string]int64{"k": 3}, Legacy: []int32{4, 5},
	}}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[typedRow](&buf)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	must(t, w.Close())
	path := filepath.Join(t.TempDir(), "typed.parquet")
	must(t, os.WriteFile(path, buf.Bytes(), 0o644))
	got, err := ReadAll(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []episode.Task{{
		"enum": "RED", "uuid": "12345678-9abc-def0-0102-030405060708",
		"json": map[string]any{"a": []any{int64(1), 2.5, "x"}}, "dec32": 1234567.89, "dec64": -0.005, "decfix": 2.5,
		"date": day, "ts": ts, "tsnano": ts, "time_ms": "13:14:15",
		"u32": int64(4000000000), "u64": uint64(1 << 63), "i8": int64(-7), "f32": 0.1,
		"bytes": []byte{0, 1, 255}, "fixed": []byte("abcd"),
		"m": map[string]any{"k": int64(3)}, "legacy": []any{int64(4), int64(5)},
	}}
	if len(got) == 1 {
		for k, w := range want[0] {
			if !reflect.DeepEqual(got[0][k], w) {
				t.Errorf("%s: got %#v (%T), want %#v (%T)", k, got[0][k], got[0][k], w, w)
			}
		}
	}
	assertTasks(t, got, want)
}
