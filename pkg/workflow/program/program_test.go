package program_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/gateway/gatewaytest"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	_ "github.com/rllm-org/rllm-go/pkg/tasks"
	"github.com/rllm-org/rllm-go/pkg/workflow"
	"github.com/rllm-org/rllm-go/pkg/workflow/program"
)

// The test binary doubles as the agent program: run with the argument
// "agent-program MODE", it acts as MODE says and exits.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.ForwardCommand { // a sandbox's network forwarder
		os.Exit(sandbox.ForwardMain(os.Args[2:], os.Stderr))
	}
	if exe, err := os.Executable(); err == nil {
		sandbox.SetSelf(exe)
	}
	if f := os.Getenv("PROGRAM_TEST_RLLM"); f != "" { // outlive_linux_test.go
		os.Exit(rllmStandIn(f))
	}
	for i, a := range os.Args {
		if a == "serving-program" && i+1 < len(os.Args) {
			os.Exit(servingProgram(os.Args[i+1], os.Args[i+2:]))
		}
		if a == "agent-program" && i+1 < len(os.Args) {
			os.Exit(agentProgram(os.Args[i+1], os.Args[i+2:]))
		}
	}
	os.Exit(m.Run())
}

// chat posts one chat call the way the OpenAI SDKs do.
func chat(msgs []map[string]any) (string, int, error) {
	return chatAt(os.Getenv("OPENAI_BASE_URL"), os.Getenv("OPENAI_API_KEY"), msgs)
}

func chatAt(base, key string, msgs []map[string]any) (string, int, error) {
	body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs, "temperature": 0.5})
	req, _ := http.NewRequest("POST", base+"/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Choices []struct {
			Message struct{ Content string }
		}
		Error *struct{ Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", resp.StatusCode, err
	}
	if resp.StatusCode != 200 {
		return "", resp.StatusCode, fmt.Errorf("%d: %s", resp.StatusCode, r.Error.Message)
	}
	return r.Choices[0].Message.Content, 200, nil
}

func agentProgram(mode string, args []string) int {
	var task map[string]any
	if err := json.NewDecoder(os.Stdin).Decode(&task); err != nil {
		fmt.Fprintln(os.Stderr, "no task on stdin:", err)
		return 3
	}
	q, _ := task["question"].(string)
	switch mode {
	case "answer", "multiturn":
		msgs := []map[string]any{{"role": "user", "content": q}}
		reply, _, err := chat(msgs)
		if err != nil {
			fmt.Fprintln(os.Stderr, "model call failed:", err)
			return 1
		}
		if mode == "multiturn" {
			msgs = append(msgs, map[string]any{"role": "assistant", "content": reply}, map[string]any{"role": "user", "content": "are you sure?"})
			if reply, _, err = chat(msgs); err != nil {
				fmt.Fprintln(os.Stderr, "model call failed:", err)
				return 1
			}
		}
		fmt.Println("some log line")
		out, _ := json.Marshal(map[string]any{"answer": reply})
		fmt.Println(string(out))
	case "reward":
		if _, _, err := chat([]map[string]any{{"role": "user", "content": q}}); err != nil {
			return 1
		}
		fmt.Println(`{"reward": 0.25, "is_correct": false}`)
	case "env":
		// Prints which variables it got (names only, plus the URLs).
		var names []string
		for _, kv := range os.Environ() {
			k, _, _ := strings.Cut(kv, "=")
			names = append(names, k)
		}
		chat([]map[string]any{{"role": "user", "content": q}})
		out, _ := json.Marshal(map[string]any{"env": names, "base": os.Getenv("OPENAI_BASE_URL"), "anthropic": os.Getenv("ANTHROPIC_BASE_URL"), "session": os.Getenv("RLLM_SESSION_ID")})
		os.WriteFile(args[0], out, 0o644)
		fmt.Println(`{"reward": 1}`)
	case "nocall":
		fmt.Println(`{"answer": "7"}`)
	case "flood":
		for i := 0; i < 10000; i++ {
			if _, code, err := chat([]map[string]any{{"role": "user", "content": q}}); err != nil {
				fmt.Fprintf(os.Stderr, "call %d refused with %d\n", i+1, code)
				time.Sleep(time.Hour) // keep going as a stubborn program would
			}
		}
	case "garbage":
		chat([]map[string]any{{"role": "user", "content": q}})
		fmt.Println("the answer is 7, trust me")
	case "exit1":
		chat([]map[string]any{{"role": "user", "content": q}})
		fmt.Fprintln(os.Stderr, "Traceback: something\nValueError: bad thing happened")
		return 1
	case "hang":
		chat([]map[string]any{{"role": "user", "content": q}})
		fmt.Fprintln(os.Stderr, "thinking forever")
		time.Sleep(time.Hour)
	case "fork":
		// A grandchild that outlives the program, writing its pid.
		c := exec.Command("sleep", "1000")
		if err := c.Start(); err != nil {
			return 4
		}
		os.WriteFile(args[0], []byte(strconv.Itoa(c.Process.Pid)), 0o644)
		chat([]map[string]any{{"role": "user", "content": q}})
		fmt.Println(`{"answer": "7"}`)
	case "snoop":
		// Tries what a program must not do: list the sessions, read and
		// delete another's (args[0]), open one, with its own token and
		// with none. It writes each status to args[1].
		base := strings.TrimSuffix(os.Getenv("OPENAI_BASE_URL"), "/sessions/"+os.Getenv("RLLM_SESSION_ID")+"/v1")
		chat([]map[string]any{{"role": "user", "content": q}})
		got := map[string]int{}
		for _, tok := range []string{os.Getenv("OPENAI_API_KEY"), ""} {
			for _, r := range [][2]string{{"GET", "/sessions"}, {"GET", "/sessions/" + args[0]}, {"GET", "/sessions/" + args[0] + "/traces"},
				{"DELETE", "/sessions/" + args[0]}, {"POST", "/sessions"}, {"DELETE", "/sessions/" + os.Getenv("RLLM_SESSION_ID")}} {
				req, _ := http.NewRequest(r[0], base+r[1], strings.NewReader("{}"))
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
				resp.Body.Close()
				got[fmt.Sprintf("%s %s token=%v", r[0], r[1], tok != "")] = resp.StatusCode
			}
		}
		// Its own traces it may read.
		req, _ := http.NewRequest("GET", base+"/sessions/"+os.Getenv("RLLM_SESSION_ID")+"/traces", nil)
		req.Header.Set("Authorization", "Bearer "+os.Getenv("OPENAI_API_KEY"))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			got["own traces"] = resp.StatusCode
		}
		out, _ := json.Marshal(got)
		os.WriteFile(args[1], out, 0o644)
		fmt.Println(`{"reward": 1}`)
	case "bigbody":
		big := strings.Repeat("a", 100<<20)
		_, code, err := chat([]map[string]any{{"role": "user", "content": big}})
		fmt.Fprintf(os.Stderr, "the 100 MB call answered %d: %v\n", code, err)
		return 1
	}
	return 0
}

func newWorkflow(t *testing.T, smp sampler.Sampler, args map[string]any) workflow.Workflow {
	t.Helper()
	spec := workflow.Spec{Name: "program", Args: args, Deps: workflow.Deps{Env: workflow.Component{Name: "arith"}}}
	w, err := spec.New(smp, sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func self(mode string, more ...string) []any {
	out := []any{os.Args[0], "-test.run=^$", "agent-program", mode}
	for _, m := range more {
		out = append(out, m)
	}
	return out
}

var task = episode.Task{"question": "3+4=", "ground_truth": "7", "data_source": "arith"}

func answering(text string) *gatewaytest.Sampler {
	return &gatewaytest.Sampler{Reply: func(sampler.Request) gatewaytest.Reply { return gatewaytest.Reply{Text: text} }}
}

func TestProgramEpisode(t *testing.T) {
	for _, tc := range []struct {
		mode, reply string
		reward      float64
		correct     bool
		steps       int
	}{
		{"answer", "7", 1, true, 1},
		{"answer", "8", 0.3, false, 1}, // arith's format score for a wrong integer,
		{"multiturn", "7", 1, true, 2},
		{"reward", "7", 0.25, false, 1},
	} {
		t.Run(tc.mode+"/"+tc.reply, func(t *testing.T) {
			w := newWorkflow(t, answering(tc.reply), map[string]any{"command": self(tc.mode)})
			ep, err := w.Run(context.Background(), task, "t:0")
			if err != nil {
				t.Fatalf("%v (%+v)", err, ep)
			}
			if ep.TerminationReason != episode.TerminationEnvDone || ep.IsCorrect != tc.correct || len(ep.Trajectories) != 1 {
				t.Fatalf("episode %+v", ep)
			}
			tr := ep.Trajectories[0]
			if tr.Reward < tc.reward-1e-9 || tr.Reward > tc.reward+1e-9 || len(tr.Steps) != tc.steps || !tr.Steps[len(tr.Steps)-1].Done {
				t.Fatalf("trajectory reward %v, %d steps", tr.Reward, len(tr.Steps))
			}
			for _, st := range tr.Steps {
				if len(st.PromptIDs) == 0 || len(st.ResponseIDs) != len(st.Logprobs) || len(st.LossMask) != len(st.ResponseIDs) || st.WeightVersion != "7" {
					t.Fatalf("step %+v", st)
				}
			}
			// The client's model and temperature were not used, and the
			// trainer lays the turns out without a token mismatch.
			_, stats, err := rollout.Assemble([]*episode.Episode{ep}, rollout.AssembleOptions{FilterTokenMismatch: true})
			if err != nil || stats.TokenMismatches != 0 {
				t.Fatalf("assemble: %v %+v", err, stats)
			}
		})
	}
}

func TestProgramEnvironment(t *testing.T) {
	t.Setenv("RLLM_TEST_SECRET", "hunter2")
	t.Setenv("TINKER_API_KEY", "tk-secret")
	t.Setenv("OPENAI_API_KEY", "sk-real-key")
	t.Setenv("RLLM_PASSED", "yes")
	out := filepath.Join(t.TempDir(), "env.json")
	w := newWorkflow(t, answering("7"), map[string]any{"command": self("env", out), "pass_env": []any{"RLLM_PASSED"}})
	if _, err := w.Run(context.Background(), task, "t:0"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Env                      []string
		Base, Anthropic, Session string
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, k := range got.Env {
		have[k] = true
	}
	for _, k := range []string{"OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "RLLM_SESSION_ID", "RLLM_PASSED", "PATH"} {
		if !have[k] {
			t.Errorf("the program lacks %s (has %v)", k, got.Env)
		}
	}
	for _, k := range []string{"RLLM_TEST_SECRET", "TINKER_API_KEY"} {
		if have[k] {
			t.Errorf("the program got %s", k)
		}
	}
	if !strings.HasPrefix(got.Base, "http://127.0.0.1:") || got.Base != got.Anthropic+"/v1" || !strings.HasSuffix(got.Anthropic, "/sessions/"+got.Session) {
		t.Errorf("base URLs %q, %q for session %q", got.Base, got.Anthropic, got.Session)
	}
}

func TestProgramFailures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command any
		args    map[string]any
		reason  episode.TerminationReason
		want    []string
	}{
		{"never calls the model", self("nocall"), nil, episode.TerminationError, []string{"made no model call"}},
		{"calls 10000 times", self("flood"), map[string]any{"max_calls": 5}, episode.TerminationError, []string{"max_calls=5"}},
		{"prints garbage", self("garbage"), nil, episode.TerminationError, []string{`{"answer": ...}`, "the answer is 7, trust me"}},
		{"exits 1", self("exit1"), nil, episode.TerminationError, []string{"exited with status 1", "ValueError: bad thing happened"}},
		{"hangs", self("hang"), map[string]any{"timeout_s": 0.5}, episode.TerminationTimeout, []string{"timeout_s=0.5", "thinking forever"}},
		{"sends 100 MB", self("bigbody"), nil, episode.TerminationError, []string{"exited with status 1", "413", "request body too large"}},
		{"not found", "exec ./no-such-agent.py", nil, episode.TerminationError, []string{"exited with status 127"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"command": tc.command}
			for k, v := range tc.args {
				args[k] = v
			}
			w := newWorkflow(t, answering("7"), args)
			ep, err := w.Run(context.Background(), task, "t:0")
			if err == nil {
				t.Fatalf("no error: %+v", ep)
			}
			if ep.TerminationReason != tc.reason || ep.IsCorrect {
				t.Errorf("termination %s, correct %v", ep.TerminationReason, ep.IsCorrect)
			}
			for _, w := range tc.want {
				if !strings.Contains(ep.Error, w) {
					t.Errorf("error %q lacks %q", ep.Error, w)
				}
			}
			if !strings.Contains(ep.Error, "program `") {
				t.Errorf("error %q does not name the program", ep.Error)
			}
		})
	}
}

// A program reaches its own session and nothing else: on the gateway
// every program episode shares, it can neither list the sessions nor read
// or delete another episode's, nor open one, with its token or without.
func TestProgramCannotReachOtherSessions(t *testing.T) {
	gw, err := program.Shared()
	if err != nil {
		t.Fatal(err)
	}
	victim, err := gw.GW.Open(gateway.SessionConfig{Sampler: answering("7"), MaxCalls: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.GW.Close(victim.ID)
	out := filepath.Join(t.TempDir(), "codes.json")
	w := newWorkflow(t, answering("7"), map[string]any{"command": self("snoop", victim.ID, out)})
	if _, err := w.Run(context.Background(), task, "t:0"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]int
	if err := json.Unmarshal(b, &got); err != nil || len(got) != 13 {
		t.Fatalf("%v %s", err, b)
	}
	for what, code := range got {
		if what == "own traces" {
			if code != 200 {
				t.Errorf("the program could not read its own traces: %d", code)
			}
		} else if code != 401 {
			t.Errorf("%s: %d, want 401", what, code)
		}
	}
	if _, ok := gw.GW.Session(victim.ID); !ok {
		t.Error("the program deleted another session")
	}
}

func TestForkedChildrenDie(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	w := newWorkflow(t, answering("7"), map[string]any{"command": self("fork", pidFile)})
	if _, err := w.Run(context.Background(), task, "t:0"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(b))
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Signal 0 probes; a zombie (killed, not yet reaped by init) counts as gone.
		err := syscall.Kill(pid, 0)
		if err != nil || zombie(pid) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program's child %d outlived it", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z"
}

func TestRelativeCommandInDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agent.sh"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := workflow.Spec{Name: "program", Args: map[string]any{"command": []any{"./agent.sh"}, "dir": dir}, Deps: workflow.Deps{Env: workflow.Component{Name: "arith"}}}
	if err := spec.Check(); err != nil {
		t.Fatalf("a program relative to workflow.args.dir: %v", err)
	}
}

func TestBadArguments(t *testing.T) {
	for name, args := range map[string]map[string]any{
		"no command":               {},
		"empty list":               {"command": []any{}},
		"not strings":              {"command": []any{1, 2}},
		"missing program":          {"command": []any{"/no/such/program"}},
		"misspelt program":         {"command": "pythn3 agent.py"},
		"missing in dir":           {"command": "LOG=1 ./agent.sh --x", "dir": "."},
		"bad pass_env":             {"command": "true", "pass_env": []any{"A=B"}},
		"timeout 0":                {"command": "true", "timeout_s": 0},
		"max_calls 0":              {"command": "true", "max_calls": 0},
		"unknown argument":         {"command": "true", "comand": "x"},
		"unknown mode":             {"command": "true", "mode": "daemon"},
		"processes, per episode":   {"command": "true", "processes": 2},
		"concurrency, per episode": {"command": "true", "mode": "per_episode", "concurrency": 8},
		"processes -1":             {"command": "true", "mode": "serve", "processes": -1},
		"sandbox, served":          {"command": "true", "mode": "serve", "sandbox": "bwrap"},
		"concurrency 5000":         {"command": "true", "mode": "serve", "concurrency": 5000},
	} {
		spec := workflow.Spec{Name: "program", Args: args, Deps: workflow.Deps{Env: workflow.Component{Name: "arith"}}}
		if err := spec.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "workflow.args") {
			t.Errorf("%s: %v does not name the key", name, err)
		}
	}
}

// A misbehaving program does not disturb the episodes running beside it
// on the same gateway.
func TestBadProgramLeavesOthersAlone(t *testing.T) {
	bad := newWorkflow(t, answering("7"), map[string]any{"command": self("flood"), "max_calls": 20})
	huge := newWorkflow(t, answering("7"), map[string]any{"command": self("bigbody")})
	good := newWorkflow(t, answering("7"), map[string]any{"command": self("multiturn")})
	errs := make(chan error, 6)
	for i := range 2 {
		go func() { _, err := bad.Run(context.Background(), task, fmt.Sprint("bad:", i)); errs <- err }()
		go func() { _, err := huge.Run(context.Background(), task, fmt.Sprint("huge:", i)); errs <- err }()
	}
	for i := range 2 {
		ep, err := good.Run(context.Background(), task, fmt.Sprint("good:", i))
		if err != nil || !ep.IsCorrect || len(ep.Trajectories) != 1 || len(ep.Trajectories[0].Steps) != 2 {
			t.Fatalf("a good program beside bad ones: %v %+v", err, ep)
		}
	}
	for range 4 {
		if err := <-errs; err == nil {
			t.Error("a bad program's episode did not fail")
		}
	}
}

// A program that fails because its prompt outgrew the model ends the
// episode with max_prompt_length_exceeded, not an error.
func TestPromptTooLong(t *testing.T) {
	smp := &gatewaytest.Sampler{Reply: func(sampler.Request) gatewaytest.Reply {
		return gatewaytest.Reply{Err: fmt.Errorf("server: %w", sampler.ErrPromptTooLong)}
	}}
	w := newWorkflow(t, smp, map[string]any{"command": self("answer")})
	ep, err := w.Run(context.Background(), task, "t:0")
	if err != nil || ep.TerminationReason != episode.TerminationMaxPromptLength || !strings.Contains(ep.Error, "longer than the model's context") {
		t.Fatalf("%v %+v", err, ep)
	}
}
