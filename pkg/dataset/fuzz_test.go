package dataset

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/parquet-go/parquet-go"

	"bufio"
	"bytes"
	"context"
	"errors"
	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// The readers parse files users bring, so no input may panic them; every
// failure must be a *Error (the bytes come from memory, so there are no
// I/O errors to excuse).

const fuzzMaxRows = 1000

// fuzzMaxRow is a row bound small enough for fuzzed inputs to cross it.
const fuzzMaxRow = 512

func fuzzBudget(b []byte) *boundedio.LimitReader {
	l := boundedio.NewLimitReader(bytes.NewReader(b), "f", fuzzMaxRow)
	l.What = "row"
	return l
}

func drain(t *testing.T, src rowSource) {
	for range fuzzMaxRows {
		task, err := src.next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("error %v (%T) is not a *dataset.Error", err, err)
			}
			return
		}
		if task == nil {
			t.Fatal("nil task without an error")
		}
	}
}

func addTextSeeds(f *testing.F, ext string) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*"+ext))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err == nil {
			f.Add(b)
		}
	}
}

func FuzzJSONL(f *testing.F) {
	addTextSeeds(f, ".jsonl")
	for _, s := range []string{"", "\n\n", "{}", "[]", "{\"a\":1e999}", "{\"a\":", "\ufeff{}", "{} {}", "null", "{\"a\":[1,{\"b\":-0.0}]}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		drain(t, newJSONLSource("f.jsonl", bufio.NewReaderSize(bytes.NewReader(b), 16), fuzzMaxRow))
	})
}

func FuzzJSON(f *testing.F) {
	addTextSeeds(f, ".json")
	for _, s := range []string{"", "[", "[]", "{}", "{\"a\":[{}],\"b\":[{}]}", "{\"a\":{\"b\":[1]}}", "[{}] x", "42", "\"s\"", "[1]", "{\"d\":[{}]", "]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		budget := fuzzBudget(b)
		drain(t, newJSONSource("f.json", bufio.NewReaderSize(budget, 16), budget, fuzzMaxRow))
	})
}

func FuzzCSV(f *testing.F) {
	addTextSeeds(f, ".csv")
	for _, s := range []string{"", "a", "a,b\n1", "a,,a\n1,2,3", "\"a\n", "a\n\"x\"y", "\ufeffa\n-0.5e3"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		budget := fuzzBudget(b)
		drain(t, newCSVSource("f.csv", bufio.NewReaderSize(budget, 16), false, budget, fuzzMaxRow))
	})
}

func FuzzParquet(f *testing.F) {
	// Small seeds: the fuzzer minimizes every new input, which is slow on
	// files of kilobytes. (Run with -fuzzminimizetime 5s.)
	dir := f.TempDir()
	for i, tasks := range [][]episode.Task{
		{{"q": "x", "n": int64(1)}},
		{{"prompt": []any{map[string]any{"role": "user"}}, "rm": map[string]any{"gt": 1.5}, "ok": true}},
		{{"tags": []any{"a", nil}}, {"tags": nil}},
	} {
		path := filepath.Join(dir, fmt.Sprintf("seed%d.parquet", i))
		if Write(context.Background(), path, tasks, WriteOptions{}) == nil {
			if b, err := os.ReadFile(path); err == nil {
				f.Add(b)
			}
		}
	}
	var buf bytes.Buffer
	pw := parquet.NewGenericWriter[hfRow](&buf, parquet.MaxRowsPerRowGroup(1))
	if _, err := pw.Write(hfRows[1:3]); err == nil && pw.Close() == nil {
		f.Add(buf.Bytes())
	}
	f.Add([]byte("PAR1"))
	f.Add([]byte("PAR1PAR1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		src, err := newParquetSource("f.parquet", bytes.NewReader(b), int64(len(b)))
		if err != nil {
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("open error %v (%T) is not a *dataset.Error", err, err)
			}
			return
		}
		defer src.Close()
		drain(t, src)
	})
}

func TestParquetFooterClaims(t *testing.T) {
	file := func(footer ...byte) []byte {
		b := append([]byte("PAR1"), footer...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(footer)))
		return append(b, "PAR1"...)
	}
	tests := []struct {
		name    string
		data    []byte
		wantErr string // "" when the footer passes the check
	}{
		{"list of one empty struct", file(0x19, 0x1c, 0x00, 0x00), ""},
		{"list claiming 2^31 structs", file(0x19, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x07, 0x00), "a length exceeds the bytes left"},
		{"string claiming 1 GiB", file(0x18, 0x80, 0x80, 0x80, 0x80, 0x04, 0x00), "a length exceeds the bytes left"},
		{"map claiming a million entries", file(0x1b, 0x80, 0x89, 0x7a, 0x88, 0x00), "a length exceeds the bytes left"},
		{"unterminated struct", file(0x15, 0x02), "a length exceeds the bytes left"},
		{"footer longer than the file", append([]byte("PAR1\x00\xff\xff\xff\x7f"), "PAR1"...), "footer length 2147483647 exceeds the file size 13"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkParquetFooter(bytes.NewReader(tt.data), int64(len(tt.data)))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("valid footer refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
			}
			_, err = newParquetSource("x.parquet", bytes.NewReader(tt.data), int64(len(tt.data)))
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("newParquetSource: %v is not a *dataset.Error", err)
			}
		})
	}
}
