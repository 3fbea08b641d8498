package harbor_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/tasks/harbor"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// What a task episode costs on a Docker daemon, part by part (recorded in
// docs/benchmarks.md):
//
//	go test -run XXX -bench . -benchtime 5x ./pkg/tasks/harbor/

func benchEngine(b *testing.B) *harbor.Engine {
	b.Helper()
	e, err := harbor.SharedEngine(context.Background())
	if err != nil {
		if usererr.Is(err) && os.Getenv("RLLM_REQUIRE_DOCKER") != "1" {
			b.Skipf("no Docker here (%v)", err)
		}
		b.Fatal(err)
	}
	return e
}

func benchTask(b *testing.B, seed uint64) *harbor.Task {
	b.Helper()
	dir := b.TempDir()
	if _, err := harbor.Generate(dir, 1, seed, harbor.GenerateOptions{Image: sandbox.BaseImage(), HiddenTests: 5}); err != nil {
		b.Fatal(err)
	}
	t, err := harbor.Load(filepath.Join(dir, "task-0000"))
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// BenchmarkImageBuildCold builds a task image the daemon has never seen
// (FROM the local base image, the repository copied in), and removes it.
func BenchmarkImageBuildCold(b *testing.B) {
	e := benchEngine(b)
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	seed := uint64(time.Now().UnixNano())
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		t := benchTask(b, seed+uint64(i))
		fresh := harbor.NewEngine(e.D)
		b.StartTimer()
		img, err := fresh.Image(context.Background(), t)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := cli.ImageRemove(context.Background(), img, client.ImageRemoveOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkImageCached finds a task's image already built: the context
// hashed and the tag inspected (a fresh engine each time, so the
// process's own cache does not answer).
func BenchmarkImageCached(b *testing.B) {
	e := benchEngine(b)
	t := benchTask(b, 1)
	if _, err := e.Image(context.Background(), t); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := harbor.NewEngine(e.D).Image(context.Background(), t); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkContainerOpen opens the task's container (image inspected,
// container created and started); its removal is not timed.
func BenchmarkContainerOpen(b *testing.B) {
	e := benchEngine(b)
	t := benchTask(b, 1)
	ctx := context.Background()
	if _, err := e.Image(ctx, t); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run, err := e.Open(ctx, t)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := run.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkVerifier runs the verifier alone (the container opened
// outside the timer): /logs prepared, tests copied in, pytest, the
// reward read.
func BenchmarkVerifier(b *testing.B) {
	e := benchEngine(b)
	t := benchTask(b, 1)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		run, err := e.Open(ctx, t)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := run.Verify(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		run.Close()
		b.StartTimer()
	}
}

// BenchmarkOracleEpisode is a whole episode with the oracle as the agent:
// open, solve.sh, the verifier, remove.
func BenchmarkOracleEpisode(b *testing.B) {
	e := benchEngine(b)
	t := benchTask(b, 1)
	ctx := context.Background()
	if _, err := e.Image(ctx, t); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run, err := e.Open(ctx, t)
		if err != nil {
			b.Fatal(err)
		}
		if res, err := run.Oracle(ctx); err != nil || !res.OK() {
			b.Fatal(res.Reason(), err)
		}
		v, err := run.Verify(ctx)
		if err != nil || v.Reward != 1 {
			b.Fatal(v, err)
		}
		run.Close()
	}
}

// BenchmarkContainerOpenWarm is BenchmarkContainerOpen with
// sandbox.docker.warm_pool=2: the container of the task's shape is taken
// from the pool, its replacement started behind it (untimed work the
// daemon does while an episode would run).
func BenchmarkContainerOpenWarm(b *testing.B) {
	benchEngine(b)
	ctx := context.Background()
	d, err := sandbox.OpenDocker(ctx, sandbox.Config{Backend: sandbox.BackendDocker, Limits: sandbox.DefaultLimits, DockerWarm: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	e := harbor.NewEngine(d)
	t := benchTask(b, 1)
	if _, err := e.Image(ctx, t); err != nil {
		b.Fatal(err)
	}
	warm := func() { // the pool refilled, as between an episode's start and the next
		run, err := e.Open(ctx, t)
		if err != nil {
			b.Fatal(err)
		}
		run.Close()
		time.Sleep(2 * time.Second)
	}
	warm()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run, err := e.Open(ctx, t)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		run.Close()
		time.Sleep(time.Second)
		b.StartTimer()
	}
}

// BenchmarkVerifyIsolation is the verifier of an episode whose agent
// applied the fix (outside the timer), by the kind of task: an
// unprivileged agent's, verified in its container restarted, and a root
// agent's, verified in a fresh container with /app copied in. setup-s/op
// is the isolation alone (the restart; the fresh container and the copy).
func BenchmarkVerifyIsolation(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	for _, k := range []struct{ name, toml string }{
		{"restart", "version = \"1.0\"\n"},
		{"fresh", "version = \"1.0\"\n[agent]\nuser = \"root\"\n"},
	} {
		b.Run(k.name, func(b *testing.B) {
			t := benchTask(b, 1)
			if err := os.WriteFile(filepath.Join(t.Dir, "task.toml"), []byte(k.toml), 0o644); err != nil {
				b.Fatal(err)
			}
			t, err := harbor.Load(t.Dir)
			if err != nil {
				b.Fatal(err)
			}
			setup := 0.0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				run, err := e.Open(ctx, t)
				if err != nil {
					b.Fatal(err)
				}
				if res, err := run.Oracle(ctx); err != nil || !res.OK() {
					b.Fatal(res.Reason(), err)
				}
				b.StartTimer()
				v, err := run.Verify(ctx)
				if err != nil || v.Reward != 1 {
					b.Fatal(v, err)
				}
				b.StopTimer()
				setup += v.Info["verifier_setup_seconds"].(float64)
				run.Close()
				b.StartTimer()
			}
			b.ReportMetric(setup/float64(b.N), "setup-s/op")
		})
	}
}
