package rollout

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// The benchmarks run the fake server in a child process (this test
// binary, re-executed), so that the CPU and allocations measured here are
// the client's and the engine's alone.
const serveEnv = "RLLM_ROLLOUT_BENCH_SERVE"

func TestMain(m *testing.M) {
	if lat := os.Getenv(serveEnv); lat != "" {
		d, err := time.ParseDuration(lat)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		s := fakevllm.New(fakevllm.Config{Latency: d})
		fmt.Println(s.URL)
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
		s.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func startChildFake(b *testing.B, latency time.Duration) (string, int) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+latency.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	return strings.TrimSpace(line), cmd.Process.Pid
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEngineThroughput: one op is one single-turn episode (one chat
// request, tokens and logprobs decoded and checked) against a fake with
// 20 ms latency. Reported: episodes/s, the fraction of the ideal
// in-flight/latency, and client CPU per request.
func BenchmarkEngineThroughput(b *testing.B) {
	const latency = 20 * time.Millisecond
	url, pid := startChildFake(b, latency)
	for _, inflight := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			c, err := NewClient(Options{Endpoints: []string{url}, Model: "fake-model", RequestTimeout: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			e, err := NewEngine(func() (Workflow, error) { return chatWorkflow{s: c, turns: 1}, nil },
				EngineOptions{NParallel: inflight})
			if err != nil {
				b.Fatal(err)
			}
			// Warm the connection pool so the figure is the steady state.
			if _, err := e.Run(context.Background(), makeTasks(inflight)); err != nil {
				b.Fatal(err)
			}
			tasks := makeTasks(b.N)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, srv0, t0 := cpuTime(), childCPU(pid), time.Now()
			eps, err := e.Run(context.Background(), tasks)
			wall, cpu, srv := time.Since(t0), cpuTime()-cpu0, childCPU(pid)-srv0
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			for _, ep := range eps {
				if ep.TerminationReason != episode.TerminationEnvDone {
					b.Fatalf("%s: %s %s", ep.ID, ep.TerminationReason, ep.Error)
				}
			}
			rate := float64(b.N) / wall.Seconds()
			ideal := float64(inflight) / latency.Seconds()
			b.ReportMetric(rate, "episodes/s")
			b.ReportMetric(rate/ideal, "of-ideal")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/req")
			b.ReportMetric(float64(srv.Microseconds())/float64(b.N), "fake-cpu-µs/req")
		})
	}
}

// childCPU reads a process's user+system CPU time from /proc (Linux).
func childCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ut, st int64
	fmt.Sscan(fields[11], &ut)
	fmt.Sscan(fields[12], &st)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// sleepWorkflow is an episode that waits like a model call of fixed
// latency and does nothing else: it isolates the engine's own cost.
type sleepWorkflow struct{ latency time.Duration }

func (w sleepWorkflow) Run(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
	t := time.NewTimer(w.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &episode.Episode{ID: id, Task: task, TerminationReason: episode.TerminationEnvDone}, nil
}

// BenchmarkEngineOverhead: the engine alone (no HTTP), episodes of 20 ms.
// It shows how close the scheduling comes to the ideal in-flight/latency
// when the model call costs no CPU here, as with real servers whose
// latency is seconds.
func BenchmarkEngineOverhead(b *testing.B) {
	const latency = 20 * time.Millisecond
	for _, inflight := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			e, err := NewEngine(func() (Workflow, error) { return sleepWorkflow{latency}, nil }, EngineOptions{NParallel: inflight})
			if err != nil {
				b.Fatal(err)
			}
			tasks := makeTasks(max(b.N, inflight))
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, t0 := cpuTime(), time.Now()
			if _, err := e.Run(context.Background(), tasks); err != nil {
				b.Fatal(err)
			}
			wall, cpu := time.Since(t0), cpuTime()-cpu0
			rate := float64(len(tasks)) / wall.Seconds()
			b.ReportMetric(rate, "episodes/s")
			b.ReportMetric(rate/(float64(inflight)/latency.Seconds()), "of-ideal")
			b.ReportMetric(float64(cpu.Microseconds())/float64(len(tasks)), "cpu-µs/episode")
		})
	}
}
