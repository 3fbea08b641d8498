package local

import (
	"bytes"
	"testing"
)

func FuzzParseSafetensors(f *testing.F) {
	var buf bytes.Buffer
	writeSafetensors(&buf, []string{"a", "b"}, map[string]tensor{
		"a": {Shape: []int{2, 2}, Data: []float32{1, 2, 3, 4}},
		"b": {Shape: []int{1}, Data: []float32{5}},
	}, map[string]string{"step": "3"})
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tensors, _, err := parseSafetensors("fuzz", b)
		if err != nil {
			return
		}
		// Whatever parses must write back and parse to the same tensors.
		var names []string
		for n := range tensors {
			names = append(names, n)
		}
		var out bytes.Buffer
		if err := writeSafetensors(&out, names, tensors, nil); err != nil {
			t.Fatal(err)
		}
		again, _, err := parseSafetensors("rewritten", out.Bytes())
		if err != nil || len(again) != len(tensors) {
			t.Fatalf("rewrite of a parsed file failed: %v", err)
		}
	})
}
