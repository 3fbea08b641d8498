package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/rllm-org/rllm-go/internal/fakehub"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

const fakeGSMCard = `---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
---
`

// cmdFakeHub starts a fake Hugging Face Hub (internal/fakehub) holding
// openai/gsm8k in the Hub's layout, a gated org/gated and a plain
// org/plain (test.jsonl), and points HF_ENDPOINT at it.
//
//	fakehub
func cmdFakeHub(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) > 0 {
		ts.Fatalf("usage: fakehub")
	}
	h, err := newFakeHub(ts.MkAbs("pq"))
	ts.Check(err)
	ts.Defer(h.Close)
	ts.Setenv("HF_ENDPOINT", h.URL())
}

// newFakeHub is a fake Hub holding openai/gsm8k in the Hub's layout
// (parquet files written under tmp), HuggingFaceH4/MATH-500, a gated org/gated (token
// hf_granted) and a plain org/plain (test.jsonl).
func newFakeHub(tmp string) (*fakehub.Hub, error) {
	pq := func(name string, rows []episode.Task) ([]byte, error) {
		p := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := dataset.Write(context.Background(), p, rows, dataset.WriteOptions{}); err != nil {
			return nil, err
		}
		return os.ReadFile(p)
	}
	rows := func(n, off int) []episode.Task {
		var out []episode.Task
		for i := range n {
			a, b := i+off, 2*i+1
			out = append(out, episode.Task{"question": fmt.Sprintf("Tom has %d apples and buys %d more. How many now?", a, b), "answer": fmt.Sprintf("%d + %d = %d\n#### %d", a, b, a+b, a+b)})
		}
		return out
	}
	train, err := pq("train.parquet", rows(8, 1))
	if err != nil {
		return nil, err
	}
	test, err := pq("test.parquet", rows(2, 50))
	if err != nil {
		return nil, err
	}
	h := fakehub.New()
	h.Tokens = []string{"hf_granted"}
	h.Commit("openai/gsm8k", "main", map[string]fakehub.File{
		"README.md":                         {Data: []byte(fakeGSMCard)},
		"main/train-00000-of-00001.parquet": {Data: train, LFS: true},
		"main/test-00000-of-00001.parquet":  {Data: test, LFS: true},
	})
	// MATH-500 as the Hub holds it: test.jsonl at the root.
	h.Commit("HuggingFaceH4/MATH-500", "main", map[string]fakehub.File{"test.jsonl": {Data: []byte(`{"problem":"What is $1+1$?","solution":"$1+1=\\boxed{2}$","answer":"2","subject":"Prealgebra","level":1,"unique_id":"test/prealgebra/1.json"}` + "\n")}})
	h.Commit("org/gated", "main", map[string]fakehub.File{"train.jsonl": {Data: []byte(`{"question":"q","answer":"1"}` + "\n")}})
	h.SetAccess("org/gated", false, true, "hf_granted")
	h.Commit("org/plain", "main", map[string]fakehub.File{"test.jsonl": {Data: []byte(`{"problem":"1+1","solution":"2"}` + "\n" + `{"problem":"2+3","solution":"5"}` + "\n")}})
	return h, nil
}
