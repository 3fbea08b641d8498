package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/gateway/gatewaytest"
	"github.com/rllm-org/rllm-go/pkg/harness"
	"github.com/rllm-org/rllm-go/pkg/harness/harnesstest"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/workflow"
	"github.com/rllm-org/rllm-go/pkg/workflow/program"
)

// fakeAgent is a harness in Python's standard library: one chat call
// with a tool through its session, then whatever the test's script says.
const fakeAgent = `import json, os, sys, urllib.request, urllib.error
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"messages": [{"role": "user", "content": sys.argv[1]}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
try:
    urllib.request.urlopen(req, timeout=30).read()
except urllib.error.HTTPError as e:
    print("refused:", e.code)
exec(os.environ["FAKE_THEN"])
`

// fakeWorkflow runs fakeAgent as a registered harness would run, with
// then as the Python it runs after its call.
func fakeWorkflow(t *testing.T, then string, timeoutS float64) *Workflow {
	t.Helper()
	if _, err := sandbox.NewBwrapOpener(context.Background(), sandbox.Config{Limits: sandbox.DefaultLimits}); err != nil {
		t.Skipf("bwrap is not usable here: %v", err)
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	root, err := os.MkdirTemp("", "rllm-harnesses-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	e := harness.Entry{Name: "fake", Installer: harness.NPM, Package: "fake", Version: "1.0.0", Bin: "fake-agent", Wire: harness.WireChat,
		Env:     map[string]string{"OPENAI_BASE_URL": "{{.BaseURL}}", "OPENAI_API_KEY": "{{.Key}}", "FAKE_THEN": then},
		Command: []string{"fake-agent", "{{.Prompt}}"}}
	bin := e.BinDir(root)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := bin; d != filepath.Dir(root); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	os.WriteFile(filepath.Join(bin, "fake-agent"), []byte("#!/usr/bin/python3\n"+fakeAgent), 0o755)
	os.WriteFile(filepath.Join(e.Dir(root), ".rllm-installed"), []byte("{}\n"), 0o644)
	g, err := program.Start("127.0.0.1:0", gateway.New(gateway.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	w := &Workflow{p: Params{Harness: "fake", Dir: root, WorkDir: "/work", Verifier: "test -f done", TimeoutS: timeoutS, MaxCalls: 8,
		Sandbox: "bwrap", MemoryMB: 4096, Processes: 256, Gamma: 1}, entry: e,
		deps: workflow.Deps{Sampler: harnesstest.Sampler(task())}}
	return w.WithGateway(g)
}

func TestHarnessFailures(t *testing.T) {
	for _, tc := range []struct {
		name, then string
		timeoutS   float64
		reason     episode.TerminationReason
		errWant    string
		reward     float64
		denied     float64
		calls      float64
		refuse     bool
	}{
		{name: "exits non-zero", then: `sys.stderr.write("boom\n"); sys.exit(3)`, timeoutS: 60,
			reason: episode.TerminationError, errWant: "harness fake failed: exit status 3: boom", calls: 1},
		{name: "hangs", then: `import time; time.sleep(600)`, timeoutS: 3,
			reason: episode.TerminationTimeout, errWant: "ran longer than workflow.args.timeout_s=3", calls: 1},
		{name: "writes outside its workspace", then: `
for p in ["/usr/x", "/etc/x", "/x", "/home/x"]:
    try:
        open(p, "w"); sys.exit(5)
    except OSError:
        pass
open("done", "w")`, timeoutS: 60, reason: episode.TerminationEnvDone, reward: 1, calls: 1},
		{name: "tries another host and port", then: `
import socket
for addr in [("127.0.0.1", 22), ("10.0.0.1", 80), ("example.com", 443)]:
    try:
        socket.create_connection(addr, timeout=5); sys.exit(6)
    except OSError:
        pass
open("done", "w")`, timeoutS: 60, reason: episode.TerminationEnvDone, reward: 1, denied: 3, calls: 1},
		{name: "its only call is refused, prompt too long", then: `pass`, timeoutS: 60, refuse: true,
			reason: episode.TerminationMaxPromptLength},
		{name: "its only call is refused", then: `pass`, timeoutS: 60, refuse: true,
			reason: episode.TerminationError, errWant: "made no model call through its session, so there is nothing to train on; its last refused model call: the server is down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := fakeWorkflow(t, tc.then, tc.timeoutS)
			if tc.refuse {
				err := errors.New("the server is down")
				if strings.Contains(tc.name, "too long") {
					err = fmt.Errorf("server: %w", sampler.ErrPromptTooLong)
				}
				w.deps.Sampler = &gatewaytest.Sampler{Reply: func(sampler.Request) gatewaytest.Reply { return gatewaytest.Reply{Err: err} }}
			}
			ep, err := w.Run(context.Background(), episode.Task{"instruction": "do it"}, "t:0")
			if ep.TerminationReason != tc.reason {
				t.Fatalf("ended %s (%v), want %s", ep.TerminationReason, err, tc.reason)
			}
			if tc.errWant != "" && (err == nil || !strings.Contains(ep.Error, tc.errWant)) {
				t.Fatalf("error %q, want it to say %q", ep.Error, tc.errWant)
			}
			if tc.errWant == "" && tc.reason == episode.TerminationEnvDone && (err != nil || ep.Metrics["reward"] != tc.reward) {
				t.Fatalf("err %v, reward %v: %s", err, ep.Metrics["reward"], ep.Error)
			}
			if ep.Metrics["denied_connections"] < tc.denied {
				t.Errorf("denied_connections = %v, want at least %v", ep.Metrics["denied_connections"], tc.denied)
			}
			if ep.Metrics["model_calls"] != tc.calls {
				t.Errorf("model_calls = %v, want %v", ep.Metrics["model_calls"], tc.calls)
			}
		})
	}
}

// TestHarnessVerifierModules: the modules a harness leaves in its
// workspace or its home are not the ones workflow.args.verifier's Python
// imports: a unittest.py in the workspace and a .pth in the user site,
// each exiting 0 at once, do not score 1 for a verifier that fails.
func TestHarnessVerifierModules(t *testing.T) {
	for _, tc := range []struct{ name, then string }{
		{"unittest.py in the workspace", `open("unittest.py", "w").write("import os\nos._exit(0)\n")`},
		{"sitecustomize.py and a .pth in the user site", `
import os, sys, site
d = site.getusersitepackages()
os.makedirs(d, exist_ok=True)
open(os.path.join(d, "zz.pth"), "w").write("import os; os._exit(0)\n")
open(os.path.join(d, "sitecustomize.py"), "w").write("import os\nos._exit(0)\n")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := fakeWorkflow(t, tc.then, 60)
			w.p.Verifier = "python3 -m unittest no_such_test_module"
			ep, err := w.Run(context.Background(), episode.Task{"instruction": "do it"}, "t:0")
			if err != nil || ep.TerminationReason != episode.TerminationEnvDone {
				t.Fatalf("%s: %v", ep.TerminationReason, err)
			}
			if ep.Metrics["reward"] != 0 {
				t.Fatalf("reward %v: the verifier imported the harness's module", ep.Metrics["reward"])
			}
		})
	}
}

// fakeTask is a task env's side of the hook: its own workdir and files,
// and a verifier that reads what the harness left in the same workspace.
type fakeTask struct{ opener sandbox.Opener }

func (f fakeTask) Workspace(ctx context.Context, task episode.Task, def sandbox.WorkspaceSpec) (sandbox.Opener, sandbox.WorkspaceSpec, []sandbox.File, error) {
	def.WorkDir = "/testbed"
	return f.opener, def, []sandbox.File{{Name: "input.txt", Data: []byte("from the task")}}, nil
}

func (f fakeTask) Verify(ctx context.Context, ws sandbox.Workspace, task episode.Task) (float64, bool, map[string]any, error) {
	b, err := ws.ReadFile(ctx, "/testbed/hello.txt", 100)
	if err != nil {
		return 0, false, map[string]any{"verifier": err.Error()}, nil
	}
	ok := string(b) == "from the task"
	r := 0.0
	if ok {
		r = 1
	}
	return r, ok, map[string]any{"verifier": string(b)}, nil
}

func TestTaskHookWorkspaceAndVerifier(t *testing.T) {
	w := fakeWorkflow(t, `import os; open("hello.txt", "w").write(open(os.getcwd() + "/input.txt").read())`, 60)
	o, err := program.BwrapOpener(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w.task = fakeTask{opener: o}
	ep, err := w.Run(context.Background(), episode.Task{"instruction": "copy input.txt to hello.txt"}, "t:0")
	if err != nil || ep.Metrics["reward"] != 1 || !ep.IsCorrect {
		t.Fatalf("err %v, reward %v: %s", err, ep.Metrics["reward"], ep.Error)
	}
	last := ep.Trajectories[0].Steps[len(ep.Trajectories[0].Steps)-1]
	if last.Info["verifier"] != "from the task" {
		t.Errorf("the verifier's info is not kept: %v", last.Info)
	}
}

// timedTask is a task env whose container lives long (as a Harbor task's
// does: the agent's time, the verifier's and some slack) and whose tasks
// bound the agent's time; its verifier scores 1 when hello.txt exists.
type timedTask struct {
	opener sandbox.Opener
	agent  time.Duration
}

func (f timedTask) Workspace(ctx context.Context, task episode.Task, def sandbox.WorkspaceSpec) (sandbox.Opener, sandbox.WorkspaceSpec, []sandbox.File, error) {
	def.Limits.WallTime, def.Limits.CPUTime = 10*time.Minute, 10*time.Minute
	return f.opener, def, nil, nil
}

func (f timedTask) Verify(ctx context.Context, ws sandbox.Workspace, task episode.Task) (float64, bool, map[string]any, error) {
	if _, err := ws.ReadFile(ctx, sandbox.WorkDir+"/hello.txt", 100); err != nil {
		return 0, false, map[string]any{}, nil
	}
	return 1, true, map[string]any{}, nil
}

func (f timedTask) AgentTimeout(episode.Task) (time.Duration, error) { return f.agent, nil }

// TestHarnessOnATaskTimesOut: on a task, the harness is stopped at the
// smaller of workflow.args.timeout_s and the task's [agent] timeout_sec,
// however long the task's container lives; the episode ends with
// termination timeout and reward 0, naming the bound that fired, though
// what the harness left would have scored 1.
func TestHarnessOnATaskTimesOut(t *testing.T) {
	o, err := program.BwrapOpener(context.Background())
	if err != nil {
		t.Skipf("bwrap is not usable here: %v", err)
	}
	for _, tc := range []struct {
		timeoutS float64
		agent    time.Duration
		want     string
	}{
		{timeoutS: 600, agent: 2 * time.Second, want: "ran longer than the task's [agent] timeout_sec = 2"},
		{timeoutS: 2, agent: 600 * time.Second, want: "ran longer than workflow.args.timeout_s=2"},
	} {
		w := fakeWorkflow(t, `open("hello.txt", "w").write("hi"); import time; time.sleep(30); open("done", "w")`, tc.timeoutS)
		w.task = timedTask{opener: o, agent: tc.agent}
		began := time.Now()
		ep, err := w.Run(context.Background(), episode.Task{"instruction": "do it"}, "t:0")
		if ep.TerminationReason != episode.TerminationTimeout || err == nil || !strings.Contains(ep.Error, tc.want) || ep.Metrics["reward"] != 0 || ep.IsCorrect {
			t.Errorf("timeout_s=%g, [agent] timeout_sec=%s: ended %s after %s with reward %v, error %q; want timeout saying %q",
				tc.timeoutS, tc.agent, ep.TerminationReason, time.Since(began).Round(time.Second), ep.Metrics["reward"], ep.Error, tc.want)
		}
	}
}
