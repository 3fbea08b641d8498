package program_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/workflow"
	"github.com/rllm-org/rllm-go/pkg/workflow/program"
)

// BenchmarkServedStep runs one training step's episodes (32 tasks × 8,
// all in flight at once, as workflow.n_parallel_tasks=256 runs them)
// through the built-in arith agent and through serving Python programs,
// against a model that answers at once, so what is left is what serving
// an episode costs: the JSON lines, the gateway session, the HTTP call.
// An op is one step. Reported per episode: the wall time (µs/episode),
// rllm's CPU (rllm-cpu-µs/episode: this process) and the program's
// (program-cpu-µs/episode: its processes, from /proc, Linux only).
//
//	go test -run '^$' -bench ServedStep -benchtime 20x ./pkg/workflow/program/
func BenchmarkServedStep(b *testing.B) {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("python3 is not installed")
	}
	tasks := make([]episode.Task, 32)
	for i := range tasks {
		tasks[i] = episode.Task{"question": fmt.Sprintf("%d+%d=", i, i%7), "ground_truth": strconv.Itoa(i + i%7), "data_source": "arith", "id": strconv.Itoa(i)}
	}
	deps := workflow.Deps{Agent: workflow.Component{Name: "arith"}, Env: workflow.Component{Name: "arith"}}
	for _, row := range []struct {
		name string
		spec workflow.Spec
	}{
		{"builtin", workflow.Spec{Name: "single_turn", Deps: deps}},
		{"threaded", programSpec(py, "threaded_agent.py", deps)},
		{"pooled", programSpec(py, "pooled_agent.py", deps)},
	} {
		b.Run(row.name, func(b *testing.B) {
			defer program.CloseServers()
			eng, err := rollout.NewRunner(row.spec, answering("7"), testParams, 8, rollout.RunnerOptions{NParallel: 256, RetryLimit: 1}, nil)
			if err != nil {
				b.Fatal(err)
			}
			step := func() {
				eps, err := eng.Run(context.Background(), tasks)
				if err != nil {
					b.Fatal(err)
				}
				for _, ep := range eps {
					if ep.Error != "" {
						b.Fatalf("episode %s: %s", ep.ID, ep.Error)
					}
				}
			}
			step() // the program starts, Python warms up
			cpu0, prog0 := cpuTime(), descendantsCPU()
			b.ResetTimer()
			began := time.Now()
			for range b.N {
				step()
			}
			wall := time.Since(began)
			b.StopTimer()
			n := float64(b.N * len(tasks) * 8)
			b.ReportMetric(float64(wall.Microseconds())/n, "µs/episode")
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/n, "rllm-cpu-µs/episode")
			if prog0 >= 0 {
				b.ReportMetric(float64((descendantsCPU()-prog0).Microseconds())/n, "program-cpu-µs/episode")
			}
		})
	}
}

func programSpec(py, file string, deps workflow.Deps) workflow.Spec {
	path, _ := filepath.Abs(filepath.Join("testdata", file))
	return workflow.Spec{Name: "program", Args: map[string]any{"command": []any{py, path}, "mode": "serve"}, Deps: deps}
}

// descendantsCPU is the user + system time of this process's live
// descendants, from /proc (-1 where there is none to read).
func descendantsCPU() time.Duration {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	parent := map[int]int{}
	ticks := map[int]int64{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// After the command's closing parenthesis: state ppid ... utime(14) stime(15).
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		parent[pid], ticks[pid] = ppid, ut+st
	}
	self := os.Getpid()
	var total int64
	for pid, t := range ticks {
		for p := parent[pid]; p != 0; p = parent[p] {
			if p == self {
				total += t
				break
			}
		}
	}
	return time.Duration(total) * time.Second / 100 // USER_HZ
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
