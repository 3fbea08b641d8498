package program_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/tasks/harbor"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// taskAgent asks its session once, then writes its answer into the task's
// files (RLLM_WORKDIR) unless told to leave them alone.
const taskAgent = `import json, os, sys, urllib.request
task = json.loads(sys.stdin.readline())
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"messages": [{"role": "user", "content": task["instruction"]}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=30) as r:
    answer = json.load(r)["choices"][0]["message"]["content"]
if sys.argv[1].startswith("fix"):
    open(os.path.join(os.environ["RLLM_WORKDIR"], "answer.txt"), "w").write(answer)
if sys.argv[1] == "fix-and-wait":
    import time
    time.sleep(120)
print("done")
`

// TestProgramInATasksContainer: workflow.name=program with env.name=task.
// The program runs in the task's own container (built from its
// environment/Dockerfile, the task's files in RLLM_WORKDIR) and the
// task's verifier, run after it in the same container, gives the reward:
// 1 when the program wrote the answer there, 0 when it left the task as
// it was.
func TestProgramInATasksContainer(t *testing.T) {
	if _, err := harbor.SharedEngine(context.Background()); err != nil {
		if os.Getenv("RLLM_REQUIRE_DOCKER") != "" {
			t.Fatalf("tasks need Docker: %v", err)
		}
		t.Skipf("tasks need Docker: %v", err)
	}
	taskDir := t.TempDir()
	for name, body := range map[string]string{
		"instruction.md":         "Write 7 into answer.txt.\n",
		"task.toml":              "version = \"1.0\"\n[verifier]\ntimeout_sec = 60\n",
		"environment/Dockerfile": "FROM " + sandbox.BaseImage() + "\nWORKDIR /app\n",
		"tests/test.sh":          "#!/bin/sh\nif [ \"$(cat /app/answer.txt 2>/dev/null)\" = 7 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
	} {
		p := filepath.Join(taskDir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	progDir, err := os.MkdirTemp("", "rllm-program-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(progDir) })
	if err := os.Chmod(progDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(progDir, "agent.py"), []byte(taskAgent), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, ok, err := env.WorkspacesFor("task", map[string]any{})
	if !ok || err != nil {
		t.Fatalf("env task has no workspace hook: ok %v, err %v", ok, err)
	}
	row := episode.Task{"task_dir": taskDir, "instruction": "Write 7 into answer.txt."}
	for _, tc := range []struct {
		mode   string
		reward float64
	}{{"fix", 1}, {"leave", 0}} {
		spec := workflow.Spec{Name: "program", Args: map[string]any{"command": []any{"python3", "agent.py", tc.mode}, "dir": progDir},
			Deps: workflow.Deps{Env: workflow.Component{Name: "task"}, Workspaces: ws}}
		w, err := spec.New(answering("7"), sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 16})
		if err != nil {
			t.Fatal(err)
		}
		ep, err := w.Run(context.Background(), row, "t:"+tc.mode)
		if err != nil {
			t.Fatalf("%s: %v (%s)", tc.mode, err, ep.Error)
		}
		if ep.TerminationReason != episode.TerminationEnvDone || ep.Metrics["reward"] != tc.reward || len(ep.Trajectories) != 1 {
			t.Errorf("%s: ended %s with reward %v, want %v (%s)", tc.mode, ep.TerminationReason, ep.Metrics["reward"], tc.reward, ep.Error)
		}
	}
	// A program directory holding the task would show the agent its
	// tests: refused.
	inside := filepath.Join(progDir, "task")
	if err := os.CopyFS(inside, os.DirFS(taskDir)); err != nil {
		t.Fatal(err)
	}
	spec := workflow.Spec{Name: "program", Args: map[string]any{"command": []any{"python3", "agent.py", "fix"}, "dir": progDir},
		Deps: workflow.Deps{Env: workflow.Component{Name: "task"}, Workspaces: ws}}
	w, err := spec.New(answering("7"), sampler.Params{MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	if ep, _ := w.Run(context.Background(), episode.Task{"task_dir": inside, "instruction": "x"}, "t:inside"); ep.Metrics["reward"] != 0 || !strings.Contains(ep.Error, "workflow.args.dir") {
		t.Errorf("a program directory holding the task: reward %v, error %q", ep.Metrics["reward"], ep.Error)
	}
	// So is one reached through a symbolic link (the daemon binds the
	// link's target).
	link := filepath.Join(t.TempDir(), "prog")
	if err := os.Symlink(progDir, link); err != nil {
		t.Fatal(err)
	}
	spec.Args["dir"] = link
	if w, err = spec.New(answering("7"), sampler.Params{MaxTokens: 16}); err != nil {
		t.Fatal(err)
	}
	if ep, _ := w.Run(context.Background(), episode.Task{"task_dir": inside, "instruction": "x"}, "t:link"); ep.Metrics["reward"] != 0 || !strings.Contains(ep.Error, "workflow.args.dir") {
		t.Errorf("a program directory holding the task through a link: reward %v, error %q", ep.Metrics["reward"], ep.Error)
	}
	// What cannot run in a task's container is refused.
	for _, args := range []map[string]any{{"sandbox": "bwrap"}, {"mode": "serve"}} {
		args["command"] = []any{"python3", "agent.py"}
		args["dir"] = progDir
		spec := workflow.Spec{Name: "program", Args: args, Deps: workflow.Deps{Env: workflow.Component{Name: "task"}, Workspaces: ws}}
		if _, err := spec.New(answering("7"), sampler.Params{MaxTokens: 16}); err == nil {
			t.Errorf("%v with env.name=task: no error", args)
		}
	}
}

// TestProgramOnATaskTimesOut: the program is stopped at the task's
// [agent] timeout_sec when it is smaller than workflow.args.timeout_s:
// the episode ends with termination timeout and reward 0, naming the
// task's bound, though the answer it wrote would have scored 1.
func TestProgramOnATaskTimesOut(t *testing.T) {
	if _, err := harbor.SharedEngine(context.Background()); err != nil {
		if os.Getenv("RLLM_REQUIRE_DOCKER") != "" {
			t.Fatalf("tasks need Docker: %v", err)
		}
		t.Skipf("tasks need Docker: %v", err)
	}
	taskDir := t.TempDir()
	for name, body := range map[string]string{
		"instruction.md":         "Write 7 into answer.txt.\n",
		"task.toml":              "version = \"1.0\"\n[agent]\ntimeout_sec = 5\n[verifier]\ntimeout_sec = 60\n",
		"environment/Dockerfile": "FROM " + sandbox.BaseImage() + "\nWORKDIR /app\n",
		"tests/test.sh":          "#!/bin/sh\nif [ \"$(cat /app/answer.txt 2>/dev/null)\" = 7 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
	} {
		p := filepath.Join(taskDir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	progDir, err := os.MkdirTemp("", "rllm-program-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(progDir) })
	if err := os.Chmod(progDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(progDir, "agent.py"), []byte(taskAgent), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, ok, err := env.WorkspacesFor("task", map[string]any{})
	if !ok || err != nil {
		t.Fatalf("env task has no workspace hook: ok %v, err %v", ok, err)
	}
	spec := workflow.Spec{Name: "program", Args: map[string]any{"command": []any{"python3", "agent.py", "fix-and-wait"}, "dir": progDir, "timeout_s": 600},
		Deps: workflow.Deps{Env: workflow.Component{Name: "task"}, Workspaces: ws}}
	w, err := spec.New(answering("7"), sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := w.Run(context.Background(), episode.Task{"task_dir": taskDir, "instruction": "Write 7 into answer.txt."}, "t:wait")
	if err == nil || ep.TerminationReason != episode.TerminationTimeout || ep.Metrics["reward"] != 0 || !strings.Contains(ep.Error, "[agent] timeout_sec = 5") {
		t.Fatalf("ended %s with reward %v, error %q; want timeout naming [agent] timeout_sec", ep.TerminationReason, ep.Metrics["reward"], ep.Error)
	}
}
