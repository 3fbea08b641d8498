package dataset

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// mathTasks is what testdata/math.{jsonl,json} and math_wrapped.json hold.
var mathTasks = []episode.Task{
	{"id": int64(1), "question": "What is 7 + 5?", "ground_truth": int64(12), "data_source": "toy_math"},
	{"id": int64(2), "question": "What is 1/2 + 1/4?", "ground_truth": "3/4", "data_source": "toy_math",
		"extra_info": map[string]any{"split": "train", "index": int64(1)}},
	{"id": int64(3), "question": "Is 7 prime?", "ground_truth": true, "data_source": "toy_logic",
		"tags": []any{"prime", "number theory"}, "difficulty": 0.25, "hint": nil},
}

func TestReadFixtures(t *testing.T) {
	csvTyped := []episode.Task{
		{"Unnamed: 0": int64(0), "problem": "What is 7 + 5?", "answer": int64(12), "data_source": "toy_math", "level": int64(1)},
		{"Unnamed: 0": int64(1), "problem": "What is 1/2 + 1/4, in lowest terms?", "answer": "3/4", "data_source": "toy_math", "level": int64(2)},
		{"Unnamed: 0": int64(2), "problem": `Write the number "zero" as a digit`, "answer": "007", "data_source": "toy_math", "level": nil},
		{"Unnamed: 0": int64(3), "problem": "Half of 3?", "answer": 1.5, "data_source": "toy_math", "level": int64(2)},
	}
	csvStrings := []episode.Task{
		{"Unnamed: 0": "0", "problem": "What is 7 + 5?", "answer": "12", "data_source": "toy_math", "level": "1"},
		{"Unnamed: 0": "1", "problem": "What is 1/2 + 1/4, in lowest terms?", "answer": "3/4", "data_source": "toy_math", "level": "2"},
		{"Unnamed: 0": "2", "problem": `Write the number "zero" as a digit`, "answer": "007", "data_source": "toy_math", "level": ""},
		{"Unnamed: 0": "3", "problem": "Half of 3?", "answer": "1.5", "data_source": "toy_math", "level": "2"},
	}
	tests := []struct {
		file string
		opts Options
		want []episode.Task
	}{
		{"math.jsonl", Options{}, mathTasks},
		{"math.json", Options{}, mathTasks},
		{"math_wrapped.json", Options{}, mathTasks},
		{"math.csv", Options{}, csvTyped},
		{"math.csv", Options{CSVStrings: true}, csvStrings},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ReadAll(context.Background(), filepath.Join("testdata", tt.file), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			assertTasks(t, got, tt.want)
		})
	}
}

func assertTasks(t *testing.T, got, want []episode.Task) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d:\n%#v", len(got), len(want), got)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("row %d:\n got %#v\nwant %#v", i, got[i], want[i])
		}
	}
}

func TestReaderStreams(t *testing.T) {
	r, err := Open(context.Background(), filepath.Join("testdata", "math.jsonl"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.format != FormatJSONL {
		t.Errorf("format %q, want jsonl", r.format)
	}
	for i := range mathTasks {
		row, err := r.Next()
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if !reflect.DeepEqual(row, mathTasks[i]) {
			t.Errorf("row %d = %#v", i, row)
		}
	}
	for range 2 { // io.EOF is sticky
		if _, err := r.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("after the last row: %v, want io.EOF", err)
		}
	}
	if r.rows != len(mathTasks) {
		t.Errorf("Rows() = %d", r.rows)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestReadContent covers each text format's rules on small inline files.
func TestReadContent(t *testing.T) {
	tests := []struct {
		name, file, content string
		want                []episode.Task
	}{
		{"jsonl blank and whitespace lines", "a.jsonl", "\n  \n{\"a\":1}\r\n\t\n{\"a\":2}", []episode.Task{{"a": int64(1)}, {"a": int64(2)}}},
		{"jsonl BOM", "a.jsonl", "\ufeff{\"a\":1}\n", []episode.Task{{"a": int64(1)}}},
		{"jsonl empty file", "a.jsonl", "", nil},
		{"ndjson extension", "a.ndjson", "{\"a\":\"x\"}\n", []episode.Task{{"a": "x"}}},
		{"upper-case extension", "A.JSONL", "{\"a\":\"x\"}\n", []episode.Task{{"a": "x"}}},
		{"json numbers follow Python", "a.jsonl", `{"i":12,"f":12.0,"e":1e3,"neg":-7,"big":123456789012345678901234567890}`,
			[]episode.Task{{"i": int64(12), "f": 12.0, "e": 1000.0, "neg": int64(-7), "big": 1.2345678901234568e+29}}},
		{"nested numbers", "a.jsonl", `{"l":[1,[2.5,{"x":3}]]}`, []episode.Task{{"l": []any{int64(1), []any{2.5, map[string]any{"x": int64(3)}}}}}},
		{"json empty array", "a.json", " [ ] ", nil},
		{"json empty file", "a.json", "", nil},
		{"json wrapped, array first", "a.json", `{"rows":[{"a":1}],"n":1}`, []episode.Task{{"a": int64(1)}}},
		{"json BOM", "a.json", "\ufeff[{\"a\":1}]", []episode.Task{{"a": int64(1)}}},
		{"csv quoted newline", "a.csv", "q,a\n\"line1\nline2\",2\n", []episode.Task{{"q": "line1\nline2", "a": int64(2)}}},
		{"csv header only", "a.csv", "q,a\n", nil},
		{"csv duplicate columns as pandas", "a.csv", "a,a,a\n1,2,3\n", []episode.Task{{"a": int64(1), "a.1": int64(2), "a.2": int64(3)}}},
		{"csv BOM", "a.csv", "\ufeffq\nx\n", []episode.Task{{"q": "x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.file, tt.content)
			got, err := ReadAll(context.Background(), path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			assertTasks(t, got, tt.want)
		})
	}
}

func TestTypeCSVCell(t *testing.T) {
	tests := []struct {
		cell string
		want any
	}{
		{"", nil},
		{"12", int64(12)},
		{"-3", int64(-3)},
		{"0", int64(0)},
		{"1.5", 1.5},
		{"-0.25", -0.25},
		{"1e+21", 1e21},
		{"007", "007"},
		{"+3", "+3"},
		{"-0", "-0"},
		{"1.50", "1.50"},
		{"100.0", "100.0"},
		{"1e3", "1e3"},
		{"NaN", "NaN"},
		{"Inf", "Inf"},
		{"0x1F", "0x1F"},
		{"1_000", "1_000"},
		{"3/4", "3/4"},
		{"99999999999999999999", "99999999999999999999"},
		{" 12", " 12"},
		{"true", "true"},
	}
	for _, tt := range tests {
		if got := typeCSVCell(tt.cell); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("typeCSVCell(%q) = %#v, want %#v", tt.cell, got, tt.want)
		}
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, file, content string
		opts                Options
		want                string // the whole message after the directory
		rows                int    // rows read before the error
	}{
		{"jsonl invalid JSON", "train.jsonl", "{\"a\":1}\n\n{\"a\":", Options{}, "train.jsonl:3: invalid JSON: unexpected end of input (is the value cut short?)", 1},
		{"jsonl syntax", "train.jsonl", "{\"a\" 1}\n", Options{}, "train.jsonl:1: invalid JSON: invalid character '1' after object key", 0},
		{"jsonl array row", "train.jsonl", "{}\n[1,2]\n", Options{}, "train.jsonl:2: row is an array, not a JSON object", 1},
		{"jsonl string row", "train.jsonl", "\"hi\"\n", Options{}, "train.jsonl:1: row is a string, not a JSON object", 0},
		{"jsonl null row", "train.jsonl", "null\n", Options{}, "train.jsonl:1: row is null, not a JSON object", 0},
		{"jsonl two values", "train.jsonl", "{} {}\n", Options{}, "train.jsonl:1: invalid JSON: more than one value on the line; put one object per line", 0},
		{"jsonl huge number", "train.jsonl", "{\"x\":1e999}\n", Options{}, "train.jsonl:1: field \"x\": number 1e999 is out of range for a float64", 0},
		{"json row not object", "train.json", "[{}, 3]", Options{}, "train.json: row 1: row is a number, not a JSON object", 1},
		{"json truncated", "train.json", "[{\"a\":1}, {\"a\":", Options{}, "train.json: row 1: invalid JSON near byte 9: unexpected end of input (is the value cut short?)", 1},
		{"json scalar", "train.json", "42", Options{}, "train.json: top-level value is a number; a .json dataset is an array of objects or an object with one array field such as {\"data\": [...]} (for one object per line, name the file .jsonl)", 0},
		{"json object without array", "train.json", "{\"a\":1}\n{\"a\":2}", Options{}, "train.json: the top-level object has no array field; a .json dataset is an array of objects or an object with one array field such as {\"data\": [...]} (for one object per line, name the file .jsonl)", 0},
		{"json two array fields", "train.json", "{\"data\":[{}],\"more\":[{}]}", Options{}, "train.json: the top-level object has two array fields, \"data\" and \"more\"; keep the rows in one field", 1},
		{"json trailing data", "train.json", "[{}] [{}]", Options{}, "train.json: unexpected data after the top-level value (at byte 6); a .json dataset holds one array (for one object per line, name the file .jsonl)", 1},
		{"csv short row", "train.csv", "a,b\n1,2\n3\n", Options{}, "train.csv:3: row has 1 fields but the header has 2 columns", 1},
		{"csv bad quote", "train.csv", "a,b\n1,\"x\"y\n", Options{}, "train.csv:2: invalid CSV at column 5: extraneous or missing \" in quoted-field", 0},
		{"parquet garbage", "train.parquet", "not parquet at all", Options{}, "train.parquet: not a readable parquet file: invalid magic header of parquet file: \"not \"", 0},
		{"format override", "train.txt", "{\"a\":", Options{Format: FormatJSONL}, "train.txt:1: invalid JSON: unexpected end of input (is the value cut short?)", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.file)
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			rows, err := readCount(path, tt.opts)
			assertUserError(t, err, filepath.Join(dir, tt.want))
			if rows != tt.rows {
				t.Errorf("read %d rows before the error, want %d", rows, tt.rows)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "README"), nil, 0o644))
	must(t, os.Mkdir(filepath.Join(dir, "train.parquet"), 0o755))
	tests := []struct {
		name, path string
		opts       Options
		want       string
	}{
		{"missing", "missing.jsonl", Options{}, "missing.jsonl: no such file; check the path"},
		{"directory", "train.parquet", Options{}, "train.parquet: is a directory; give one dataset file (.parquet, .jsonl, .ndjson, .json, .csv)"},
		{"unknown extension", "notes.txt", Options{}, "notes.txt: unknown dataset extension \".txt\"; use one of .parquet, .jsonl, .ndjson, .json, .csv or set the format explicitly"},
		{"no extension", "README", Options{}, "README: cannot tell the dataset format without an extension; use one of .parquet, .jsonl, .ndjson, .json, .csv or set the format explicitly"},
		{"unknown format option", "notes.txt", Options{Format: "xml"}, "unknown dataset format \"xml\"; use one of parquet, jsonl, ndjson, json, csv"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(context.Background(), filepath.Join(dir, tt.path), tt.opts)
			want := tt.want
			if !strings.HasPrefix(want, "unknown dataset format") {
				want = filepath.Join(dir, want)
			}
			assertUserError(t, err, want)
		})
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"parquet": FormatParquet, ".JSONL": FormatJSONL, "ndjson": FormatJSONL, "json": FormatJSON, "CSV": FormatCSV} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestReadAllCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ReadAll(ctx, filepath.Join("testdata", "math.jsonl"), Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func readCount(path string, opts Options) (int, error) {
	r, err := Open(context.Background(), path, opts)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	for {
		if _, err := r.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				return r.rows, nil
			}
			return r.rows, err
		}
	}
}

// assertUserError checks the message and that the error is one a user
// fixes (exit code 2).
func assertUserError(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	if err.Error() != want {
		t.Errorf("error\n got %q\nwant %q", err.Error(), want)
	}
	var ec interface{ ExitCode() int }
	if !errors.As(err, &ec) || ec.ExitCode() != 2 {
		t.Errorf("error %q does not carry exit code 2", err)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	must(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
