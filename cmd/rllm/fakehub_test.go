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
	pq := func(rows []episode.Task) []byte {
		p := filepath.Join(ts.MkAbs("pq"), "x.parquet")
		os.MkdirAll(filepath.Dir(p), 0o755)
		ts.Check(dataset.Write(context.Background(), p, rows, dataset.WriteOptions{}))
		b, err := os.ReadFile(p)
		ts.Check(err)
		return b
	}
	rows := func(n, off int) []episode.Task {
		var out []episode.Task
		for i := range n {
			a, b := i+off, 2*i+1
			out = append(out, episode.Task{"question": fmt.Sprintf("Tom has %d apples and buys %d more. How many now?", a, b), "answer": fmt.Sprintf("%d + %d = %d\n#### %d", a, b, a+b, a+b)})
		}
		return out
	}
	h := fakehub.New()
	h.Tokens = []string{"hf_granted"}
	h.Commit("openai/gsm8k", "main", map[string]fakehub.File{
		"README.md":                         {Data: []byte(fakeGSMCard)},
		"main/train-00000-of-00001.parquet": {Data: pq(rows(8, 1)), LFS: true},
		"main/test-00000-of-00001.parquet":  {Data: pq(rows(2, 50)), LFS: true},
	})
	h.Commit("org/gated", "main", map[string]fakehub.File{"train.jsonl": {Data: []byte(`{"question":"q","answer":"1"}` + "\n")}})
	h.SetAccess("org/gated", false, true, "hf_granted")
	h.Commit("org/plain", "main", map[string]fakehub.File{"test.jsonl": {Data: []byte(`{"problem":"1+1","solution":"2"}` + "\n" + `{"problem":"2+3","solution":"5"}` + "\n")}})
	ts.Defer(h.Close)
	ts.Setenv("HF_ENDPOINT", h.URL())
}
