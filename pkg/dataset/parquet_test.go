package dataset

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

var update = flag.Bool("update", false, "regenerate testdata/hf_export.parquet")

// The HF-export fixture has the shape verl/rLLM math datasets have after
// `datasets.Dataset.to_parquet` (pyarrow): every column optional, a list
// of chat messages, nested structs reward_model and extra_info,
// list elements that may be null, PLAIN, dictionary and delta encoded
// strings, zstd and snappy compression, 32-bit ints and
// floats next to 64-bit ones, and rows spread over several row groups. It
// is written with parquet-go's own struct writer, not ours, so reading it
// tests the reader against an independent writer.
type hfMessage struct {
	Content *string `parquet:"content,optional,plain"`
	Role    *string `parquet:"role,optional"`
}

type hfRewardModel struct {
	GroundTruth *string `parquet:"ground_truth,optional,plain"`
	Style       *string `parquet:"style,optional"`
}

type hfExtraInfo struct {
	Index *int64  `parquet:"index,optional"`
	Split *string `parquet:"split,optional"`
}

type hfRow struct {
	DataSource  *string        `parquet:"data_source,optional,dict,zstd"`
	Prompt      []hfMessage    `parquet:"prompt,optional,list" parquet-element:",optional"`
	Ability     *string        `parquet:"ability,optional,dict"`
	RewardModel *hfRewardModel `parquet:"reward_model,optional"`
	ExtraInfo   *hfExtraInfo   `parquet:"extra_info,optional"`
	Level       *int32         `parquet:"level,optional"`
	Score       *float32       `parquet:"score,optional"`
	Difficulty  *float64       `parquet:"difficulty,optional"`
	Verified    *bool          `parquet:"verified,optional"`
	Tags        []*string      `parquet:"tags,optional,list" parquet-element:",optional"`
}

func ptr[T any](v T) *T { return &v }

func msg(role, content string) hfMessage { return hfMessage{Role: &role, Content: &content} }

var hfRows = []hfRow{
	{
		DataSource:  ptr("openai/gsm8k"),
		Prompt:      []hfMessage{msg("user", "Natalia sold 48 clips in April and half as many in May. How many in total?")},
		Ability:     ptr("math"),
		RewardModel: &hfRewardModel{GroundTruth: ptr("72"), Style: ptr("rule")},
		ExtraInfo:   &hfExtraInfo{Index: ptr(int64(0)), Split: ptr("train")},
		Level:       ptr(int32(1)),
		Score:       ptr(float32(0.1)),
		Difficulty:  ptr(0.5),
		Verified:    ptr(true),
		Tags:        []*string{ptr("arithmetic"), ptr("word problem")},
	},
	{
		DataSource:  ptr("openai/gsm8k"),
		Prompt:      []hfMessage{msg("system", "Think step by step."), msg("user", "What is 2^10?")},
		Ability:     ptr("math"),
		RewardModel: &hfRewardModel{GroundTruth: ptr("1024"), Style: nil},
		ExtraInfo:   &hfExtraInfo{Index: ptr(int64(1)), Split: nil},
		Verified:    ptr(false),
	},
	{
		DataSource:  ptr("deepscaler"),
		Prompt:      []hfMessage{{Role: ptr("user"), Content: nil}},
		RewardModel: nil,
		ExtraInfo:   &hfExtraInfo{},
		Level:       ptr(int32(-3)),
		Tags:        []*string{ptr("λ-calculus")},
	},
	{},
	{
		DataSource:  ptr("deepscaler"),
		Prompt:      []hfMessage{msg("user", "Compute $\\int_0^1 x\\,dx$.")},
		Ability:     ptr("math"),
		RewardModel: &hfRewardModel{GroundTruth: ptr("\\frac{1}{2}"), Style: ptr("rule")},
		ExtraInfo:   &hfExtraInfo{Index: ptr(int64(1) << 40), Split: ptr("test")},
		Score:       ptr(float32(2.5)),
		Difficulty:  ptr(-1e-9),
		Tags:        []*string{ptr("calculus"), nil, ptr(""), ptr("integrals")},
	},
}

// hfWant is hfRows as tasks: null where a pointer is nil or a list has no
// elements, every integer int64, every float float64 (the float32 0.1
// keeps its shortest form).
var hfWant = []episode.Task{
	{
		"data_source":  "openai/gsm8k",
		"prompt":       []any{map[string]any{"role": "user", "content": "Natalia sold 48 clips in April and half as many in May. How many in total?"}},
		"ability":      "math",
		"reward_model": map[string]any{"ground_truth": "72", "style": "rule"},
		"extra_info":   map[string]any{"index": int64(0), "split": "train"},
		"level":        int64(1), "score": 0.1, "difficulty": 0.5, "verified": true,
		"tags": []any{"arithmetic", "word problem"},
	},
	{
		"data_source": "openai/gsm8k",
		"prompt": []any{
			map[string]any{"role": "system", "content": "Think step by step."},
			map[string]any{"role": "user", "content": "What is 2^10?"},
		},
		"ability":      "math",
		"reward_model": map[string]any{"ground_truth": "1024", "style": nil},
		"extra_info":   map[string]any{"index": int64(1), "split": nil},
		"level":        nil, "score": nil, "difficulty": nil, "verified": false,
		"tags": nil,
	},
	{
		"data_source":  "deepscaler",
		"prompt":       []any{map[string]any{"role": "user", "content": nil}},
		"ability":      nil,
		"reward_model": nil,
		"extra_info":   map[string]any{"index": nil, "split": nil},
		"level":        int64(-3), "score": nil, "difficulty": nil, "verified": nil,
		"tags": []any{"λ-calculus"},
	},
	{
		"data_source": nil, "prompt": nil, "ability": nil, "reward_model": nil, "extra_info": nil,
		"level": nil, "score": nil, "difficulty": nil, "verified": nil, "tags": nil,
	},
	{
		"data_source":  "deepscaler",
		"prompt":       []any{map[string]any{"role": "user", "content": "Compute $\\int_0^1 x\\,dx$."}},
		"ability":      "math",
		"reward_model": map[string]any{"ground_truth": "\\frac{1}{2}", "style": "rule"},
		"extra_info":   map[string]any{"index": int64(1) << 40, "split": "test"},
		"level":        nil, "score": 2.5, "difficulty": -1e-9, "verified": nil,
		"tags": []any{"calculus", nil, "", "integrals"},
	},
}

func writeHFFixture(w io.Writer) error {
	pw := parquet.NewGenericWriter[hfRow](w,
		parquet.Compression(&parquet.Snappy),
		parquet.MaxRowsPerRowGroup(2),
	)
	if _, err := pw.Write(hfRows); err != nil {
		return err
	}
	return pw.Close()
}

const hfFixture = "testdata/hf_export.parquet"

func TestHFExportFixture(t *testing.T) {
	if *update {
		var buf bytes.Buffer
		must(t, writeHFFixture(&buf))
		must(t, os.WriteFile(hfFixture, buf.Bytes(), 0o644))
	}
	got, err := ReadAll(context.Background(), hfFixture, Options{})
	if err != nil {
		t.Fatal(err)
	}
	assertTasks(t, got, hfWant)

	// The committed file and a fresh one from the generator read the same,
	// so the fixture cannot drift from the code that documents it.
	var buf bytes.Buffer
	must(t, writeHFFixture(&buf))
	fresh := filepath.Join(t.TempDir(), "fresh.parquet")
	must(t, os.WriteFile(fresh, buf.Bytes(), 0o644))
	got, err = ReadAll(context.Background(), fresh, Options{})
	if err != nil {
		t.Fatal(err)
	}
	assertTasks(t, got, hfWant)
}

func TestHFExportFixtureHasSeveralRowGroups(t *testing.T) {
	f, err := os.Open(hfFixture)
	must(t, err)
	defer f.Close()
	info, err := f.Stat()
	must(t, err)
	pf, err := parquet.OpenFile(f, info.Size())
	must(t, err)
	if n := len(pf.RowGroups()); n < 2 {
		t.Fatalf("fixture has %d row groups; reading across row groups goes untested", n)
	}
}

func TestParquetTruncated(t *testing.T) {
	data, err := os.ReadFile(hfFixture)
	must(t, err)
	for _, cut := range []int{0, 3, 4, 8, len(data) / 2, len(data) - 8, len(data) - 1} {
		path := writeFile(t, "cut.parquet", string(data[:cut]))
		_, err := readCount(path, Options{})
		var de *Error
		if !errors.As(err, &de) {
			t.Errorf("cut at %d: err = %v, want a *dataset.Error", cut, err)
		}
	}
}
