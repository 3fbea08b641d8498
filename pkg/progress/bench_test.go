package progress

import (
	"io"
	"testing"
	"time"
)

// BenchmarkJSONAdd is the cost an episode pays to be counted (most Adds
// write nothing: one line per Every).
func BenchmarkJSONAdd(b *testing.B) {
	p := NewJSON(io.Discard, Options{Every: 5 * time.Second})
	c := p.Start("rollout", "episodes", int64(b.N))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(1)
		}
	})
	c.Done()
}

// BenchmarkTextAdd is the same through the terminal bar (redrawn at most
// every 100ms).
func BenchmarkTextAdd(b *testing.B) {
	p := NewText(io.Discard, Options{})
	c := p.Start("rollout", "episodes", int64(b.N))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(1)
		}
	})
	c.Done()
}
