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

// BenchmarkDockerStart measures how long a container takes to be ready
// for a command: created and started (cold), or taken from the warm pool
// (the refill behind it is not timed; it runs while the episode would).
// The first take is cold either way: it is what starts the refill.
//
//	go test ./pkg/sandbox -run '^$' -bench DockerStart -benchtime 20x
func BenchmarkDockerStart(b *testing.B) {
	for _, warm := range []int{0, 2} {
		b.Run(fmt.Sprintf("warm=%d", warm), func(b *testing.B) {
			d := dockerFor(b, Config{Limits: DefaultLimits, DockerWarm: warm})
			s := d.runSpec(DefaultLimits, 0)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				deadline := time.Now().Add(2 * time.Minute)
				for warm > 0 && i > 0 && d.warm.waiting() < warm {
					if time.Now().After(deadline) {
						b.Fatal("the warm pool did not refill in 2 minutes")
					}
					time.Sleep(10 * time.Millisecond)
				}
				b.StartTimer()
				w, err := d.open(context.Background(), s)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				w.Close(context.Background())
				b.StartTimer()
			}
		})
	}
}

// BenchmarkDockerEpisodes measures one-shot docker runs per second (a
// python3 program with one file, as the code env runs a test) with and
// without the warm pool, one at a time and two at once.
//
//	go test ./pkg/sandbox -run '^$' -bench DockerEpisodes -benchtime 40x
func BenchmarkDockerEpisodes(b *testing.B) {
	req := Request{Command: []string{"python3", "main.py"}, Files: map[string][]byte{"main.py": []byte("print(sum(range(10)))\n")}, Limits: DefaultLimits}
	for _, warm := range []int{0, 2} {
		for _, conc := range []int{1, 2} {
			b.Run(fmt.Sprintf("warm=%d/conc=%d", warm, conc), func(b *testing.B) {
				d := dockerFor(b, Config{Limits: DefaultLimits, DockerWarm: warm})
				pool := NewPool(d, conc, DefaultLimits)
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
