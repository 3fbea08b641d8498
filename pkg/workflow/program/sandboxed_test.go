package program_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/workflow"
	"github.com/rllm-org/rllm-go/pkg/workflow/program"
)

// An agent program in Python's standard library that calls its session,
// then tries the gateway's own TCP port and the internet, and answers.
const sandboxedAgent = `import json, os, sys, urllib.request
task = json.loads(sys.stdin.readline())
def chat(base):
    req = urllib.request.Request(base + "/chat/completions",
        data=json.dumps({"messages": [{"role": "user", "content": task["question"]}]}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["choices"][0]["message"]["content"]
answer = chat(os.environ["OPENAI_BASE_URL"])
for url in [sys.argv[1], "http://example.com/"]:
    try:
        urllib.request.urlopen(url, timeout=5)
        print("REACHED", url, file=sys.stderr)
        sys.exit(3)
    except OSError:
        pass
if sys.argv[2] == "ro":  # bwrap: the host's /usr, read-only (a container's own /usr is its own)
    try:
        open("/usr/planted", "w")
        sys.exit(4)
    except OSError:
        pass
open("/work/scratch", "w").write("ok")
print(json.dumps({"answer": answer}))
`

func TestProgramInBwrapReachesOnlyItsSession(t *testing.T) { testProgramSandboxed(t, "bwrap") }

func TestProgramInDockerReachesOnlyItsSession(t *testing.T) { testProgramSandboxed(t, "docker") }

func testProgramSandboxed(t *testing.T, box string) {
	if _, err := program.SandboxOpener(context.Background(), box); err != nil {
		t.Skipf("the %s sandbox is not usable here: %v", box, err)
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	dir, err := os.MkdirTemp("", "rllm-program-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The sandbox's user (nobody, when the tests run as root) reads it.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent.py"), []byte(sandboxedAgent), 0o644); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(dir); d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 && os.Geteuid() == 0 {
			t.Skipf("%s is private, so the sandbox's user cannot reach the test's directory", d)
		}
	}
	g, err := program.Shared()
	if err != nil {
		t.Fatal(err)
	}
	w := newWorkflow(t, answering("7"), map[string]any{"command": []any{"/usr/bin/python3", "agent.py", g.Base + "/health", map[string]string{"bwrap": "ro", "docker": "rw"}[box]},
		"dir": dir, "sandbox": box})
	ep, err := w.Run(context.Background(), task, "t:0")
	if err != nil {
		t.Fatalf("%v (%s)", err, ep.Error)
	}
	if ep.TerminationReason != episode.TerminationEnvDone || !ep.IsCorrect || len(ep.Trajectories) != 1 {
		t.Fatalf("episode %+v", ep)
	}
	if ep.Metrics["denied_connections"] < 2 {
		t.Errorf("denied_connections = %v, want the gateway's TCP port and example.com counted", ep.Metrics["denied_connections"])
	}
}

func TestProgramSandboxArg(t *testing.T) {
	_, err := program.New(program.Params{Command: "true", Sandbox: "chroot", TimeoutS: 1, MaxCalls: 1}, workflow.Deps{Sampler: answering("7")})
	if err == nil || !strings.Contains(err.Error(), `workflow.args.sandbox "chroot"`) {
		t.Fatalf("err = %v", err)
	}
}
