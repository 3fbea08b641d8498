package program_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway/gatewaytest"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/workflow"
	"github.com/rllm-org/rllm-go/pkg/workflow/program"
)

// servingProgram is the test binary as a serving program (mode=serve):
// it reads episodes as JSON lines and acts as mode says. args[0], when
// given, is a file it appends what it saw to ("got ID", "cancel ID").
func servingProgram(mode string, args []string) int {
	var (
		outMu sync.Mutex
		logMu sync.Mutex
		log   *os.File
	)
	if len(args) > 0 {
		log, _ = os.OpenFile(args[0], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	}
	note := func(s string) {
		if log != nil {
			logMu.Lock()
			fmt.Fprintln(log, s)
			logMu.Unlock()
		}
	}
	say := func(v any) {
		b, _ := json.Marshal(v)
		outMu.Lock()
		os.Stdout.Write(append(b, '\n'))
		outMu.Unlock()
	}
	raw := func(s string) {
		outMu.Lock()
		fmt.Println(s)
		outMu.Unlock()
	}
	switch mode {
	case "exit":
		fmt.Fprintln(os.Stderr, "boom at start")
		return 3
	case "fork":
		c := exec.Command("sleep", "1000")
		if c.Start() == nil {
			note("child " + strconv.Itoa(c.Process.Pid))
		}
	}
	served := 0
	limit := 0
	if mode == "exitafter" && len(args) > 1 {
		limit, _ = strconv.Atoi(args[1])
	}
	var wg sync.WaitGroup
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var msg struct {
			EpisodeID string            `json:"episode_id"`
			Task      map[string]any    `json:"task"`
			Env       map[string]string `json:"env"`
			Cancel    bool              `json:"cancel"`
		}
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			fmt.Fprintln(os.Stderr, "bad line:", err)
			return 5
		}
		if msg.Cancel {
			note("cancel " + msg.EpisodeID)
			continue
		}
		note("got " + msg.EpisodeID)
		q, _ := msg.Task["question"].(string)
		ask := func() (string, error) {
			r, _, err := chatAt(msg.Env["OPENAI_BASE_URL"], msg.Env["OPENAI_API_KEY"], []map[string]any{{"role": "user", "content": q}})
			return r, err
		}
		id := msg.EpisodeID
		served++
		switch mode {
		case "answer":
			wg.Add(1)
			go func() {
				defer wg.Done()
				reply, err := ask()
				if err != nil {
					fmt.Fprintln(os.Stderr, "model call failed:", err)
					return
				}
				// Every variable a per-episode program gets, and the mode.
				for _, k := range []string{"OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "RLLM_SESSION_ID"} {
					if msg.Env[k] == "" {
						reply = "missing " + k
					}
				}
				if ep, _, _ := strings.Cut(id, "#"); msg.Env["RLLM_EPISODE_ID"] != ep || os.Getenv("RLLM_PROGRAM_MODE") != "serve" {
					reply = "wrong episode id or mode"
				}
				raw("a log line on stdout")
				raw(`{"not": "an answer"}`)
				say(map[string]any{"episode_id": "nobody#0", "answer": "7"})
				say(map[string]any{"episode_id": id, "answer": reply})
				say(map[string]any{"episode_id": id, "answer": "twice"}) // answered twice: ignored
			}()
		case "reward":
			if _, err := ask(); err == nil {
				say(map[string]any{"episode_id": id, "reward": 0.25, "is_correct": false})
			}
		case "badreward":
			ask()
			say(map[string]any{"episode_id": id, "reward": "lots"})
		case "error":
			say(map[string]any{"episode_id": id, "error": "ZeroDivisionError: division by zero"})
		case "nocall":
			say(map[string]any{"episode_id": id, "answer": "7"})
		case "otherid":
			ask()
			say(map[string]any{"episode_id": id + "x", "answer": "7"})
		case "never", "fork":
			go ask()
		case "flood":
			go func() {
				for i := 0; i < 1000; i++ {
					if _, err := ask(); err != nil {
						return
					}
				}
			}()
		case "long":
			reply, _ := ask()
			if q == "long" {
				raw(`{"episode_id": "` + id + `", "answer": "` + strings.Repeat("7", 2<<20) + `"}`)
			} else {
				say(map[string]any{"episode_id": id, "answer": reply})
			}
		case "exitafter":
			reply, _ := ask()
			say(map[string]any{"episode_id": id, "answer": reply})
			if served >= limit {
				fmt.Fprintf(os.Stderr, "served %d episodes, bye\n", served)
				return 4
			}
		}
	}
	wg.Wait()
	return 0
}

var testParams = sampler.Params{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 16}

func serving(mode string, more ...string) []any {
	out := []any{os.Args[0], "-test.run=^$", "serving-program", mode}
	for _, m := range more {
		out = append(out, m)
	}
	return out
}

func serveArgs(command []any, kv ...any) map[string]any {
	args := map[string]any{"command": command, "mode": "serve"}
	for i := 0; i+1 < len(kv); i += 2 {
		args[kv[i].(string)] = kv[i+1]
	}
	return args
}

func TestServeEpisodes(t *testing.T) {
	defer program.CloseServers()
	w := newWorkflow(t, answering("7"), serveArgs(serving("answer"), "processes", 2, "concurrency", 4))
	const n = 24
	eps := make([]*episode.Episode, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { eps[i], errs[i] = w.Run(context.Background(), task, fmt.Sprintf("t%d:0", i)) })
	}
	wg.Wait()
	for i, ep := range eps {
		if errs[i] != nil || !ep.IsCorrect || ep.TerminationReason != episode.TerminationEnvDone || len(ep.Trajectories) != 1 {
			t.Fatalf("episode %d: %v %+v", i, errs[i], ep)
		}
		tr := ep.Trajectories[0]
		if tr.Reward != 1 || len(tr.Steps) != 1 || len(tr.Steps[0].ResponseIDs) == 0 {
			t.Fatalf("episode %d trajectory %+v", i, tr)
		}
	}
	st := program.ServersStats()
	if st.Started != 2 {
		t.Errorf("%d processes started for 24 episodes, want 2", st.Started)
	}
	// The second answer of every episode and the answers for "nobody".
	if st.Ignored < n || st.Other < 2*n {
		t.Errorf("stats %+v: the lines for unknown or finished episodes and the log lines were not all counted", st)
	}
	// The same again: the processes stay.
	if ep, err := w.Run(context.Background(), task, "again:0"); err != nil || !ep.IsCorrect {
		t.Fatal(err, ep)
	}
	if st := program.ServersStats(); st.Started != 2 {
		t.Errorf("%d processes started, want the same 2", st.Started)
	}
}

func TestServeReward(t *testing.T) {
	defer program.CloseServers()
	w := newWorkflow(t, answering("7"), serveArgs(serving("reward")))
	ep, err := w.Run(context.Background(), task, "t:0")
	if err != nil || ep.Trajectories[0].Reward != 0.25 || ep.IsCorrect {
		t.Fatal(err, ep)
	}
}

// cancelled reads the program's notes until it saw a cancel for an
// episode of prefix (bounded: the program gets the line at once, the
// wait is only for a busy machine).
func noted(t *testing.T, file, prefix string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(file)
		if strings.Contains(string(b), prefix) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, _ := os.ReadFile(file)
	t.Fatalf("the program never noted %q; it noted:\n%s", prefix, b)
}

func TestServeFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   string
		args   []any
		reason episode.TerminationReason
		want   []string
		cancel bool // the program is told to cancel the episode
	}{
		{"never answers", "never", []any{"timeout_s", 0.3}, episode.TerminationTimeout, []string{"timeout_s=0.3", "told to cancel"}, true},
		{"answers for another episode", "otherid", []any{"timeout_s", 0.3}, episode.TerminationTimeout, []string{"timeout_s=0.3"}, true},
		{"exits at once", "exit", nil, episode.TerminationError, []string{"exited with status 3", "boom at start", "started again"}, false},
		{"reports an error", "error", nil, episode.TerminationError, []string{"failed this episode: ZeroDivisionError: division by zero"}, false},
		{"never calls the model", "nocall", nil, episode.TerminationError, []string{"without a model call"}, false},
		{"a reward that is not a number", "badreward", nil, episode.TerminationError, []string{`"reward" must be a finite number`}, false},
		{"calls the model 1000 times", "flood", []any{"max_calls", 3}, episode.TerminationError, []string{"max_calls=3", "told to cancel"}, true},
		{"an answer over the line limit", "long", nil, episode.TerminationError, []string{"longer than the limit of 1 MiB"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer program.CloseServers()
			notes := filepath.Join(t.TempDir(), "notes")
			w := newWorkflow(t, answering("7"), serveArgs(serving(tc.mode, notes), tc.args...))
			bad := task
			if tc.mode == "long" {
				bad = episode.Task{"question": "long", "ground_truth": "7", "data_source": "arith"}
			}
			ep, err := w.Run(context.Background(), bad, "t:0")
			if err == nil {
				t.Fatalf("no error: %+v", ep)
			}
			if ep.TerminationReason != tc.reason || ep.IsCorrect {
				t.Errorf("termination %s, correct %v", ep.TerminationReason, ep.IsCorrect)
			}
			for _, s := range append(tc.want, "program `") {
				if !strings.Contains(ep.Error, s) {
					t.Errorf("error %q lacks %q", ep.Error, s)
				}
			}
			if tc.cancel {
				noted(t, notes, "cancel t:0#")
				// Told, not killed: the same process serves on.
				if st := program.ServersStats(); st.Started != 1 {
					t.Errorf("%d processes started, want 1", st.Started)
				}
			}
			if tc.mode == "long" {
				// The line was dropped whole; the next answer is read.
				if ep, err := w.Run(context.Background(), task, "t:1"); err != nil || !ep.IsCorrect {
					t.Fatalf("after a long line: %v %+v", err, ep)
				}
				if st := program.ServersStats(); st.TooLong != 1 || st.Started != 1 {
					t.Errorf("stats %+v", st)
				}
			}
		})
	}
}

// A program that exits after every 3 episodes is started again, and the
// episodes it held are retried as any failed episode.
func TestServeRestarts(t *testing.T) {
	defer program.CloseServers()
	spec := workflow.Spec{Name: "program", Args: serveArgs(serving("exitafter", os.DevNull, "3")), Deps: workflow.Deps{Env: workflow.Component{Name: "arith"}}}
	eng, err := rollout.NewRunner(spec, answering("7"), testParams, 1, rollout.RunnerOptions{NParallel: 2, RetryLimit: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tasks := make([]episode.Task, 12)
	for i := range tasks {
		tasks[i] = episode.Task{"question": "3+4=", "ground_truth": "7", "data_source": "arith", "id": strconv.Itoa(i)}
	}
	eps, err := eng.Run(context.Background(), tasks)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		if !ep.IsCorrect {
			t.Fatalf("episode %s: %s %s", ep.ID, ep.TerminationReason, ep.Error)
		}
	}
	if st := program.ServersStats(); st.Started < 4 {
		t.Errorf("%d processes started for 12 episodes of a program that serves 3", st.Started)
	}
}

func TestServeThousandInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 episodes; skipped with -short")
	}
	defer program.CloseServers()
	w := newWorkflow(t, answering("7"), serveArgs(serving("answer"), "processes", 2, "concurrency", 500, "timeout_s", 600))
	const n = 1000
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := 0
	for i := range n {
		wg.Go(func() {
			ep, err := w.Run(context.Background(), task, fmt.Sprintf("t%d:0", i))
			if err != nil || !ep.IsCorrect {
				mu.Lock()
				if bad++; bad == 1 {
					t.Errorf("episode %d: %v %+v", i, err, ep)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if bad > 0 {
		t.Fatalf("%d of %d episodes failed", bad, n)
	}
}

// Ctrl-C with episodes in flight: each ends, and once the servers close
// nothing of the program's process group is left.
func TestServeInterrupt(t *testing.T) {
	notes := filepath.Join(t.TempDir(), "notes")
	w := newWorkflow(t, answering("7"), serveArgs(serving("fork", notes)))
	ctx, cancel := context.WithCancel(context.Background())
	const n = 20
	errs := make(chan error, n)
	for i := range n {
		go func() {
			ep, err := w.Run(ctx, task, fmt.Sprintf("t%d:0", i))
			if err == nil || ep.TerminationReason != episode.TerminationError {
				err = fmt.Errorf("episode %d ended %s with %v", i, ep.TerminationReason, err)
			} else if errors.Is(err, context.Canceled) {
				err = nil
			}
			errs <- err
		}()
	}
	for i := range n {
		noted(t, notes, fmt.Sprintf("got t%d:0#", i))
	}
	cancel()
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	b, _ := os.ReadFile(notes)
	var child int
	for _, l := range strings.Split(string(b), "\n") {
		if s, ok := strings.CutPrefix(l, "child "); ok {
			child, _ = strconv.Atoi(s)
		}
	}
	if child == 0 {
		t.Fatalf("the program noted no child:\n%s", b)
	}
	program.CloseServers()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(child, 0) == nil && !zombie(child) {
		if time.Now().After(deadline) {
			t.Fatalf("the serving program's child %d outlived the run", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var taskOf = regexp.MustCompile(`\d\+1=`)

// A program's episodes draw the seeds the built-in agent's episodes draw
// (the gateway session carries the episode's sampling stream), per
// episode and served, whatever order the calls arrive in.
func TestProgramSeedsMatchTheBuiltinAgent(t *testing.T) {
	defer program.CloseServers()
	seed := int64(7)
	params := testParams
	params.Seed = &seed
	tasks := make([]episode.Task, 6)
	for i := range tasks {
		tasks[i] = episode.Task{"question": fmt.Sprintf("%d+1=", i), "ground_truth": strconv.Itoa(i + 1), "data_source": "arith", "id": fmt.Sprint(i)}
	}
	seeds := func(spec workflow.Spec) map[string]int64 {
		var mu sync.Mutex
		got := map[string]int64{}
		smp := &gatewaytest.Sampler{Reply: func(req sampler.Request) gatewaytest.Reply {
			last := req.Messages[len(req.Messages)-1].Content
			if req.Params.Seed != nil {
				mu.Lock()
				got[taskOf.FindString(last)] = *req.Params.Seed
				mu.Unlock()
			}
			return gatewaytest.Reply{Text: "7"}
		}}
		eng, err := rollout.NewRunner(spec, smp, params, 1, rollout.RunnerOptions{NParallel: 12, RetryLimit: 1, SeedSalt: 3}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Run(context.Background(), tasks); err != nil {
			t.Fatal(err)
		}
		return got
	}
	deps := workflow.Deps{Agent: workflow.Component{Name: "arith"}, Env: workflow.Component{Name: "arith"}}
	builtin := seeds(workflow.Spec{Name: "single_turn", Deps: deps})
	if len(builtin) != 6 {
		t.Fatalf("built-in seeds %v", builtin)
	}
	for _, mode := range []string{"per_episode", "serve"} {
		command := self("answer")
		if mode == "serve" {
			command = serving("answer")
		}
		got := seeds(workflow.Spec{Name: "program", Args: map[string]any{"command": command, "mode": mode}, Deps: deps})
		for q, s := range builtin {
			if got[q] != s {
				t.Errorf("%s: %q drew seed %d, the built-in agent %d", mode, q, got[q], s)
			}
		}
	}
}
