package harbor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/tasks/harbor"
	"github.com/rllm-org/rllm-go/pkg/tool"
	"github.com/rllm-org/rllm-go/pkg/toolcall"
	"github.com/rllm-org/rllm-go/pkg/usererr"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// engine opens the process-wide engine on the local Docker daemon. It
// skips, saying why, where no daemon answers or the local base image is
// absent, unless RLLM_REQUIRE_DOCKER=1 (.ci/run sets it once
// scripts/docker-setup.sh has succeeded).
func engine(t *testing.T) *harbor.Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := harbor.SharedEngine(ctx)
	if err != nil {
		if usererr.Is(err) && os.Getenv("RLLM_REQUIRE_DOCKER") != "1" {
			t.Skipf("tasks in containers are not exercised here (%v); scripts/docker-setup.sh sets Docker up", err)
		}
		t.Fatal(err)
	}
	return e
}

// generated writes n repofix tasks on the local base image.
func generated(t *testing.T, n int, seed uint64) []*harbor.Task {
	t.Helper()
	dir := t.TempDir()
	if _, err := harbor.Generate(dir, n, seed, harbor.GenerateOptions{Image: sandbox.BaseImage(), HiddenTests: 4}); err != nil {
		t.Fatal(err)
	}
	tasks, err := harbor.LoadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

// edit rewrites files of a task's directory and reloads it.
func edit(t *testing.T, tk *harbor.Task, files map[string]string) *harbor.Task {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(tk.Dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n, err := harbor.Load(tk.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCheck(t *testing.T) {
	e := engine(t)
	tasks := generated(t, 8, 3)
	const fail = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
	tasks[1] = edit(t, tasks[1], map[string]string{"tests/test.sh": "#!/bin/bash\necho running; echo no reward here\n"})
	tasks[2] = edit(t, tasks[2], map[string]string{"tests/test.sh": "#!/bin/bash\necho 'one point five' > /logs/verifier/reward.txt\n"})
	tasks[3] = edit(t, tasks[3], map[string]string{"solution/solve.sh": "#!/bin/bash\ntrue\n"})
	tasks[4] = edit(t, tasks[4], map[string]string{"tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"})
	tasks[5] = edit(t, tasks[5], map[string]string{"environment/Dockerfile": "FROM " + sandbox.BaseImage() + "\nRUN echo building && exit 3\n"})
	tasks[6] = edit(t, tasks[6], map[string]string{"tests/test.sh": "#!/bin/bash\necho '{\"reward\": 1.0}' > /logs/verifier/reward.json\n" + "[ -e /app/FIXED ] || echo '{\"reward\": 0}' > /logs/verifier/reward.json\n",
		"solution/solve.sh": "#!/bin/bash\ntouch /app/FIXED\n"})
	tasks[7] = edit(t, tasks[7], map[string]string{"solution/solve.sh": "#!/bin/bash\nexit 4\n", "tests/test.sh": fail})
	// The newer layout with an image by name instead of a Dockerfile,
	// a reward in reward.json, and the verifier's environment.
	img := filepath.Join(t.TempDir(), "by-image")
	for name, content := range map[string]string{
		"instruction.md": "Write hi to /srv/out.txt.",
		// The agent writes outside any working directory (the image has
		// none): root's, in a task whose verifier checks the system.
		"task.toml": "schema_version = \"1.1\"\n[task]\nname = \"demo/by-image\"\n[agent]\nuser = \"root\"\n[verifier]\ntimeout_sec = 30\nsystem_state = true\n[verifier.env]\nWANT = \"hi\"\n" +
			"[environment]\ndocker_image = \"" + sandbox.BaseImage() + "\"\nmemory = \"512M\"\n",
		"tests/test.sh":     "#!/bin/bash\nif [ \"$(cat /srv/out.txt 2>/dev/null)\" = \"$WANT\" ]; then r=1; else r=0; fi\necho \"{\\\"reward\\\": $r, \\\"note\\\": \\\"x\\\"}\" > /logs/verifier/reward.json\n",
		"solution/solve.sh": "#!/bin/bash\nmkdir -p /srv && echo hi > /srv/out.txt\n",
	} {
		p := filepath.Join(img, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	byImage, err := harbor.Load(img)
	if err != nil || byImage.Name != "demo/by-image" || byImage.Config.MemoryMB != 512 {
		t.Fatalf("%+v %v", byImage, err)
	}
	tasks = append(tasks, byImage)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	before := taskContainers(t)
	res, err := harbor.Check(ctx, e, tasks, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"",
		"wrote no reward",
		"but not a number: \"one point five\"",
		"its oracle (solution/solve.sh) scores 0, not 1",
		"scores 1 with nothing done (the null agent), not 0",
		"failed: The command", // the build's error, then its log's end
		"",                    // reward.json
		"its oracle (solution/solve.sh) failed: exit status 4",
		"", // by image, the newer layout
	}
	for i, r := range res {
		if want[i] == "" {
			if !r.OK() || r.OracleReward != 1 || r.NullReward != 0 {
				t.Errorf("task %d: %+v", i, r)
			}
			continue
		}
		if r.OK() || !strings.Contains(r.Problem, want[i]) {
			t.Errorf("task %d: problem %q, want %q", i, r.Problem, want[i])
		}
	}
	if !strings.Contains(res[5].Problem, tasks[5].Dir) || !strings.Contains(res[5].Problem, "building") {
		t.Errorf("the build failure names neither the task nor its log: %s", res[5].Problem)
	}
	if after := taskContainers(t); after != before {
		t.Errorf("%d task containers before, %d after: the check leaked some", before, after)
	}
}

// taskContainers counts this process's task containers.
func taskContainers(t *testing.T) int {
	t.Helper()
	return len(listTaskContainers(t))
}

// scripted replays replies (a tool call per reply until the last).
type scripted struct {
	mu      sync.Mutex
	replies []sampler.Response
	n       int
	seen    []sampler.Request
}

func (s *scripted) Sample(_ context.Context, req sampler.Request) (sampler.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, req)
	if s.n >= len(s.replies) {
		return sampler.Response{Text: "Done.", FinishReason: "stop"}, nil
	}
	r := s.replies[s.n]
	s.n++
	return r, nil
}

func bash(cmd string) sampler.Response {
	args, _ := jsonString(cmd)
	return sampler.Response{ToolCalls: []episode.ToolCall{{ID: "c", Type: "function", Function: episode.FunctionCall{Name: "bash", Arguments: `{"command": ` + args + `}`}}}, FinishReason: "tool_calls"}
}

func jsonString(s string) (string, error) {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}

// runAgent runs one episode of task with the task agent, the task env
// and the bash tool, the model scripted by replies.
func runAgent(t *testing.T, tk *harbor.Task, replies ...sampler.Response) (*episode.Episode, error) {
	t.Helper()
	s := &scripted{replies: replies}
	ep, err := runWith(t, tk, s)
	if len(s.seen) == 0 || len(s.seen[0].Tools) != 1 || s.seen[0].Tools[0].Function.Name != "bash" {
		t.Errorf("the model was not offered the bash tool: %+v", s.seen)
	}
	return ep, err
}

// runWith runs one episode of task with the task agent, the task env
// and the bash tool, sampling from s.
func runWith(t *testing.T, tk *harbor.Task, s sampler.Sampler) (*episode.Episode, error) {
	t.Helper()
	box, err := tool.Open(context.Background(), tool.Config{Builtin: []string{"bash"}, Args: map[string]any{"bash": map[string]any{"timeout_s": 20}}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := workflow.New("multi_turn", nil, workflow.Deps{Sampler: s, Toolbox: box, MaxSteps: 10,
		Agent: workflow.Component{Name: "task"}, Env: workflow.Component{Name: "task"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rows, err := harbor.ReadRows(ctx, tk.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return w.Run(ctx, rows[0], "e:0")
}

// tokenScript is a token sampler that writes the given replies in
// turn, each closed by <|im_end|>, and keeps the prompts it was given.
type tokenScript struct {
	mu      sync.Mutex
	replies []string
	prompts [][]int
}

func (s *tokenScript) Name() string { return "token script" }
func (s *tokenScript) Version() int { return 1 }
func (s *tokenScript) Sample(_ context.Context, req backend.SampleRequest) (backend.SampleResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prompts = append(s.prompts, req.Prompt)
	text := "Done."
	if len(s.replies) > 0 {
		text, s.replies = s.replies[0], s.replies[1:]
	}
	ids := append(local.Tokenizer{}.Encode(text, false), local.TokenImEnd)
	return backend.SampleResult{Sequences: []backend.SampledSequence{{Tokens: ids, Logprobs: make([]float64, len(ids)), StopReason: backend.StopReasonStop}}}, nil
}

func lastInfo(ep *episode.Episode) map[string]any {
	if len(ep.Trajectories) == 0 || len(ep.Trajectories[0].Steps) == 0 {
		return nil
	}
	st := ep.Trajectories[0].Steps
	return st[len(st)-1].Info
}

func TestAgentInTaskContainer(t *testing.T) {
	engine(t)
	tasks := generated(t, 1, 11)
	tk := tasks[0]
	solve, err := os.ReadFile(filepath.Join(tk.Dir, "solution", "solve.sh"))
	if err != nil {
		t.Fatal(err)
	}
	before := taskContainers(t)
	t.Run("fixes the bug with bash", func(t *testing.T) {
		ep, err := runAgent(t, tk, bash("cd /app && python3 -m pytest -q tests; ls /tests 2>&1"), bash(string(solve)), bash("cd /app && python3 -m pytest -q tests"))
		if err != nil {
			t.Fatal(err)
		}
		info := lastInfo(ep)
		if ep.TerminationReason != episode.TerminationEnvDone || !ep.IsCorrect || ep.Trajectories[0].Reward != 1 {
			t.Fatalf("%s correct=%v %v %s", ep.TerminationReason, ep.IsCorrect, info, ep.Error)
		}
		if out, _ := info["verifier_output"].(string); !strings.Contains(out, "passed") {
			t.Errorf("the verifier's output is not kept: %v", info)
		}
		// The agent saw the failing test and not the hidden tests.
		steps := ep.Trajectories[0].Steps
		tool0 := steps[1].ChatCompletions
		seen := tool0[len(tool0)-2].Content
		if !strings.Contains(seen, "failed") || !strings.Contains(seen, "No such file") {
			t.Errorf("first tool result: %q", seen)
		}
	})
	// The embedded policy's path: its chat template offers the tool, the
	// <tool_call> it samples runs in the container, the result comes
	// back in the next prompt, and the turns train as one sequence.
	t.Run("embedded policy fixes the bug with bash", func(t *testing.T) {
		fix := toolcall.Render("", bash(string(solve)).ToolCalls)
		tokens := &tokenScript{replies: []string{fix, "Fixed."}}
		ep, err := runWith(t, tk, local.NewChatSampler(tokens))
		if err != nil {
			t.Fatal(err)
		}
		if !ep.IsCorrect || ep.Trajectories[0].Reward != 1 || len(ep.Trajectories[0].Steps) != 2 {
			t.Fatalf("%s correct=%v steps=%d %v %s", ep.TerminationReason, ep.IsCorrect, len(ep.Trajectories[0].Steps), lastInfo(ep), ep.Error)
		}
		first, _ := local.Tokenizer{}.Decode(tokens.prompts[0], false)
		if !strings.Contains(first, "<tools>\n{\"type\":\"function\",\"function\":{\"name\":\"bash\"") {
			t.Errorf("the first prompt does not offer bash: %q", first)
		}
		second, _ := local.Tokenizer{}.Decode(tokens.prompts[1], false)
		if !strings.HasSuffix(second, "</tool_response><|im_end|>\n<|im_start|>assistant\n") {
			t.Errorf("the second prompt does not end with the tool's result: %q", second)
		}
		seqs, st, err := rollout.Assemble([]*episode.Episode{ep}, rollout.AssembleOptions{FilterTokenMismatch: true})
		if err != nil || len(seqs) != 1 || st.TokenMismatches != 0 {
			t.Fatalf("assembled %d sequences, %+v, %v", len(seqs), st, err)
		}
		masked := 0
		for _, m := range seqs[0].LossMask {
			if m == 0 {
				masked++
			}
		}
		if want := len(tokens.prompts[1]) - len(tokens.prompts[0]) - len(fix) - 1; masked != want {
			t.Errorf("%d env tokens between the turns, want %d", masked, want)
		}
	})
	hostile := []struct {
		name   string
		cmds   []string
		reason episode.TerminationReason
		want   string // in the error or the last step's reward_error/verifier output
		small  bool   // storage_mb = 64
	}{
		{name: "deletes /logs and forges a reward", cmds: []string{"rm -rf /logs /tests; mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt"}, reason: episode.TerminationEnvDone},
		{name: "leaves a loop writing the reward", cmds: []string{`env -i setsid sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; done' >/dev/null 2>&1 < /dev/null & echo started`}, reason: episode.TerminationEnvDone},
		{name: "leaves a loop rewriting the tests", cmds: []string{`env -i setsid sh -c 'while :; do [ -f /tests/test.sh ] && printf "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n" > /tests/test.sh; done' >/dev/null 2>&1 < /dev/null & echo started`}, reason: episode.TerminationEnvDone},
		{name: "fork bomb", cmds: []string{"f() { f | f & }; f; sleep 30"}, reason: episode.TerminationEnvDone},
		{name: "fills the disk", small: true, cmds: []string{"for i in 1 2 3 4; do dd if=/dev/zero of=/app/big$i bs=1M count=50 2>&1 | tail -1; sleep 1; done"},
			want: "disk limit exceeded"},
		{name: "floods the output", cmds: []string{"yes flood"}, reason: episode.TerminationEnvDone},
		// Unprivileged, the agent cannot (TestTaskRewardHacks plays it as root).
		{name: "breaks the verifier's tools", cmds: []string{"rm -f /usr/bin/bash /bin/bash 2>&1; echo gone"}, reason: episode.TerminationEnvDone, want: "1 failed"},
	}
	for _, tc := range hostile {
		t.Run(tc.name, func(t *testing.T) {
			var rs []sampler.Response
			for _, c := range tc.cmds {
				rs = append(rs, bash(c))
			}
			task := tk
			if tc.small {
				task = edit(t, tk, map[string]string{"task.toml": "version = \"1.0\"\n[environment]\nstorage_mb = 64\n"})
				defer edit(t, tk, map[string]string{"task.toml": "version = \"1.0\"\n"})
			}
			ep, err := runAgent(t, task, rs...)
			t.Logf("%s, reward %v, error %q, info %v", ep.TerminationReason, ep.Trajectories[0].Reward, ep.Error, lastInfo(ep)["reward_error"])
			if ep.Trajectories[0].Reward != 0 || ep.IsCorrect {
				t.Fatalf("reward %v (%s, %v)", ep.Trajectories[0].Reward, ep.TerminationReason, err)
			}
			if tc.reason != "" && ep.TerminationReason != tc.reason {
				t.Errorf("%s (%v)", ep.TerminationReason, err)
			}
			if tc.want != "" {
				got := ep.Error + " " + strings.Join(infoStrings(lastInfo(ep)), " ")
				if !strings.Contains(got, tc.want) {
					t.Errorf("%q lacks %q", got, tc.want)
				}
			}
		})
	}
	t.Run("outlives its time", func(t *testing.T) {
		short := edit(t, tk, map[string]string{"task.toml": "version = \"1.0\"\n[agent]\ntimeout_sec = 2\n"})
		ep, err := runAgent(t, short, bash("sleep 15"), bash("echo again"))
		if ep.TerminationReason != episode.TerminationTimeout || !errors.Is(err, errTimeoutOf(err)) || !strings.Contains(ep.Error, "[agent] timeout_sec = 2") {
			t.Fatalf("%s: %v", ep.TerminationReason, err)
		}
	})
	if after := taskContainers(t); after != before {
		t.Errorf("%d task containers before, %d after", before, after)
	}
}

func errTimeoutOf(err error) error { return err }

func infoStrings(m map[string]any) []string {
	var out []string
	for _, v := range m {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// listTaskContainers lists the task containers of this process on the
// daemon.
func listTaskContainers(t *testing.T) []string {
	t.Helper()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", "org.rllm.task").Add("label", fmt.Sprintf("%s=%d", sandbox.LabelOwnerPID, os.Getpid()))})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// TestWorkspacesHook: a workflow running its own agent (a harness, a
// program) asks env.WorkspacesFor for the task's container, runs its
// agent there, and has the task's verifier score it in the same
// container.
func TestWorkspacesHook(t *testing.T) {
	engine(t)
	tk := generated(t, 1, 21)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The rows of a directory dataset, as the trainer and rllm eval read them.
	rows, err := dataset.Load(ctx, filepath.Dir(tk.Dir), dataset.Options{})
	if err != nil || len(rows) != 1 || rows[0]["task_dir"] != tk.Dir || rows[0]["instruction"] != tk.Instruction {
		t.Fatalf("%v %v", rows, err)
	}
	if !env.HasWorkspace("task") || env.HasWorkspace("math") {
		t.Fatal("HasWorkspace")
	}
	w, ok, err := env.WorkspacesFor("task", nil)
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	def := sandbox.WorkspaceSpec{WorkDir: "/work", ReadOnly: []string{"/usr/share/doc"}, Labels: map[string]string{"rllm.harness": "test"}}
	opener, spec, files, err := w.Workspace(ctx, rows[0], def)
	if err != nil {
		t.Fatal(err)
	}
	if spec.WorkDir != "/app" || len(files) != 0 || spec.Labels["rllm.harness"] != "test" || spec.ReadOnly[0] != "/usr/share/doc" || spec.Limits.MemoryBytes != 1024<<20 {
		t.Fatalf("spec %+v", spec)
	}
	for _, solve := range []bool{false, true} {
		ws, err := opener.Open(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if solve { // the "agent": the oracle's script, run as a harness would run its commands
			script, _ := os.ReadFile(filepath.Join(tk.Dir, "solution", "solve.sh"))
			res, err := ws.Exec(ctx, sandbox.ExecRequest{Command: []string{"bash", "-c", string(script)}})
			if err != nil || !res.OK() {
				t.Fatal(res.Reason(), err)
			}
		}
		reward, correct, info, err := w.Verify(ctx, ws, rows[0])
		ws.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]float64{false: 0, true: 1}[solve]; reward != want || correct != solve || info["verifier_output"] == nil {
			t.Errorf("solved %v: reward %v correct %v %v", solve, reward, correct, info)
		}
	}
}

// TestAgentUser: who the agent runs as, by task.toml, and who owns its
// working directory; a user the image lacks is a user error naming
// task.toml's line.
func TestAgentUser(t *testing.T) {
	e := engine(t)
	tk := generated(t, 1, 31)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		toml, want string
		fresh      bool
	}{
		{"version = \"1.0\"\n", "10001 10001 /home/rllm 10001", false},
		{"version = \"1.0\"\n[agent]\nuser = \"nobody\"\n", "65534 65534 /home/rllm 65534", false},
		{"version = \"1.0\"\n[agent]\nuser = 4242\n", "4242 4242 /home/rllm 4242", false},
		{"version = \"1.0\"\n[agent]\nuser = \"root\"\n", "0 0 /root 0", true},
		{"version = \"1.0\"\n[agent]\nuser = \"root\"\n[verifier]\nsystem_state = true\n", "0 0 /root 0", false},
	} {
		task := edit(t, tk, map[string]string{"task.toml": tc.toml})
		run, err := e.Open(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		res, err := run.WS.Exec(ctx, sandbox.ExecRequest{Command: []string{"sh", "-c", `echo $(id -u) $(stat -c %u /app) $HOME $(stat -c %u /app/tests/*.py | sort -u)`}})
		run.Close()
		if err != nil || strings.TrimSpace(string(res.Stdout)) != tc.want || run.Plan.Fresh != tc.fresh {
			t.Errorf("%q: %q (fresh %v) %v, want %q (fresh %v)", tc.toml, res.Stdout, run.Plan.Fresh, err, tc.want, tc.fresh)
		}
	}
	ghost := edit(t, tk, map[string]string{"task.toml": "version = \"1.0\"\n[agent]\nuser = \"ghost\"\n"})
	_, err := e.Open(ctx, ghost)
	if !usererr.Is(err) || !strings.Contains(err.Error(), "task.toml:3: agent.user = \"ghost\" is not a user of the task's image") {
		t.Fatalf("%v", err)
	}
}
