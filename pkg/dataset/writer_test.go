package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// roundTripTasks exercises every kind of value a task holds.
var roundTripTasks = []episode.Task{
	{
		"question": "What is 7 + 5?", "ground_truth": int64(12), "data_source": "toy",
		"score": int64(3), // the column mixes ints and floats
		"prompt": []any{
			map[string]any{"role": "system", "content": "Be brief."},
			map[string]any{"role": "user", "content": "What is 7 + 5?"},
		},
		"reward_model": map[string]any{"ground_truth": "12", "style": "rule"},
		"extra_info":   map[string]any{"index": int64(0), "nested": map[string]any{"deep": []any{int64(1), int64(2)}}},
		"ok":           true,
		"tags":         []any{"a", nil, "b"},
	},
	{
		"question": "λ? \"quoted\" <html> & unicode ✓", "ground_truth": "3/4",
		"score":        2.5,
		"prompt":       []any{},
		"reward_model": map[string]any{"ground_truth": "3/4"},
		"extra_info":   nil,
		"ok":           false,
		"tags":         nil,
		"only_here":    int64(math.MinInt64),
	},
	{
		"question": "", "ground_truth": nil, "data_source": "toy",
		"score": -1e-300,
		"tags":  []any{},
	},
}

// asParquetReadsIt is roundTripTasks as a parquet file reads back: every
// row has every column (absent ones null), the int/float column is
// float64, and absent struct fields are null.
func asParquetReadsIt() []episode.Task {
	return []episode.Task{
		{
			"question": "What is 7 + 5?", "ground_truth": nil, "data_source": "toy", "score": 3.0,
			"prompt": []any{
				map[string]any{"role": "system", "content": "Be brief."},
				map[string]any{"role": "user", "content": "What is 7 + 5?"},
			},
			"reward_model": map[string]any{"ground_truth": "12", "style": "rule"},
			"extra_info":   map[string]any{"index": int64(0), "nested": map[string]any{"deep": []any{int64(1), int64(2)}}},
			"ok":           true, "tags": []any{"a", nil, "b"}, "only_here": nil,
		},
		{
			"question": "λ? \"quoted\" <html> & unicode ✓", "ground_truth": "3/4", "data_source": nil, "score": 2.5,
			"prompt":       []any{},
			"reward_model": map[string]any{"ground_truth": "3/4", "style": nil},
			"extra_info":   nil, "ok": false, "tags": nil, "only_here": int64(math.MinInt64),
		},
		{
			"question": "", "ground_truth": nil, "data_source": "toy", "score": -1e-300,
			"prompt": nil, "reward_model": nil, "extra_info": nil, "ok": nil, "tags": []any{}, "only_here": nil,
		},
	}
}

func TestRoundTrip(t *testing.T) {
	// ground_truth mixes int and string, which parquet refuses; drop it
	// from the parquet run's first row.
	pqTasks := cloneTasks(roundTripTasks)
	delete(pqTasks[0], "ground_truth")
	tests := []struct {
		file  string
		tasks []episode.Task
		want  []episode.Task
	}{
		{"out.jsonl", roundTripTasks, roundTripTasks},
		{"out.json", roundTripTasks, roundTripTasks},
		{"out.parquet", pqTasks, asParquetReadsIt()},
		{"empty.jsonl", nil, nil},
		{"empty.json", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, tt.file)
			if err := Write(context.Background(), path, tt.tasks, WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			got, err := ReadAll(context.Background(), path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			assertTasks(t, got, tt.want)
			assertOnlyFiles(t, dir, tt.file)
		})
	}
}

func TestRoundTripHFFixture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "copy.parquet")
	must(t, Write(context.Background(), path, hfWant, WriteOptions{}))
	got, err := ReadAll(context.Background(), path, Options{})
	must(t, err)
	assertTasks(t, got, hfWant)
}

func TestWriteGoValues(t *testing.T) {
	// Values a generator may put in a task, and what they read back as.
	when := time.Date(2024, 5, 1, 12, 30, 0, 123456000, time.UTC)
	in := []episode.Task{{
		"int": 7, "int32": int32(-2), "uint8": uint8(200), "float32": float32(0.1),
		"strings":  []string{"x", "y"},
		"messages": []episode.Message{{Role: "user", Content: "hi"}},
		"labels":   map[string]int{"a": 1},
		"number":   json.Number("12"),
		"raw":      json.RawMessage(`{"k":[1,2.5]}`),
		"bytes":    []byte{0, 1, 2},
		"when":     when,
		"task":     episode.Task{"inner": "yes"},
		"nested":   map[string]any{"n": 3, "l": []any{4}},
	}}
	want := episode.Task{
		"int": int64(7), "int32": int64(-2), "uint8": int64(200), "float32": 0.1,
		"strings":  []any{"x", "y"},
		"messages": []any{map[string]any{"role": "user", "content": "hi"}},
		"labels":   map[string]any{"a": int64(1)},
		"number":   int64(12),
		"raw":      map[string]any{"k": []any{1.0, 2.5}}, // one column: ints widen to float
		"bytes":    []byte{0, 1, 2},
		"when":     when,
		"task":     map[string]any{"inner": "yes"},
		"nested":   map[string]any{"n": int64(3), "l": []any{int64(4)}},
	}
	path := filepath.Join(t.TempDir(), "go.parquet")
	must(t, Write(context.Background(), path, in, WriteOptions{}))
	if nested := in[0]["nested"]; !reflect.DeepEqual(nested, map[string]any{"n": 3, "l": []any{4}}) {
		t.Errorf("Write changed the caller's task: %#v", nested)
	}
	got, err := ReadAll(context.Background(), path, Options{})
	must(t, err)
	assertTasks(t, got, []episode.Task{want})
}

// TestParquetSchemaIsPlain checks the schema is the one pyarrow (and so
// `datasets.load_dataset("parquet")`) reads as plain columns: optional
// fields, standard three-level LISTs named list/element, STRING and
// INT(64) annotations.
func TestParquetSchemaIsPlain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "schema.parquet")
	must(t, Write(context.Background(), path, hfWant, WriteOptions{}))
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	info, err := f.Stat()
	must(t, err)
	pf, err := parquet.OpenFile(f, info.Size())
	must(t, err)
	schema := pf.Schema().String()
	for _, want := range []string{
		"optional group prompt (LIST) {\n\t\trepeated group list {\n\t\t\toptional group element {",
		"optional binary content (STRING);",
		"optional group reward_model {",
		"optional int64 index (INT(64,true));",
		"optional double difficulty;",
		"optional boolean verified;",
		"optional group tags (LIST) {\n\t\trepeated group list {\n\t\t\toptional binary element (STRING);",
	} {
		if !strings.Contains(schema, want) {
			t.Errorf("schema lacks %q:\n%s", want, schema)
		}
	}

	// An independent reader, parquet-go's struct reader, sees the rows too.
	type message struct {
		Content *string `parquet:"content,optional"`
		Role    *string `parquet:"role,optional"`
	}
	type row struct {
		DataSource *string   `parquet:"data_source,optional"`
		Prompt     []message `parquet:"prompt,optional,list" parquet-element:",optional"`
		Level      *int64    `parquet:"level,optional"`
	}
	rows := make([]row, len(hfWant))
	n, err := parquet.NewGenericReader[row](f).Read(rows)
	if n != len(hfWant) {
		t.Fatalf("struct reader read %d rows (%v), want %d", n, err, len(hfWant))
	}
	if rows[1].Prompt[1].Content == nil || *rows[1].Prompt[1].Content != "What is 2^10?" || *rows[0].Level != 1 || rows[3].DataSource != nil {
		t.Errorf("struct reader rows differ: %+v", rows[:2])
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, file string
		tasks      []episode.Task
		want       string
	}{
		{"mixed types", "mixed.parquet", []episode.Task{{"a": "x"}, {"a": int64(1)}},
			"mixed.parquet: row 1: column \"a\" holds an integer here but a string in an earlier row; parquet holds one type per column (write .jsonl to keep mixed types)"},
		{"mixed nested types", "nested.parquet", []episode.Task{{"m": map[string]any{"l": []any{"x", true}}}},
			"nested.parquet: row 0: column \"m.l[]\" holds a boolean here but a string in an earlier row; parquet holds one type per column (write .jsonl to keep mixed types)"},
		{"no columns", "empty.parquet", []episode.Task{{}, {}}, "empty.parquet: cannot write parquet without columns: every task is empty"},
		{"NaN in JSON", "nan.jsonl", []episode.Task{{"a": 1.0}, {"a": math.NaN()}}, "nan.jsonl: row 1: cannot encode the task as JSON: json: unsupported value: NaN"},
		{"uint64 beyond int64", "big.parquet", []episode.Task{{"a": uint64(math.MaxUint64)}},
			"big.parquet: row 0: cannot write the task: field \"a\": integer 18446744073709551615 does not fit in int64"},
		{"csv", "out.csv", nil, "out.csv: writing CSV is not supported; write .parquet, .jsonl or .json"},
		{"unknown extension", "out.yaml", nil, "out.yaml: unknown dataset extension \".yaml\"; use one of .parquet, .jsonl, .ndjson, .json, .csv or set the format explicitly"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.file)
			err := Write(context.Background(), path, tt.tasks, WriteOptions{})
			assertUserError(t, err, filepath.Join(dir, tt.want))
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed write left %s behind", tt.file)
			}
		})
	}
	assertOnlyFiles(t, dir)
}

func TestWriterKeepsOldFileUntilClose(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "train.jsonl")
	must(t, os.WriteFile(path, []byte("{\"old\":1}\n"), 0o644))

	w, err := Create(path, WriteOptions{})
	must(t, err)
	must(t, w.Write(episode.Task{"new": int64(1)}))
	got, err := ReadAll(context.Background(), path, Options{})
	must(t, err)
	assertTasks(t, got, []episode.Task{{"old": int64(1)}})
	w.Abort()
	got, err = ReadAll(context.Background(), path, Options{})
	must(t, err)
	assertTasks(t, got, []episode.Task{{"old": int64(1)}})
	assertOnlyFiles(t, dir, "train.jsonl")

	w, err = Create(path, WriteOptions{Format: FormatJSONL})
	must(t, err)
	must(t, w.Write(episode.Task{"new": int64(1)}))
	must(t, w.Close())
	if err := w.Write(episode.Task{}); err == nil {
		t.Error("Write after Close succeeded")
	}
	got, err = ReadAll(context.Background(), path, Options{})
	must(t, err)
	assertTasks(t, got, []episode.Task{{"new": int64(1)}})
	assertOnlyFiles(t, dir, "train.jsonl")
}

func TestWriteCancelled(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Write(ctx, filepath.Join(dir, "x.jsonl"), mathTasks, WriteOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	assertOnlyFiles(t, dir)
}

func assertOnlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if len(got) != len(names) || (len(names) > 0 && !reflect.DeepEqual(got, names)) {
		t.Errorf("directory holds %v, want %v", got, names)
	}
}

func cloneTasks(tasks []episode.Task) []episode.Task {
	out := make([]episode.Task, len(tasks))
	for i, t := range tasks {
		out[i] = make(episode.Task, len(t))
		for k, v := range t {
			out[i][k] = v
		}
	}
	return out
}

func TestWriteJSONText(t *testing.T) {
	dir := t.TempDir()
	tasks := []episode.Task{{"q": "<a & b>", "n": int64(1)}, {"q": "λ"}}
	for file, want := range map[string]string{
		"a.json":  "[\n  {\"n\":1,\"q\":\"<a & b>\"},\n  {\"q\":\"λ\"}\n]\n",
		"a.jsonl": "{\"n\":1,\"q\":\"<a & b>\"}\n{\"q\":\"λ\"}\n",
		"e.json":  "[]\n",
	} {
		in := tasks
		if file == "e.json" {
			in = nil
		}
		path := filepath.Join(dir, file)
		must(t, Write(context.Background(), path, in, WriteOptions{}))
		got, err := os.ReadFile(path)
		must(t, err)
		if string(got) != want {
			t.Errorf("%s:\n got %q\nwant %q", file, got, want)
		}
	}
}

func TestCreateInMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	_, err := Create(filepath.Join(dir, "x.jsonl"), WriteOptions{})
	assertUserError(t, err, filepath.Join(dir, "x.jsonl")+": the directory "+dir+" does not exist; create it first")
}
