package exec

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	osexec "os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// The test binary doubles as the child environment: started with
// EXEC_TEST_CHILD=1 it serves the protocol on stdin/stdout. Its actions:
// "win" ends the episode with reward 1; "crash" writes to stderr and
// exits; "hang" never answers (other episodes go on); "freeze" stops the
// whole process; "garbage" prints a non-JSON line; "stranger" answers
// for another id; "fail" sends an error frame; "noisy" writes to stderr
// and answers; "environ" returns the child's environment; "badreward"
// sends a reward that is a string; anything else is echoed.
func TestMain(m *testing.M) {
	if f := os.Getenv("EXEC_TEST_RLLM"); f != "" { // outlive_linux_test.go
		rllmStandIn(f)
		os.Exit(0)
	}
	if os.Getenv("EXEC_TEST_CHILD") == "1" {
		child(os.Stdin, os.Stdout)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(in io.Reader, out io.Writer) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var mu sync.Mutex
	reply := func(v any) {
		b, _ := json.Marshal(v)
		mu.Lock()
		out.Write(append(b, '\n'))
		mu.Unlock()
	}
	obs := func(id string, o any, r any, done bool) {
		reply(map[string]any{"id": id, "type": "observation", "data": map[string]any{"observation": o, "reward": r, "done": done, "info": map[string]any{"n": 1}}})
	}
	for sc.Scan() {
		var f struct {
			ID   string         `json:"id"`
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			reply(map[string]any{"id": "", "type": "error", "data": map[string]any{"message": "bad json"}})
			continue
		}
		switch f.Type {
		case "reset":
			task, _ := f.Data["task"].(map[string]any)
			obs(f.ID, map[string]any{"text": fmt.Sprintf("start %v", task["question"]), "task": task, "seed": f.Data["seed"]}, nil, false)
		case "close":
		case "step":
			a, _ := f.Data["action"].(string)
			switch a {
			case "win":
				obs(f.ID, "you win", 1, true)
			case "crash":
				fmt.Fprintln(os.Stderr, "Traceback: something broke")
				os.Exit(3)
			case "hang":
			case "freeze":
				time.Sleep(time.Hour)
			case "garbage":
				mu.Lock()
				fmt.Fprintln(out, "hello, I am not JSON")
				mu.Unlock()
			case "stranger":
				obs("someone-else", "x", 0, false)
			case "fail":
				reply(map[string]any{"id": f.ID, "type": "error", "data": map[string]any{"message": "invalid move", "code": "VALIDATION_ERROR"}})
			case "noisy":
				fmt.Fprintln(os.Stderr, "a warning on stderr")
				obs(f.ID, "noted", 0, false)
			case "environ":
				e := os.Environ()
				sort.Strings(e)
				obs(f.ID, e, 0, false)
			case "hugestderr":
				// A progress bar redrawn with \r for 3 MiB, no newline.
				bar := strings.Repeat("x", 1<<10) + "\r"
				for i := 0; i < 3<<10; i++ {
					fmt.Fprint(os.Stderr, bar)
				}
				obs(f.ID, "drawn", 0, false)
			case "grandchild":
				// A wrapper's real program: a grandchild holding stdout and
				// stderr open, outliving this process.
				gc := osexec.Command("sleep", "300")
				gc.Stdout, gc.Stderr = os.Stdout, os.Stderr
				if err := gc.Start(); err != nil {
					reply(map[string]any{"id": f.ID, "type": "error", "data": map[string]any{"message": err.Error()}})
					continue
				}
				obs(f.ID, gc.Process.Pid, 0, false)
			case "badreward":
				obs(f.ID, "x", "lots", false)
			default:
				obs(f.ID, "echo "+a, 0.5, false)
			}
		}
	}
}

func testParams(t *testing.T) Params {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Params{Command: []string{exe, "-test.run=^$"}, EnvVars: map[string]string{"EXEC_TEST_CHILD": "1"}, Processes: 1, StepTimeoutS: 2}
}

// logBuf collects log output from many goroutines.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func quietLogs(t *testing.T) *logBuf {
	b := &logBuf{}
	old := Logger
	Logger = slog.New(slog.NewTextHandler(b, nil))
	t.Cleanup(func() { Logger = old })
	return b
}

func TestProtocol(t *testing.T) {
	quietLogs(t)
	pl := NewPool(testParams(t))
	defer pl.Close()
	e := pl.newEpisode(episode.Task{"id": "t1", "question": "2+2", "seed": 7})
	defer e.Close()
	ctx := context.Background()
	obs, info, err := e.Reset(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o := obs.(map[string]any)
	task := o["task"].(map[string]any)
	// The row alone travels: none of the env's own settings.
	if o["text"] != "start 2+2" || o["seed"] != 7.0 || len(task) != 3 || task["id"] != "t1" || info["n"] != 1.0 {
		t.Fatalf("reset: %v %v", obs, info)
	}
	res, err := e.Step(ctx, episode.Action{Content: "hi"})
	if err != nil || res.Observation != "echo hi" || res.Reward != 0.5 || res.Done {
		t.Fatalf("step: %+v %v", res, err)
	}
	res, err = e.Step(ctx, episode.Action{Content: "win"})
	if err != nil || res.Reward != 1 || !res.Done {
		t.Fatalf("win: %+v %v", res, err)
	}
}

func TestFaults(t *testing.T) {
	tests := []struct {
		action  string
		timeout bool
		want    string // in the error
		log     string // in the logs
	}{
		{"crash", false, "exited (exit status 3); its last stderr lines: Traceback: something broke", "Traceback"},
		{"hang", true, "no answer to step of episode", ""},
		{"freeze", true, "no answer to step", ""},
		{"garbage", true, "no answer to step", "not a protocol frame"},
		{"stranger", true, "no answer to step", `id=someone-else`},
		{"fail", false, "reported an error for step of episode t~", ""},
		{"badreward", false, `observation reward "lots" is not a number`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			logs := quietLogs(t)
			// Processes start with a generous timeout (a loaded machine
			// starts them slowly); the faulty step gets a short one.
			p := testParams(t)
			p.StepTimeoutS = 20
			pl := NewPool(p)
			defer pl.Close()
			ctx := context.Background()
			// Another episode on the same process, before and after.
			other := pl.newEpisode(episode.Task{"id": "o"})
			defer other.Close()
			if _, _, err := other.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			e := pl.newEpisode(episode.Task{"id": "t"})
			if _, _, err := e.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			pl.p.StepTimeoutS = 0.3
			_, err := e.Step(ctx, episode.Action{Content: tt.action})
			e.Close()
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "exec env [") {
				t.Fatalf("err %v, want %q naming the env", err, tt.want)
			}
			if errors.Is(err, env.ErrTimeout) != tt.timeout {
				t.Fatalf("timeout %v for %v", !tt.timeout, err)
			}
			if tt.log != "" && !strings.Contains(logs.String(), tt.log) {
				t.Fatalf("logs %q lack %q", logs.String(), tt.log)
			}
			if pl.Errors.Load() != 1 {
				t.Errorf("errors counted %d, want 1", pl.Errors.Load())
			}
			// The other episode goes on unless the process died; a new
			// episode always works (on a restarted process if needed).
			res, err := other.Step(ctx, episode.Action{Content: "x"})
			died := tt.action == "crash" || tt.action == "freeze"
			if died != (err != nil) {
				t.Fatalf("other episode: %+v %v", res, err)
			}
			if tt.action == "freeze" && (!errors.Is(err, env.ErrTimeout) || !strings.Contains(logs.String(), "killed after two step timeouts")) {
				t.Fatalf("a frozen process is killed at its second silent timeout: %v; logs %s", err, logs.String())
			}
			pl.p.StepTimeoutS = 20
			fresh := pl.newEpisode(episode.Task{"id": "f"})
			defer fresh.Close()
			if _, _, err := fresh.Reset(ctx); err != nil {
				t.Fatalf("fresh episode after %s: %v", tt.action, err)
			}
			if res, err := fresh.Step(ctx, episode.Action{Content: "win"}); err != nil || !res.Done {
				t.Fatalf("fresh step: %v", err)
			}
			if died && pl.Restarts.Load() != 1 {
				t.Errorf("restarts %d", pl.Restarts.Load())
			}
		})
	}
}

func TestStderrIsLoggedNotFatal(t *testing.T) {
	logs := quietLogs(t)
	pl := NewPool(testParams(t))
	defer pl.Close()
	e := pl.newEpisode(episode.Task{})
	defer e.Close()
	if _, _, err := e.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := e.Step(context.Background(), episode.Action{Content: "noisy"})
	if err != nil || res.Observation != "noted" {
		t.Fatal(res, err)
	}
	time.Sleep(50 * time.Millisecond) // stderr is read concurrently
	if !strings.Contains(logs.String(), "stderr: a warning on stderr") {
		t.Fatalf("logs: %s", logs.String())
	}
}

func TestChildEnvironment(t *testing.T) {
	quietLogs(t)
	t.Setenv("OPENAI_API_KEY", "sk-do-not-leak")
	t.Setenv("TINKER_API_KEY", "tk-do-not-leak")
	t.Setenv("PASSED_ON", "yes")
	t.Setenv("HOME", "/home/someone")
	p := testParams(t)
	p.PassEnv = []string{"PASSED_ON"}
	p.EnvVars["LEVEL"] = "hard"
	pl := NewPool(p)
	defer pl.Close()
	e := pl.newEpisode(episode.Task{})
	defer e.Close()
	if _, _, err := e.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := e.Step(context.Background(), episode.Action{Content: "environ"})
	if err != nil {
		t.Fatal(err)
	}
	all := fmt.Sprint(res.Observation)
	for _, want := range []string{"PASSED_ON=yes", "LEVEL=hard", "HOME=/home/someone"} {
		if !strings.Contains(all, want) {
			t.Errorf("child environment lacks %s: %s", want, all)
		}
	}
	if strings.Contains(all, "leak") || strings.Contains(all, "API_KEY") {
		t.Errorf("a secret reached the child: %s", all)
	}
}

func TestManyEpisodesOneProcess(t *testing.T) {
	quietLogs(t)
	p := testParams(t)
	p.Processes = 2
	pl := NewPool(p)
	defer pl.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			e := pl.newEpisode(episode.Task{"question": i})
			defer e.Close()
			obs, _, err := e.Reset(context.Background())
			if err != nil {
				errs <- err
				return
			}
			if got := obs.(map[string]any)["text"]; got != fmt.Sprintf("start %d", i) {
				errs <- fmt.Errorf("episode %d got %v", i, got)
			}
			for j := 0; j < 5; j++ {
				a := fmt.Sprintf("%d-%d", i, j)
				res, err := e.Step(context.Background(), episode.Action{Content: a})
				if err != nil || res.Observation != "echo "+a {
					errs <- fmt.Errorf("%s: %v %v", a, res.Observation, err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		args map[string]any
		want string
	}{
		{map[string]any{}, "env.args.command is empty"},
		{map[string]any{"command": []any{"x"}, "processes": 0}, "env.args.processes: must be in [1,1024], got 0"},
		{map[string]any{"command": []any{"x"}, "step_timeout_s": "soon"}, `env.args.step_timeout_s: must be a float, got "soon"`},
		{map[string]any{"command": []any{"x"}, "pass_env": []any{"A=B"}}, `env.args.pass_env: "A=B" is not an environment variable name`},
		{map[string]any{"command": "python3"}, ""},
	}
	for _, tt := range tests {
		_, _, err := env.Resolve("exec", tt.args)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%v: %v", tt.args, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || !usererr.Is(err) {
			t.Errorf("%v: err %v, want %q", tt.args, err, tt.want)
		}
	}
	// A program that does not exist is named when the first episode starts.
	e, err := env.New("exec", episode.Task{}, map[string]any{"command": []any{"/nonexistent/rllm-env"}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = e.Reset(context.Background())
	e.Close()
	if err == nil || !strings.Contains(err.Error(), `cannot start "/nonexistent/rllm-env"`) {
		t.Fatalf("err %v", err)
	}
}

func FuzzDecodeObservation(f *testing.F) {
	f.Add([]byte(`{"observation": "x", "reward": 1, "done": true, "info": {}}`))
	f.Add([]byte(`{"observation": null, "reward": null, "done": false}`))
	f.Add([]byte(`{"reward": true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = DecodeObservation(b)
		_ = ErrorMessage(b)
	})
}

func FuzzDispatch(f *testing.F) {
	f.Add([]byte(`{"id": "a", "type": "observation", "data": {}}`))
	f.Add([]byte("not json"))
	f.Fuzz(func(t *testing.T, line []byte) {
		old := Logger
		Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		defer func() { Logger = old }()
		pr := &process{name: "fuzz", waiters: map[string]chan frame{"a": make(chan frame, 1)}}
		pr.dispatch(line)
	})
}

// BenchmarkRoundTrip is one step (request and answer) through a trivial
// child process.
func BenchmarkRoundTrip(b *testing.B) {
	exe, _ := os.Executable()
	old := Logger
	Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	defer func() { Logger = old }()
	pl := NewPool(Params{Command: []string{exe, "-test.run=^$"}, EnvVars: map[string]string{"EXEC_TEST_CHILD": "1"}, Processes: 1, StepTimeoutS: 10})
	defer pl.Close()
	b.RunParallel(func(pb *testing.PB) {
		e := pl.newEpisode(episode.Task{"question": "q"})
		defer e.Close()
		if _, _, err := e.Reset(context.Background()); err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if _, err := e.Step(context.Background(), episode.Action{Content: "go"}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// A stderr line longer than any line buffer (a tqdm bar redrawn with \r)
// must not stop the drain: the child would block on its next write.
func TestHugeStderrLineIsDrained(t *testing.T) {
	logs := quietLogs(t)
	pl := NewPool(testParams(t))
	defer pl.Close()
	e := pl.newEpisode(episode.Task{})
	defer e.Close()
	ctx := context.Background()
	if _, _, err := e.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := e.Step(ctx, episode.Action{Content: "hugestderr"})
	if err != nil || res.Observation != "drawn" {
		t.Fatalf("step after 3 MiB of stderr: %+v %v", res, err)
	}
	res, err = e.Step(ctx, episode.Action{Content: "noisy"})
	if err != nil || res.Observation != "noted" {
		t.Fatalf("next step: %+v %v", res, err)
	}
	if n := len(logs.String()); n > 1<<20 {
		t.Fatalf("the log holds %d bytes of one child's stderr", n)
	}
}

// A grandchild that holds the child's stdout and stderr open (the real
// env behind `sh run.sh` or `uv run`) must neither block Close nor
// outlive it.
func TestCloseKillsTheProcessGroup(t *testing.T) {
	quietLogs(t)
	pl := NewPool(testParams(t))
	e := pl.newEpisode(episode.Task{})
	ctx := context.Background()
	if _, _, err := e.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := e.Step(ctx, episode.Action{Content: "grandchild"})
	if err != nil {
		t.Fatal(err)
	}
	pid := int(res.Observation.(float64))
	e.Close()
	closed := make(chan struct{})
	go func() { pl.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Pool.Close is still waiting for the grandchild")
	}
	repotest.WaitGone(t, pid)
}
