package harness

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/gateway/gatewaytest"
	"github.com/rllm-org/rllm-go/pkg/harness"
	"github.com/rllm-org/rllm-go/pkg/harness/harnesstest"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/usererr"
	"github.com/rllm-org/rllm-go/pkg/workflow"
	"github.com/rllm-org/rllm-go/pkg/workflow/program"
)

// TestMain runs this binary as the sandbox's network forwarder when a
// sandbox starts it so (rllm does the same with itself).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.ForwardCommand {
		os.Exit(sandbox.ForwardMain(os.Args[2:], os.Stderr))
	}
	if exe, err := os.Executable(); err == nil {
		sandbox.SetSelf(exe)
	}
	os.Exit(m.Run())
}

// cacheDir is where `rllm harness install` puts harnesses on this machine.
func cacheDir() string { return harness.CacheDir(os.Getenv, os.Geteuid()) }

func task() harnesstest.Task {
	return harnesstest.Task{Path: "/work/hello.txt", Content: "hello from the harness", Command: "cat hello.txt | tee ran.txt", Answer: "Created hello.txt and ran it."}
}

const verifier = `test "$(cat hello.txt)" = "hello from the harness" && test "$(cat ran.txt)" = "hello from the harness"`

// runHarness runs one episode of harness name against the scripted model.
func runHarness(t *testing.T, name string) *episode.Episode { return runHarnessIn(t, name, "bwrap") }

func runHarnessIn(t *testing.T, name, box string) *episode.Episode {
	t.Helper()
	if testing.Short() {
		t.Skip("a real harness run takes seconds (-short)")
	}
	e, err := harness.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Installed(cacheDir()) {
		if os.Getenv("RLLM_HARNESS_REQUIRE") != "" && slices.Contains(strings.Split(os.Getenv("RLLM_HARNESS_REQUIRE"), ","), name) {
			t.Fatalf("harness %s is not installed in %s: rllm harness install %s", name, cacheDir(), name)
		}
		t.Skipf("harness %s is not installed in %s (rllm harness install %s)", name, cacheDir(), name)
	}
	if _, err := program.SandboxOpener(context.Background(), box); err != nil {
		t.Skipf("the %s sandbox is not usable here: %v", box, err)
	}
	smp := harnesstest.Sampler(task())
	w, err := New(Params{Harness: name, Dir: cacheDir(), WorkDir: "/work", Verifier: verifier, TimeoutS: 300, MaxCalls: 32,
		Sandbox: box, MemoryMB: 32768, Processes: 1024, Gamma: 1}, workflow.Deps{Sampler: smp})
	if err != nil {
		t.Fatal(err)
	}
	g, err := program.Start("127.0.0.1:0", gateway.New(gateway.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	w.WithGateway(g)
	ep, err := w.Run(context.Background(), episode.Task{"instruction": "Create hello.txt containing 'hello from the harness', then run `cat hello.txt | tee ran.txt`."}, "t:0")
	if err != nil {
		t.Fatalf("episode: %v", err)
	}
	return ep
}

// checkEpisode checks the reward and that every step's tokens are what
// the model sampled, token for token.
func checkEpisode(t *testing.T, ep *episode.Episode) {
	t.Helper()
	if ep.TerminationReason != episode.TerminationEnvDone || !ep.IsCorrect || ep.Metrics["reward"] != 1 {
		t.Fatalf("episode ended %s, correct %v, reward %v: %s", ep.TerminationReason, ep.IsCorrect, ep.Metrics["reward"], ep.Error)
	}
	agent := 0
	for _, tr := range ep.Trajectories {
		for _, s := range tr.Steps {
			last := s.ChatCompletions[len(s.ChatCompletions)-1]
			want := gatewaytest.Tokens(gatewaytest.Body(last.Reasoning, last.Content, last.ToolCalls) + "\n")
			if !slices.Equal(s.ResponseIDs, want) {
				t.Errorf("step response ids are not the sampled ones")
			}
			if s.Info["auxiliary"] == true {
				if slices.Contains(s.LossMask, 1) {
					t.Errorf("an auxiliary call trains")
				}
				continue
			}
			agent++
			if len(s.PromptIDs) == 0 || !slices.Contains(s.LossMask, 1) {
				t.Errorf("an agent turn has no prompt ids or does not train")
			}
		}
	}
	// The answer turn sees what the command printed: a harness whose
	// shell tool lost its output (Qwen Code's PTY shell under load)
	// answers as if it printed nothing.
	if last := lastAgentPrompt(ep); !strings.Contains(last, task().Content) {
		t.Errorf("the last agent turn's tool results do not hold the command's output %q: %q", task().Content, last)
	}
	// write, run, answer: at least three agent turns.
	if agent < 3 {
		t.Errorf("%d agent turns, want at least 3 (write, run, answer)", agent)
	}
	if clean[strings.TrimPrefix(ep.Trajectories[0].Name, Name+"/")] && ep.Metrics["denied_connections"] != 0 {
		t.Errorf("the harness tried %v connections besides its session", ep.Metrics["denied_connections"])
	}
	t.Logf("%s: first call after %.2f s, %v s, %v calls (%v auxiliary, %v count_tokens), %v forwarded and %v denied connections", ep.ID, ep.Metrics["first_call_seconds"], ep.Metrics["harness_seconds"], ep.Metrics["model_calls"], ep.Metrics["auxiliary_calls"], ep.Metrics["count_tokens_calls"], ep.Metrics["forwarded_connections"], ep.Metrics["denied_connections"])
}

// lastAgentPrompt is the text of the tool results the last agent turn
// was sent.
func lastAgentPrompt(ep *episode.Episode) string {
	var out string
	for _, tr := range ep.Trajectories {
		for _, s := range tr.Steps {
			if s.Info["auxiliary"] == true {
				continue
			}
			var b strings.Builder
			for _, m := range s.ChatCompletions {
				if m.Role == "tool" {
					b.WriteString(m.Content)
					b.WriteString("\n")
				}
			}
			out = b.String()
		}
	}
	return out
}

// clean are the harnesses seen to call nothing but their session; the
// others' attempts elsewhere are denied and counted (docs/harnesses.md).
var clean = map[string]bool{"pi": true, "qwen-code": true}

func TestHarnessesEndToEnd(t *testing.T) {
	for _, name := range []string{"pi", "qwen-code", "opencode", "claude-code", "codex"} {
		t.Run(name, func(t *testing.T) { checkEpisode(t, runHarness(t, name)) })
	}
}

// TestHarnessInDocker: the same run in a container of the local base
// image, its only network the session through the forwarder. Claude Code
// brings its own Node and native binary, so the image needs neither.
func TestHarnessInDocker(t *testing.T) {
	checkEpisode(t, runHarnessIn(t, "claude-code", "docker"))
}

func TestNotInstalledNamesTheInstallCommand(t *testing.T) {
	_, err := New(Params{Harness: "pi", Dir: t.TempDir(), Verifier: "true", Sandbox: "bwrap", WorkDir: "/work"}, workflow.Deps{Sampler: &gatewaytest.Sampler{}})
	if err == nil || !strings.Contains(err.Error(), "rllm harness install pi") || usererr.ExitCode(context.Background(), err) != usererr.ExitUsage {
		t.Fatalf("err = %v", err)
	}
}

func TestBadArgs(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{Dir: "/x", Sandbox: "bwrap", WorkDir: "/work"}, "workflow.args.harness is not set"},
		{Params{Harness: "pi", Dir: "/x", Sandbox: "bwrap", WorkDir: "work"}, "workflow.args.workdir"},
		{Params{Harness: "nope", Dir: "/x", Sandbox: "bwrap", WorkDir: "/work"}, `"nope" is not a registered harness`},
		{Params{Harness: "pi", Sandbox: "bwrap", WorkDir: "/work"}, "workflow.args.dir is empty"},
		{Params{Harness: "pi", Dir: "/x", Sandbox: "firecracker", WorkDir: "/work"}, "workflow.args.sandbox"},
	} {
		_, err := New(tc.p, workflow.Deps{Sampler: &gatewaytest.Sampler{}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.p, err, tc.want)
		}
	}
}
