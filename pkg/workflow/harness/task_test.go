package harness

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/harness"
	"github.com/rllm-org/rllm-go/pkg/harness/harnesstest"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/tasks/harbor"
	"github.com/rllm-org/rllm-go/pkg/workflow"
	"github.com/rllm-org/rllm-go/pkg/workflow/program"
)

// TestHarnessOnATask: workflow.name=harness with env.name=task. The
// workflow factory takes the task env's hook (workflow.Deps.Workspaces),
// so Qwen Code works in the task's own container (built from its
// environment/Dockerfile) and the task's verifier, copied in only after
// the harness ended, scores what it left there.
func TestHarnessOnATask(t *testing.T) {
	if testing.Short() {
		t.Skip("a real harness run takes seconds (-short)")
	}
	e, err := harness.Lookup("qwen-code")
	if err != nil {
		t.Fatal(err)
	}
	if !e.Installed(cacheDir()) {
		if slices.Contains(strings.Split(os.Getenv("RLLM_HARNESS_REQUIRE"), ","), "qwen-code") {
			t.Fatalf("harness qwen-code is not installed in %s: rllm harness install qwen-code", cacheDir())
		}
		t.Skipf("harness qwen-code is not installed in %s (rllm harness install qwen-code)", cacheDir())
	}
	if _, err := harbor.SharedEngine(context.Background()); err != nil {
		if os.Getenv("RLLM_REQUIRE_DOCKER") != "" {
			t.Fatalf("tasks need Docker: %v", err)
		}
		t.Skipf("tasks need Docker: %v", err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"instruction.md":         "Create hello.txt containing 'hello from the harness', then run `cat hello.txt | tee ran.txt`.\n",
		"task.toml":              "version = \"1.0\"\n[agent]\ntimeout_sec = 300\n[verifier]\ntimeout_sec = 60\n",
		"environment/Dockerfile": "FROM " + sandbox.BaseImage() + "\nWORKDIR /work\n",
		"tests/test.sh":          "#!/bin/sh\nif " + verifier + "; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ws, ok, err := env.WorkspacesFor("task", map[string]any{})
	if !ok || err != nil {
		t.Fatalf("env task has no workspace hook: ok %v, err %v", ok, err)
	}
	args := map[string]any{"harness": "qwen-code", "dir": cacheDir(), "workdir": "/work", "sandbox": "docker",
		"timeout_s": 300, "max_calls": 32, "memory_mb": 32768, "processes": 1024}
	wf, err := workflow.New(Name, args, workflow.Deps{Sampler: harnesstest.Sampler(task()), Workspaces: ws})
	if err != nil {
		t.Fatal(err)
	}
	g, err := program.Start("127.0.0.1:0", gateway.New(gateway.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	wf.(*Workflow).WithGateway(g)
	ep, err := wf.Run(context.Background(), episode.Task{"task_dir": dir, "instruction": files["instruction.md"]}, "t:0")
	if err != nil {
		t.Fatalf("episode: %v", err)
	}
	checkEpisode(t, ep)
}
