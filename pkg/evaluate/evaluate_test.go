package evaluate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/episodestore"
	"github.com/rllm-org/rllm-go/pkg/policy"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/sampler/samplertest"
	"github.com/rllm-org/rllm-go/pkg/usererr"

	_ "github.com/rllm-org/rllm-go/pkg/tasks/arith" // registers env.name=arith
)

// loadConfig is the configuration rllm eval would read from these
// key=value arguments.
func loadConfig(t *testing.T, args ...string) *config.Config {
	t.Helper()
	ld, err := config.Load(config.Sources{Args: args})
	if err != nil {
		t.Fatal(err)
	}
	return ld.Config
}

// writeRows writes rows as a JSON lines dataset and returns its path.
func writeRows(t *testing.T, dir, name string, rows ...map[string]any) string {
	t.Helper()
	var b bytes.Buffer
	for _, r := range rows {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// fourTasks are four arith tasks in two data sources.
func fourTasks(t *testing.T, dir string) string {
	return writeRows(t, dir, "tasks.jsonl",
		map[string]any{"question": "1+1=", "ground_truth": "2", "data_source": "easy"},
		map[string]any{"question": "2+2=", "ground_truth": "4", "data_source": "easy"},
		map[string]any{"question": "3+3=", "ground_truth": "6", "data_source": "hard"},
		map[string]any{"question": "4+4=", "ground_truth": "8", "data_source": "hard"},
	)
}

// answerer is a sampler that answers by the last user message: the
// scripted answer, "9" (a wrong bare integer) otherwise. before, when
// set, runs first on every call and may fail it.
type answerer struct {
	answers map[string]string
	mu      sync.Mutex
	calls   int
	before  func(call int) error
}

func (a *answerer) Sample(ctx context.Context, req sampler.Request) (sampler.Response, error) {
	a.mu.Lock()
	a.calls++
	n := a.calls
	a.mu.Unlock()
	if a.before != nil {
		if err := a.before(n); err != nil {
			return sampler.Response{}, err
		}
	}
	q := ""
	for _, m := range req.Messages {
		if m.Role == "user" {
			q = m.Content
		}
	}
	text, ok := a.answers[q]
	if !ok {
		text = "9"
	}
	ids := samplertest.Tokens(text)
	lps := make([]float64, len(ids))
	for i := range lps {
		lps[i] = -0.5
	}
	return sampler.Response{Text: text, PromptIDs: samplertest.Tokens(q), CompletionIDs: ids, Logprobs: lps, FinishReason: "stop"}, nil
}

func TestNewPlan(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		n      int
		k      int
		scored bool
		temp   float64
	}{
		{"k from val_kwargs.n", []string{"rollout.val_kwargs.n=3", "rollout.val_kwargs.temperature=0"}, 0, 3, true, 0},
		{"--n wins", []string{"rollout.val_kwargs.n=3", "rollout.val_kwargs.temperature=0"}, 5, 5, true, 0},
		{"val_kwargs sampling", []string{"rollout.val_kwargs.temperature=0.7", "rollout.temperature=1"}, 1, 1, true, 0.7},
		{"a workflow reads any row", []string{"rollout.val_kwargs.temperature=0"}, 1, 1, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := loadConfig(t, tc.args...)
			c.Workflow.UseWorkflow = tc.name == "a workflow reads any row"
			p := NewPlan(c, Inputs{Data: []string{"d.jsonl"}, N: tc.n})
			if p.K != tc.k || p.Rows.Scored != tc.scored || p.Params.Temperature != tc.temp {
				t.Errorf("k %d scored %v temperature %v, want %d %v %v", p.K, p.Rows.Scored, p.Params.Temperature, tc.k, tc.scored, tc.temp)
			}
			if p.Rows.MaxQuestionBytes() != c.Data.MaxPromptLength*MaxBytesPerToken {
				t.Errorf("max question %d bytes for data.max_prompt_length=%d", p.Rows.MaxQuestionBytes(), c.Data.MaxPromptLength)
			}
		})
	}
}

func TestCheckScoredColumns(t *testing.T) {
	cases := []struct {
		name string
		row  episode.Task
		want string // "" for no error
	}{
		{"question and answer", episode.Task{"question": "1+1=", "ground_truth": "2"}, ""},
		{"problem and answer", episode.Task{"problem": "1+1=", "answer": "2"}, ""},
		{"no question column", episode.Task{"text": "1+1=", "ground_truth": "2"}, "row 0 has no question column (question, problem, prompt, observation); env arith reads the question from one of them: rename the column that holds it (columns: ground_truth, text)"},
		{"question not text", episode.Task{"question": 7.0, "ground_truth": "2"}, "row 0: column question holds a number, not text"},
		{"empty question", episode.Task{"question": "", "ground_truth": "2"}, "row 0: column question is empty"},
		{"null question", episode.Task{"question": nil, "ground_truth": "2"}, "row 0: column question is empty"},
		{"no reference answer", episode.Task{"question": "1+1="}, "row 0 has no reference answer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckScoredColumns("d.jsonl", "arith", []episode.Task{tc.row})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !usererr.Is(err) {
				t.Fatalf("error %v, want a usage error containing %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "d.jsonl: ") {
				t.Errorf("error %q does not start with the file", err)
			}
		})
	}
}

func TestLoadTasks(t *testing.T) {
	dir := t.TempDir()
	good := fourTasks(t, dir)
	long := strings.Repeat("1+", 40) + "1="
	withLong := writeRows(t, dir, "long.jsonl",
		map[string]any{"question": "1+1=", "ground_truth": "2"},
		map[string]any{"question": long, "ground_truth": "41"})
	onlyLong := writeRows(t, dir, "onlylong.jsonl", map[string]any{"question": long, "ground_truth": "41"})
	empty := writeRows(t, dir, "empty.jsonl")
	noAnswer := writeRows(t, dir, "noanswer.jsonl", map[string]any{"question": "1+1="})
	cases := []struct {
		name    string
		files   []string
		scored  bool
		tasks   int
		skipped int
		want    string
	}{
		{"one file", []string{good}, true, 4, 0, ""},
		{"files in order", []string{good, withLong}, true, 5, 1, ""},
		{"a long question is skipped", []string{withLong}, true, 1, 1, ""},
		{"every row too long", []string{onlyLong}, true, 0, 1, "every row of " + onlyLong + " is too long for data.max_prompt_length=4"},
		{"no rows", []string{empty}, true, 0, 0, empty + " has no rows; nothing to evaluate"},
		{"no reference answer", []string{noAnswer}, true, 0, 0, "has no reference answer"},
		{"unscored rows are not checked", []string{noAnswer, withLong}, false, 3, 0, ""},
		{"missing file", []string{filepath.Join(dir, "nope.jsonl")}, true, 0, 0, "nope.jsonl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// 4 tokens: questions of more than 64 bytes are skipped.
			p := &Plan{Inputs: Inputs{Data: tc.files, Files: tc.files}, Rows: RowRules{Scored: tc.scored, EnvName: "arith", MaxPromptLength: 4}}
			tasks, skipped, err := p.LoadTasks(context.Background())
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one containing %q", err, tc.want)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if len(tasks) != tc.tasks || skipped != tc.skipped {
				t.Errorf("%d tasks, %d skipped; want %d and %d", len(tasks), skipped, tc.tasks, tc.skipped)
			}
		})
	}
}

func TestCheckEpisodesPath(t *testing.T) {
	dir := t.TempDir()
	data := fourTasks(t, dir)
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("rollout:\n  n: 2\n"), 0o644)
	foreign := filepath.Join(dir, "notes.txt")
	os.WriteFile(foreign, []byte("my notes\n"), 0o644)
	emptyFile := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(emptyFile, nil, 0o644)
	ours := filepath.Join(dir, "eps.jsonl")
	var b bytes.Buffer
	w := episodestore.NewWriter(&b, nil, false, 0)
	if _, err := w.Write(&episodestore.Record{Phase: episodestore.PhaseEval, Episode: episode.Episode{ID: "0:0", Trajectories: []episode.Trajectory{{}}}}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(ours, b.Bytes(), 0o644)
	cases := []struct {
		name  string
		path  string
		force bool
		want  string
	}{
		{"new file", filepath.Join(dir, "new.jsonl"), false, ""},
		{"missing directory", filepath.Join(dir, "no", "eps.jsonl"), false, "the directory " + filepath.Join(dir, "no") + " does not exist; create it first"},
		{"a directory", dir, false, "is a directory; give a file name"},
		{"the dataset", data, true, "is also an input (--data " + data + ")"},
		{"a config file", cfg, true, "is also an input (--config " + cfg + ")"},
		{"someone else's file", foreign, false, "does not hold episodes written by rllm; choose another file, or pass --force"},
		{"someone else's file, forced", foreign, true, ""},
		{"an empty file", emptyFile, false, ""},
		{"an episodes file", ours, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckEpisodesPath(tc.path, []string{data}, []string{cfg}, tc.force)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !usererr.Is(err) {
				t.Fatalf("error %v, want a usage error containing %q", err, tc.want)
			}
		})
	}
}

// fakePolicy is a policy over the given sampler, as pkg/policy names one.
func fakePolicy(s sampler.Sampler) *policy.Policy {
	return &policy.Policy{Sampler: s, Kind: "fake", Model: "fake-model", Where: "memory"}
}

func TestRun(t *testing.T) {
	// "1+1=" and "3+3=" are answered right, the others with "9": pass@1
	// = pass@k = 2/4 and each source's mean reward is (1 + 0.1) / 2 (the
	// arith reward's format_score for a wrong bare integer).
	dir := t.TempDir()
	data := fourTasks(t, dir)
	for _, k := range []int{1, 2} {
		for _, asJSON := range []bool{false, true} {
			eps := filepath.Join(t.TempDir(), "eps.jsonl.gz")
			c := loadConfig(t, "env.args.reward_args.close_score=0", "rollout.val_kwargs.temperature=0")
			p := NewPlan(c, Inputs{Data: []string{"tasks.jsonl"}, Files: []string{data}, N: k, Episodes: eps})
			var log bytes.Buffer
			ev, err := Prepare(context.Background(), p, Options{Log: &log, JSON: asJSON})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(eps); err == nil {
				t.Errorf("the episodes file exists before the run")
			}
			res, err := ev.Run(context.Background(), fakePolicy(&answerer{answers: map[string]string{"1+1=": "2", "3+3=": "6"}}))
			ev.Close()
			if err != nil {
				t.Fatal(err)
			}
			r := res.Report
			if r.Tasks != 4 || r.Episodes != 4*k || r.K != k || r.Failed != 0 || r.Interrupted || r.Client != nil {
				t.Errorf("k=%d: report %+v", k, r)
			}
			if math.Abs(r.PassAt1-0.5) > 1e-12 || math.Abs(r.PassAtK-0.5) > 1e-12 || math.Abs(r.BySource["easy"].MeanReward-0.55) > 1e-12 {
				t.Errorf("k=%d: pass@1 %v pass@k %v easy reward %v", k, r.PassAt1, r.PassAtK, r.BySource["easy"].MeanReward)
			}
			if r.Model != "fake-model" || r.Sampler != "fake" || r.Data[0] != "tasks.jsonl" || r.EpisodesOut != eps || r.Temperature != 0 {
				t.Errorf("report names %+v", r)
			}
			if w, err := res.Verdict(); w != "" || err != nil {
				t.Errorf("verdict %q, %v; want none", w, err)
			}
			recs, err := episodestore.ReadAll(eps)
			if err != nil || len(recs) != 4*k {
				t.Fatalf("%d records in the gzip episodes file (%v), want %d", len(recs), err, 4*k)
			}
			for _, rec := range recs {
				if rec.Phase != episodestore.PhaseEval {
					t.Errorf("record phase %q", rec.Phase)
				}
			}
			want := "rllm: eval: 4 tasks × " + Plural(k, "attempt") + " = " + Plural(4*k, "episode") + ", sampling from fake-model (fake: memory)"
			if asJSON {
				want = `"event":"start"`
			}
			if !strings.Contains(log.String(), want) {
				t.Errorf("progress lacks %q:\n%s", want, log.String())
			}
		}
	}
}

func TestRunFailures(t *testing.T) {
	data := fourTasks(t, t.TempDir())
	refused := errors.New("401 Unauthorized: no key")
	cases := []struct {
		name    string
		before  func(call int) error
		failed  int
		warning string
		err     string
	}{
		{"every episode fails", func(int) error { return refused }, 4, "", "every episode failed: 4 of 4 episodes ended error before their first reply, so nothing was sampled; the first said: "},
		{"one fails", func(call int) error {
			if call == 1 {
				return refused
			}
			return nil
		}, 1, "1 of 4 episodes failed (counted as incorrect); the first: ", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := loadConfig(t, "workflow.retry_limit=1", "workflow.n_parallel_tasks=1")
			p := NewPlan(c, Inputs{Data: []string{data}, Files: []string{data}, N: 1})
			var log bytes.Buffer
			ev, err := Prepare(context.Background(), p, Options{Log: &log, JSON: true})
			if err != nil {
				t.Fatal(err)
			}
			defer ev.Close()
			res, err := ev.Run(context.Background(), fakePolicy(&answerer{before: tc.before}))
			if err != nil {
				t.Fatal(err)
			}
			if res.Report.Failed != tc.failed {
				t.Errorf("%d failed, want %d", res.Report.Failed, tc.failed)
			}
			w, err := res.Verdict()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("verdict error %v, want one containing %q", err, tc.err)
				}
			} else if err != nil || !strings.Contains(w, tc.warning) {
				t.Fatalf("verdict %q, %v; want the warning %q", w, err, tc.warning)
			}
			if want := fmt.Sprintf(`"failed":%d`, tc.failed); !strings.Contains(log.String(), want) {
				t.Errorf("progress lacks %s:\n%s", want, log.String())
			}
		})
	}
}

func TestRunInterrupted(t *testing.T) {
	// One episode at a time; the third request cancels the run: two
	// episodes finish, their records are in the file, the report is
	// partial and the verdict counts them.
	data := fourTasks(t, t.TempDir())
	eps := filepath.Join(t.TempDir(), "eps.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := loadConfig(t, "workflow.n_parallel_tasks=1")
	p := NewPlan(c, Inputs{Data: []string{data}, Files: []string{data}, N: 1, Episodes: eps})
	var log bytes.Buffer
	ev, err := Prepare(ctx, p, Options{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	res, err := ev.Run(ctx, fakePolicy(&answerer{before: func(call int) error {
		if call == 3 {
			cancel()
		}
		return nil
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Report.Interrupted || res.Report.Episodes != 2 || !errors.Is(res.RunErr, context.Canceled) {
		t.Errorf("report %+v, run error %v: want 2 episodes, interrupted", res.Report, res.RunErr)
	}
	_, err = res.Verdict()
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted after 2 of 4 episodes; they are in "+eps) {
		t.Errorf("verdict %v", err)
	}
	recs, err := episodestore.ReadAll(eps)
	if err != nil || len(recs) != 2 {
		t.Errorf("%d records after the interruption (%v), want 2", len(recs), err)
	}
	if !strings.Contains(log.String(), "(interrupted)") {
		t.Errorf("no interrupted progress line:\n%s", log.String())
	}
	if _, err := ev.Run(ctx, fakePolicy(&answerer{})); err == nil {
		t.Error("a second Run was accepted")
	}
}

func TestPrepareRefuses(t *testing.T) {
	dir := t.TempDir()
	data := fourTasks(t, dir)
	long := writeRows(t, dir, "long.jsonl", map[string]any{"question": strings.Repeat("9", 100), "ground_truth": "1"})
	cases := []struct {
		name     string
		args     []string
		in       Inputs
		want     string
		wantLog  string
		noOutput string
	}{
		{"missing episodes dir", nil, Inputs{Files: []string{data}, Episodes: filepath.Join(dir, "no", "e.jsonl")}, "does not exist", "", ""},
		{"unknown env", []string{"env.name=nosuchenv"}, Inputs{Files: []string{data}}, "nosuchenv", "", ""},
		{"every row too long", []string{"data.max_prompt_length=4"}, Inputs{Data: []string{"long.jsonl"}, Files: []string{long}, Episodes: filepath.Join(dir, "e.jsonl")},
			"every row of long.jsonl is too long", "rllm: eval: skipped 1 rows whose question is longer than 64 bytes", filepath.Join(dir, "e.jsonl")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			tc.in.N = 1
			_, err := Prepare(context.Background(), NewPlan(loadConfig(t, tc.args...), tc.in), Options{Log: &log})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !usererr.Is(err) {
				t.Fatalf("error %v, want a usage error containing %q", err, tc.want)
			}
			if !strings.Contains(log.String(), tc.wantLog) {
				t.Errorf("log %q lacks %q", log.String(), tc.wantLog)
			}
			if tc.noOutput != "" {
				if _, err := os.Stat(tc.noOutput); err == nil {
					t.Errorf("%s was written", tc.noOutput)
				}
			}
		})
	}
}

func TestVerdict(t *testing.T) {
	errored := &episode.Episode{ID: "0:0", TerminationReason: episode.TerminationError, Error: "boom"}
	solved := &episode.Episode{ID: "1:0", TerminationReason: episode.TerminationEnvDone,
		Trajectories: []episode.Trajectory{{Steps: []episode.Step{{ModelResponse: "2"}}}}}
	result := func(failed int, eps ...*episode.Episode) *Result {
		r := &Result{Report: Report{Failed: failed}, done: len(eps), total: len(eps), firstErr: "0:0: boom"}
		for _, ep := range eps {
			r.endings.Add(ep)
		}
		return r
	}
	cases := []struct {
		name          string
		r             *Result
		warning, err  string
		interruptedBy error
	}{
		{"all good", result(0, solved, solved), "", "", nil},
		{"every episode failed the same way", result(1, errored), "", "every episode failed: 1 of 1 episodes ended error before their first reply", nil},
		{"most ended before a reply", result(2, errored, errored, solved), "2 of 3 episodes ended error before their first reply", "", nil},
		{"some failed", result(1, errored, solved, solved), "1 of 3 episodes failed (counted as incorrect); the first: 0:0: boom", "", nil},
		{"interrupted", &Result{RunErr: context.Canceled, done: 1, total: 4}, "", "interrupted after 1 of 4 episodes: context canceled", context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := tc.r.Verdict()
			if !strings.Contains(w, tc.warning) || (tc.warning == "") != (w == "") {
				t.Errorf("warning %q, want %q", w, tc.warning)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one containing %q", err, tc.err)
			case tc.interruptedBy != nil && !errors.Is(err, tc.interruptedBy):
				t.Errorf("error %v does not wrap %v", err, tc.interruptedBy)
			}
		})
	}
}

func TestProgressLines(t *testing.T) {
	cases := []struct {
		name        string
		json        bool
		interrupted bool
		want        []string
	}{
		{"text", false, false, []string{
			"rllm: eval: 2 tasks × 1 attempt = 2 episodes, sampling from m (openai: here)\n",
			"rllm: eval: stuck\n",
			"rllm: eval: 2/2 episodes done, 1 failed, 1 retried, ",
		}},
		{"text interrupted", false, true, []string{"(interrupted)\n"}},
		{"json", true, false, []string{
			`{"episodes":2,"event":"start","k":1,"policy":"m (openai: here)","tasks":2}` + "\n",
			`{"event":"stall","message":"stuck"}` + "\n",
			`"event":"done","failed":1,"retries":1}`,
		}},
		{"json interrupted", true, true, []string{`"event":"interrupted"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			p := newEvalProgress(&b, tc.json, 2)
			p.start(2, 1, "m (openai: here)")
			p.onEvent(rollout.Event{Kind: rollout.EventFinished, Termination: episode.TerminationEnvDone})
			p.onEvent(rollout.Event{Kind: rollout.EventRetried})
			p.onEvent(rollout.Event{Kind: rollout.EventFailed, Termination: episode.TerminationError, Err: "x"})
			p.stalled("stuck")
			p.finish(0, tc.interrupted)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("progress lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	s := rollout.EvalSummary{Tasks: 4, Episodes: 8, K: 2, PassAt1: 0.375, PassAtK: 0.5, MeanReward: 0.4, Seconds: 1.5,
		BySource: map[string]*rollout.SourceSummary{"easy": {PassAt1: 0.5, PassAtK: 0.5, MeanReward: 0.55}}}
	m := Metrics(s)
	want := map[string]float64{"eval/pass@1": 0.375, "eval/pass@2": 0.5, "eval/mean_reward": 0.4, "eval/tasks": 4, "eval/episodes": 8,
		"eval/seconds": 1.5, "eval/easy/pass@1": 0.5, "eval/easy/pass@2": 0.5, "eval/easy/mean_reward": 0.55}
	if len(m) != len(want) {
		t.Errorf("metrics %v, want %v", m, want)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
}

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 attempts"}, {1, "1 attempt"}, {4, "4 attempts"}} {
		if got := Plural(tc.n, "attempt"); got != tc.want {
			t.Errorf("Plural(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
