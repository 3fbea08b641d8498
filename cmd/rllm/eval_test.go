package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/evaluate"
)

// evalTasks are four arith tasks in two data sources; the fake's scripted
// replies decide which are solved.
var evalTasks = []struct{ question, truth, source string }{
	{"1+1=", "2", "easy"},
	{"2+2=", "4", "easy"},
	{"3+3=", "6", "hard"},
	{"4+4=", "8", "hard"},
}

// formatScore is the arith reward's default format_score: what a wrong
// bare integer earns (pkg/reward's arith, "1 for the exact integer,
// format_score for a wrong bare integer").
const formatScore = 0.1

func writeEvalTasks(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	var b strings.Builder
	for _, task := range evalTasks {
		line, _ := json.Marshal(map[string]string{"question": task.question, "ground_truth": task.truth, "data_source": task.source})
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// userQuestion is the content of the last user message the fake saw.
func userQuestion(in fakevllm.ReplyInput) string {
	for i := len(in.Messages) - 1; i >= 0; i-- {
		if m := in.Messages[i]; m.Role == "user" && m.Content != nil {
			return *m.Content
		}
	}
	return ""
}

func serverArgs(url string) []string {
	return []string{"rollout.engine=openai", "rollout.endpoints=[" + url + "]", "rollout.model=fake-model",
		"rollout.retry.backoff_base_s=0.001", "rollout.retry.backoff_max_s=0.01"}
}

func TestEvalAgainstFakeServer(t *testing.T) {
	// solvedCalls says, per question, which calls (1-based, counted per
	// question) get the right answer; every other call gets "9", a wrong
	// bare integer.
	cases := []struct {
		name        string
		k           int
		solvedCalls map[string][]int
		// expected figures, derived in the comments from the script
		pass1, passK, reward float64
		easy1, easyK         float64
		hard1, hardK         float64
	}{
		{
			// Exactly half the tasks are solved, one per source: pass@1 =
			// pass@k = 2/4; reward = (1 + formatScore) / 2 per source.
			name: "half solved, k=1", k: 1,
			solvedCalls: map[string][]int{"1+1=": {1}, "3+3=": {1}},
			pass1:       0.5, passK: 0.5, reward: (1 + formatScore) / 2,
			easy1: 0.5, easyK: 0.5, hard1: 0.5, hardK: 0.5,
		},
		{
			// k=2: "1+1=" always right (c=2), "3+3=" right on one of its
			// two attempts (c=1), the others never. pass@1 per task is
			// c/n: 1, 0, 0.5, 0 → 0.375. Unbiased pass@2 with n=2 is 1
			// when c ≥ 1: 1, 0, 1, 0 → 0.5. Rewards: 8 episodes, 3 right
			// and 5 wrong integers → (3 + 5·formatScore) / 8.
			name: "partial, k=2", k: 2,
			solvedCalls: map[string][]int{"1+1=": {1, 2}, "3+3=": {1}},
			pass1:       0.375, passK: 0.5, reward: (3 + 5*formatScore) / 8,
			easy1: 0.5, easyK: 0.5, hard1: 0.25, hardK: 0.5,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			calls := map[string]int{}
			answer := map[string]string{}
			for _, task := range evalTasks {
				answer[task.question] = task.truth
			}
			srv := fakevllm.New(fakevllm.Config{Reply: func(in fakevllm.ReplyInput) *fakevllm.Reply {
				q := userQuestion(in)
				mu.Lock()
				calls[q]++
				n := calls[q]
				mu.Unlock()
				for _, c := range tc.solvedCalls[q] {
					if c == n {
						return &fakevllm.Reply{Content: answer[q]}
					}
				}
				return &fakevllm.Reply{Content: "9"}
			}})
			defer srv.Close()

			data := writeEvalTasks(t)
			epsPath := filepath.Join(t.TempDir(), "eps.jsonl")
			var stdout, stderr bytes.Buffer
			// Without arith's distance credit a wrong "9" scores exactly formatScore.
			args := append(serverArgs(srv.URL), "env.args.reward_args.close_score=0", "rollout.val_kwargs.temperature=0")
			opts := &evalOptions{data: []string{data}, n: tc.k, output: "json", episodes: epsPath, args: args}
			if err := runEval(context.Background(), testApp(&stdout, &stderr), opts); err != nil {
				t.Fatalf("runEval: %v\nstderr: %s", err, stderr.String())
			}
			var rep evaluate.Report
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
			}
			episodes := len(evalTasks) * tc.k
			near := func(what string, got, want float64) {
				t.Helper()
				if math.Abs(got-want) > 1e-12 {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			if rep.Tasks != len(evalTasks) || rep.Episodes != episodes || rep.K != tc.k {
				t.Errorf("tasks %d episodes %d k %d, want %d %d %d", rep.Tasks, rep.Episodes, rep.K, len(evalTasks), episodes, tc.k)
			}
			near("pass@1", rep.PassAt1, tc.pass1)
			near("pass@k", rep.PassAtK, tc.passK)
			near("mean_reward", rep.MeanReward, tc.reward)
			for _, src := range []struct {
				name     string
				p1, pk   float64
				episodes int
			}{{"easy", tc.easy1, tc.easyK, 2 * tc.k}, {"hard", tc.hard1, tc.hardK, 2 * tc.k}} {
				s := rep.BySource[src.name]
				if s == nil {
					t.Fatalf("no summary for data source %s: %+v", src.name, rep.BySource)
				}
				near(src.name+" pass@1", s.PassAt1, src.p1)
				near(src.name+" pass@k", s.PassAtK, src.pk)
				if s.Tasks != 2 || s.Episodes != src.episodes {
					t.Errorf("%s: %d tasks %d episodes, want 2 and %d", src.name, s.Tasks, s.Episodes, src.episodes)
				}
			}
			if rep.Terminations[episode.TerminationEnvDone] != episodes {
				t.Errorf("terminations %v, want %d env_done", rep.Terminations, episodes)
			}
			// Tokens: each episode is one turn; its prompt is the fake's
			// chat template of the bare question, its response the
			// one-character answer plus <|im_end|>.
			wantPrompt := 0
			for _, task := range evalTasks {
				q := task.question
				wantPrompt += tc.k * len(srv.Vocab().Encode(fakevllm.RenderChat([]fakevllm.Message{{Role: "user", Content: &q}}, true)))
			}
			if rep.PromptTokens != wantPrompt || rep.ResponseTokens != 2*episodes {
				t.Errorf("tokens %d prompt %d response, want %d and %d", rep.PromptTokens, rep.ResponseTokens, wantPrompt, 2*episodes)
			}
			if rep.Client == nil || rep.Client.Requests != int64(episodes) || rep.Client.Retries != 0 {
				t.Errorf("client stats %+v, want %d requests and no retries", rep.Client, episodes)
			}
			if rep.Model != "fake-model" || rep.Sampler != "openai" || rep.Temperature != 0 {
				t.Errorf("model %q sampler %q temperature %v", rep.Model, rep.Sampler, rep.Temperature)
			}

			// Every episode is in the file once, in task order.
			f, err := os.Open(epsPath)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 1<<20)
			var ids []string
			correct := 0
			for sc.Scan() {
				var ep episode.Episode
				if err := json.Unmarshal(sc.Bytes(), &ep); err != nil {
					t.Fatalf("episode line: %v", err)
				}
				ids = append(ids, ep.ID)
				if ep.IsCorrect {
					correct++
				}
			}
			// Episodes are written as they finish: every id once, in any order.
			sort.Strings(ids)
			if len(ids) != episodes || ids[0] != "0:0" || ids[len(ids)-1] != episode.EpisodeID("3", tc.k-1) || len(slices.Compact(ids)) != episodes {
				t.Errorf("episode ids %v", ids)
			}
			if want := int(math.Round(tc.pass1 * float64(episodes))); correct != want {
				t.Errorf("%d correct episodes in the file, want %d", correct, want)
			}
			if !strings.Contains(stderr.String(), `"event":"done"`) {
				t.Errorf("no done event on stderr: %s", stderr.String())
			}
		})
	}
}

func TestEvalTextTable(t *testing.T) {
	srv := fakevllm.New(fakevllm.Config{Reply: func(in fakevllm.ReplyInput) *fakevllm.Reply {
		return &fakevllm.Reply{Content: "2"} // right for 1+1= only
	}})
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	opts := &evalOptions{data: []string{writeEvalTasks(t)}, n: 1, output: "text", args: serverArgs(srv.URL)}
	if err := runEval(context.Background(), testApp(&stdout, &stderr), opts); err != nil {
		t.Fatalf("runEval: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	// easy: one of two tasks right → 0.5; hard: none; all: 1 of 4.
	for _, want := range []string{"data_source", "pass@1", "easy", "0.5000", "hard", "all", "0.2500", "env_done", "fake-model (openai)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr.String(), "rllm: eval: 4/4 episodes done") {
		t.Errorf("stderr lacks the final progress line:\n%s", stderr.String())
	}
}

func TestEvalServerProblems(t *testing.T) {
	down := httptest.NewServer(nil)
	downURL := down.URL
	down.Close()
	other := fakevllm.New(fakevllm.Config{Model: "other-model"})
	defer other.Close()
	cases := []struct {
		name, url, want string
		code            int
	}{
		{"down", downURL, downURL + " is down", exitFailure},
		{"wrong model", other.URL, `serves "other-model", not "fake-model"`, exitFailure},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			epsPath := filepath.Join(t.TempDir(), "eps.jsonl")
			opts := &evalOptions{data: []string{writeEvalTasks(t)}, output: "text", episodes: epsPath, args: serverArgs(tc.url)}
			err := runEval(context.Background(), testApp(&bytes.Buffer{}, &stderr), opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if code := exitCode(context.Background(), err); code != tc.code {
				t.Errorf("exit code %d, want %d", code, tc.code)
			}
			if entries, _ := os.ReadDir(filepath.Dir(epsPath)); len(entries) != 0 {
				t.Errorf("a failed eval left files behind: %v", entries)
			}
		})
	}
}

func TestEvalEveryEpisodeFails(t *testing.T) {
	// The server is up but refuses every generation: a 401 is never
	// retried, so each episode ends in error and the run fails (exit 1)
	// after printing what it has.
	srv := fakevllm.New(fakevllm.Config{FaultFor: func(string, int64) fakevllm.Fault { return fakevllm.FaultUnauthorized }})
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	opts := &evalOptions{data: []string{writeEvalTasks(t)}, output: "json", args: append(serverArgs(srv.URL), "workflow.retry_limit=1")}
	err := runEval(context.Background(), testApp(&stdout, &stderr), opts)
	if err == nil || !strings.Contains(err.Error(), "every episode failed") || !strings.Contains(err.Error(), "401") {
		t.Fatalf("error %v, want every episode failed with the 401", err)
	}
	var rep evaluate.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || rep.Failed != len(evalTasks) || rep.Terminations[episode.TerminationError] != len(evalTasks) {
		t.Errorf("report %+v (%v)", rep, err)
	}
}

func TestEvalInterrupted(t *testing.T) {
	// One episode at a time; the third request cancels the run, so the
	// first two episodes finish and the rest never start.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	n := 0
	srv := fakevllm.New(fakevllm.Config{Reply: func(fakevllm.ReplyInput) *fakevllm.Reply {
		mu.Lock()
		n++
		if n == 3 {
			cancel()
		}
		mu.Unlock()
		return &fakevllm.Reply{Content: "2"}
	}})
	defer srv.Close()
	epsPath := filepath.Join(t.TempDir(), "eps.jsonl")
	var stderr, stdout bytes.Buffer
	opts := &evalOptions{data: []string{writeEvalTasks(t)}, n: 1, output: "text", episodes: epsPath,
		args: append(serverArgs(srv.URL), "workflow.n_parallel_tasks=1")}
	err := runEval(ctx, testApp(&stdout, &stderr), opts)
	// The report of what finished is still printed, marked partial.
	if !strings.Contains(stdout.String(), "partial   interrupted: the figures below cover the 2 episodes that finished") {
		t.Errorf("no partial report:\n%s", stdout.String())
	}
	if !errors.Is(err, context.Canceled) || exitCode(ctx, err) != exitInterrupted {
		t.Fatalf("error %v (exit %d), want an interruption with exit 130", err, exitCode(ctx, err))
	}
	data, rerr := os.ReadFile(epsPath)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if lines := strings.Count(string(data), "\n"); lines != 2 {
		t.Errorf("%d episodes written after the interruption, want the 2 finished ones", lines)
	}
	if !strings.Contains(err.Error(), "interrupted after 2 of 4 episodes") {
		t.Errorf("error %q does not count the finished episodes", err)
	}
}

func TestEvalAPIKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	os.WriteFile(keyFile, []byte("  sk-file-secret\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	env := map[string]string{"MY_KEY": "sk-env-secret"}
	cases := []struct {
		name, envName, file string
		want, wantErr       string
	}{
		{"none", "", "", "", ""},
		{"env", "MY_KEY", "", "sk-env-secret", ""},
		{"env unset", "NO_SUCH_KEY", "", "", "rollout.api_key_env names NO_SUCH_KEY, but that variable is empty or unset"},
		{"file trimmed", "", keyFile, "sk-file-secret", ""},
		{"file empty", "", empty, "", "is empty"},
		{"file missing", "", filepath.Join(dir, "nope"), "", "cannot read rollout.api_key_file"},
	}
	a := testApp(&bytes.Buffer{}, &bytes.Buffer{})
	a.Getenv = func(k string) string { return env[k] }
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, err := readAPIKey(a, tc.envName, tc.file)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || exitCode(context.Background(), err) != exitUsage {
					t.Fatalf("error %v, want a usage error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || key != tc.want {
				t.Fatalf("key %q err %v, want %q", key, err, tc.want)
			}
		})
	}
}

func TestEvalUsageErrors(t *testing.T) {
	data := writeEvalTasks(t)
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte("{\"question\":\"1+1=\"}\nnot json\n"), 0o644)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no data", []string{"eval"}, "needs --data FILE"},
		{"bad n", []string{"eval", "--data", data, "--n", "0"}, "--n must be from 1 to 100000, got 0"},
		{"bad output", []string{"eval", "--data", data, "--output", "yaml"}, `--output "yaml"`},
		{"missing file", []string{"eval", "--data", "nope.jsonl"}, "nope.jsonl"},
		{"bad row", []string{"eval", "--data", bad}, "bad.jsonl:2"},
		{"missing episodes dir", []string{"eval", "--data", data, "--episodes", filepath.Join(t.TempDir(), "no", "eps.jsonl")}, "does not exist"},
		{"unknown env", []string{"eval", "--data", data, "env.name=nosuchenv"}, "nosuchenv"},
		{"text-only locally", []string{"eval", "--data", data, "--text-only"}, "--text-only applies to OpenAI-compatible servers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			a := testApp(&bytes.Buffer{}, &stderr)
			if code := a.Run(context.Background(), tc.args); code != exitUsage {
				t.Errorf("exit code %d, want %d; stderr: %s", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tc.want)
			}
		})
	}
}

// plainOpenAI is an OpenAI-style API: no /health, a bearer key, and chat
// replies without token ids or logprobs. It answers "2" to everything.
func plainOpenAI(t *testing.T, key string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	authorized := func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`))
			return false
		}
		return true
	}
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		if authorized(w, r) {
			w.Write([]byte(`{"object":"list","data":[{"id":"gpt-test","object":"model","owned_by":"someone"}]}`))
		}
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		if authorized(w, r) {
			w.Write([]byte(`{"id":"c1","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"2"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`))
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestEvalTextOnly(t *testing.T) {
	srv := plainOpenAI(t, "sk-test")
	args := []string{"rollout.engine=openai", "rollout.endpoints=[" + srv.URL + "/v1]", "rollout.model=gpt-test",
		"rollout.api_key_env=TEST_KEY", "workflow.retry_limit=1"}
	run := func(textOnly bool, key string) (evaluate.Report, string, error) {
		var stdout, stderr bytes.Buffer
		a := testApp(&stdout, &stderr)
		a.Getenv = func(k string) string {
			if k == "TEST_KEY" {
				return key
			}
			return ""
		}
		opts := &evalOptions{data: []string{writeEvalTasks(t)}, n: 1, output: "json", textOnly: textOnly, args: args}
		err := runEval(context.Background(), a, opts)
		var rep evaluate.Report
		json.Unmarshal(stdout.Bytes(), &rep)
		return rep, stderr.String(), err
	}

	// With --text-only the replies count: "2" answers only 1+1= (easy).
	rep, stderr, err := run(true, "sk-test")
	if err != nil {
		t.Fatalf("text-only eval: %v\n%s", err, stderr)
	}
	if rep.PassAt1 != 0.25 || rep.BySource["easy"].PassAt1 != 0.5 || rep.PromptTokens != 0 {
		t.Errorf("pass@1 %v, easy %+v, prompt tokens %d; want 0.25, 0.5, 0", rep.PassAt1, rep.BySource["easy"], rep.PromptTokens)
	}
	if strings.Contains(stderr, "sk-test") {
		t.Errorf("the API key appears on stderr: %s", stderr)
	}

	// Without it a reply with no token ids is unusable: every episode fails.
	if _, _, err := run(false, "sk-test"); err == nil || !strings.Contains(err.Error(), "every episode failed") {
		t.Errorf("without --text-only: %v, want every episode failed", err)
	}

	// A wrong key stops the start-up check, naming the endpoint.
	_, _, err = run(true, "sk-wrong")
	if err == nil || !strings.Contains(err.Error(), srv.URL+"/v1/models") || strings.Contains(err.Error(), "sk-wrong") {
		t.Errorf("wrong key: %v, want an error naming %s/v1/models without the key", err, srv.URL)
	}
}

// A server whose context is too small for the prompts refuses every
// request: eval says so once at start, counts the refused episodes as
// failed as the server table does, and ends naming the cause and the
// keys that change it.
func TestEvalContextTooSmall(t *testing.T) {
	srv := fakevllm.New(fakevllm.Config{MaxModelLen: 8})
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	opts := &evalOptions{data: []string{writeEvalTasks(t)}, n: 1, output: "json", args: append(serverArgs(srv.URL), "workflow.retry_limit=1")}
	err := runEval(context.Background(), testApp(&stdout, &stderr), opts)
	if err == nil || !strings.Contains(err.Error(), "every episode failed: 4 of 4 episodes ended max_prompt_length_exceeded before their first reply") ||
		!strings.Contains(err.Error(), "maximum context length is 8 tokens") || !strings.Contains(err.Error(), "--max-model-len") {
		t.Fatalf("error %v, want every episode refused, with the server's message and the keys", err)
	}
	if !strings.Contains(stderr.String(), srv.URL+` serves a context of 8 tokens, less than data.max_prompt_length (2048) + data.max_response_length (512)`) {
		t.Errorf("stderr lacks the context line:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), `"failed":4`) {
		t.Errorf("the progress does not count the refused episodes as failed:\n%s", stderr.String())
	}
	var rep evaluate.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || rep.Failed != 4 || rep.Client == nil || rep.Client.Failures != 4 || rep.Client.Refused != 4 {
		t.Errorf("report %+v client %+v (%v): want 4 failed episodes and 4 failed, refused requests", rep, rep.Client, err)
	}
}

// A server failing every request: the server line counts every request
// it saw, and the error says how the two retry layers multiplied.
func TestEvalRetryLayersCounted(t *testing.T) {
	srv := fakevllm.New(fakevllm.Config{FaultFor: func(string, int64) fakevllm.Fault { return fakevllm.FaultServerError }})
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	opts := &evalOptions{data: []string{writeEvalTasks(t)}, n: 1, output: "json", args: append(serverArgs(srv.URL),
		"rollout.retry.max_attempts=2", "workflow.retry_limit=3", "rollout.retry.backoff_base_s=0.001", "rollout.retry.backoff_max_s=0.002")}
	err := runEval(context.Background(), testApp(&stdout, &stderr), opts)
	if err == nil || !strings.Contains(err.Error(), "6 requests to the server in all: the episode was run 3 times, workflow.retry_limit=3") {
		t.Fatalf("error %v, want the requests of both retry layers counted", err)
	}
	var rep evaluate.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || rep.Client == nil || rep.Client.Sent != 24 || rep.Client.Requests != 12 || rep.Client.Failures != 12 {
		t.Errorf("report client %+v (%v): want 24 requests sent for 12 calls, all failed", rep.Client, err)
	}
	if got := srv.Stats().Faults[fakevllm.FaultServerError]; got != 24 {
		t.Errorf("the server answered %d requests with 500, want 24 (4 episodes x 3 runs x 2 attempts)", got)
	}
}
