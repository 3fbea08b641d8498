package plot

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkReadMetrics reads a 1,000-step metrics.jsonl with 40 keys a
// record (the size of a long default run's file).
func BenchmarkReadMetrics(b *testing.B) {
	var buf bytes.Buffer
	for s := 1; s <= 1000; s++ {
		fmt.Fprintf(&buf, `{"step":%d`, s)
		for k := 0; k < 40; k++ {
			fmt.Fprintf(&buf, `,"group%d/metric%d":%g`, k%5, k, float64(s)*0.001+float64(k))
		}
		buf.WriteString("}\n")
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadMetrics(bytes.NewReader(data), "m"); err != nil {
			b.Fatal(err)
		}
	}
}
