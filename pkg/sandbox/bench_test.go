package sandbox

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// BenchmarkRun measures sandboxed executions per second: a trivial
// program (true, and python3 printing one line) under bwrap against the
// same program run on the host by the unsafe-host backend (same prlimit
// wrapper, process-group kill and output capture, no namespaces), one at
// a time and 2×cores at once.
//
//	go test ./pkg/sandbox -run '^$' -bench Run -benchtime 200x
func BenchmarkRun(b *testing.B) {
	programs := []struct {
		name string
		req  Request
	}{
		{"true", Request{Command: []string{"true"}}},
		{"python", Request{Command: []string{"python3", "-c", "print(1)"}}},
	}
	for _, backend := range []string{BackendBwrap, BackendUnsafeHost} {
		be := backendFor(b, backend)
		for _, p := range programs {
			for _, conc := range []int{1, 2 * runtime.NumCPU()} {
				b.Run(fmt.Sprintf("%s/%s/conc=%d", backend, p.name, conc), func(b *testing.B) {
					req := p.req
					req.Limits = DefaultLimits
					pool := NewPool(be, conc, DefaultLimits)
					runN(b, conc, func() {
						res, err := pool.Run(context.Background(), req)
						if err != nil || !res.OK() {
							b.Fatalf("%v %+v", err, res)
						}
					})
				})
			}
		}
	}
}

// runN calls f b.N times from conc goroutines and reports runs/s.
func runN(b *testing.B, conc int, f func()) {
	b.Helper()
	var wg sync.WaitGroup
	next := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				f()
			}
		}()
	}
	for i := 0; i < b.N; i++ {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
}
