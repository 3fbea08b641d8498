package code

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

// BenchmarkGrade100 grades a correct reply against a 100-test stdin
// task, bwrap against unsafe-host and docker, one sandbox run per test
// against one batch run through the harness, one grading at a time and
// 2×cores at once (pool of that size). Reported: tests/s and gradings/s.
// Docker grades in batch only (per test would be 100 containers a
// grading); it skips where no daemon or base image is there.
//
//	go test ./pkg/tasks/code -run '^$' -bench Grade100 -benchtime 3x
func BenchmarkGrade100(b *testing.B) {
	tests := make([]Test, 100)
	for i := range tests {
		tests[i] = Test{Kind: Stdin, Input: strconv.Itoa(i) + " " + strconv.Itoa(2*i) + "\n", Expected: strconv.Itoa(3 * i)}
	}
	code := "a, b = map(int, input().split())\nprint(a + b)"
	for _, backend := range []string{sandbox.BackendBwrap, sandbox.BackendUnsafeHost, sandbox.BackendDocker} {
		for _, batch := range []bool{false, true} {
			if backend == sandbox.BackendDocker && !batch {
				continue
			}
			for _, conc := range []int{1, 2 * runtime.NumCPU()} {
				mode := "per-test"
				if batch {
					mode = "batch"
				}
				b.Run(fmt.Sprintf("%s/%s/conc=%d", backend, mode, conc), func(b *testing.B) {
					p, err := sandbox.Open(context.Background(), sandbox.Config{Backend: backend, Limits: sandbox.DefaultLimits, MaxConcurrent: conc})
					if err != nil {
						b.Skipf("%s: %v", backend, err)
					}
					defer p.Close()
					o := GradeOptions{Language: Languages["python"], TestTimeout: 10 * time.Second, DebugChars: 200, Batch: batch, Limits: p.Limits(),
						Isolated: backend != sandbox.BackendUnsafeHost}
					var wg sync.WaitGroup
					next := make(chan struct{})
					b.ResetTimer()
					start := time.Now()
					for range conc {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range next {
								out, err := Grade(context.Background(), p, code, tests, o)
								if err != nil || out.Passed != 100 {
									b.Errorf("%v %+v", err, out)
								}
							}
						}()
					}
					for i := 0; i < b.N; i++ {
						next <- struct{}{}
					}
					close(next)
					wg.Wait()
					s := time.Since(start).Seconds()
					b.ReportMetric(float64(b.N)/s, "gradings/s")
					b.ReportMetric(float64(100*b.N)/s, "tests/s")
				})
			}
		}
	}
}

// BenchmarkGradeAsserts grades a correct reply against 20 MBPP-style
// assert tests under bwrap, batch=true and batch=false, one grading at a
// time. Reported: tests/s.
//
//	go test ./pkg/tasks/code -run '^$' -bench GradeAsserts -benchtime 3x
func BenchmarkGradeAsserts(b *testing.B) {
	tests := make([]Test, 20)
	for i := range tests {
		tests[i] = Test{Kind: Program, Script: "assert add(" + strconv.Itoa(i) + ", 1) == " + strconv.Itoa(i+1)}
	}
	code := "def add(a, b):\n    return a + b"
	for _, batch := range []bool{false, true} {
		b.Run(fmt.Sprintf("batch=%v", batch), func(b *testing.B) {
			p, err := sandbox.Open(context.Background(), sandbox.Config{Backend: sandbox.BackendBwrap, Limits: sandbox.DefaultLimits, MaxConcurrent: 1})
			if err != nil {
				b.Skipf("bwrap: %v", err)
			}
			defer p.Close()
			o := GradeOptions{Language: Languages["python"], TestTimeout: 10 * time.Second, DebugChars: 200, Batch: batch, Limits: p.Limits(), Isolated: true}
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				out, err := Grade(context.Background(), p, code, tests, o)
				if err != nil || out.Passed != len(tests) {
					b.Fatalf("%v %+v", err, out)
				}
			}
			b.ReportMetric(float64(len(tests)*b.N)/time.Since(start).Seconds(), "tests/s")
		})
	}
}
