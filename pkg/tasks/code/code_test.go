package code

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// small keeps the hostile replies fast on two shared cores.
var small = sandbox.Limits{
	WallTime: 5 * time.Second, CPUTime: 2 * time.Second, MemoryBytes: 256 << 20,
	Processes: 16, FileSizeBytes: 1 << 20, OutputBytes: 64 << 10,
}

// generous are limits for the tests that do not test limits: a busy
// machine must not fail them (issue 36).
var generous = sandbox.Limits{
	WallTime: 120 * time.Second, CPUTime: 60 * time.Second, MemoryBytes: 512 << 20,
	Processes: 32, FileSizeBytes: 1 << 20, OutputBytes: 64 << 10,
}

// pool is a bwrap pool with the small limits of the hostile replies.
func pool(t testing.TB) *sandbox.Pool { return openPool(t, small) }

// generousPool is a bwrap pool with generous limits.
func generousPool(t testing.TB) *sandbox.Pool { return openPool(t, generous) }

func openPool(t testing.TB, limits sandbox.Limits) *sandbox.Pool {
	return openPoolOn(t, sandbox.BackendBwrap, limits)
}

// openPoolOn opens a pool of the backend: bwrap (skipped where it cannot
// run or python3 is missing), or docker with the local base image
// (skipped where no daemon or image is there, unless RLLM_REQUIRE_DOCKER=1:
// CI runs them for real).
func openPoolOn(t testing.TB, backend string, limits sandbox.Limits, size ...int) *sandbox.Pool {
	t.Helper()
	n := 2
	if len(size) > 0 {
		n = size[0]
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil && backend == sandbox.BackendBwrap {
		t.Skip("no /usr/bin/python3 on this machine (Debian package python3)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sandbox.Open(ctx, sandbox.Config{Backend: backend, Limits: limits, MaxConcurrent: n, DockerWarm: n})
	if err != nil {
		if backend == sandbox.BackendDocker && (!usererr.Is(err) || os.Getenv("RLLM_REQUIRE_DOCKER") == "1") {
			t.Fatal(err)
		}
		t.Skipf("%s is not usable here: %v", backend, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func load(t testing.TB, name string) []episode.Task {
	t.Helper()
	rows, err := dataset.Load(context.Background(), filepath.Join("testdata", name), dataset.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func newEnv(t testing.TB, p *sandbox.Pool, task episode.Task, params Params) *Env {
	t.Helper()
	tests, err := ParseTests(task)
	if err != nil {
		t.Fatal(err)
	}
	lang, ok := Languages[params.Language]
	if !ok {
		t.Fatalf("language %q", params.Language)
	}
	return &Env{Task: task, Tests: tests, Params: params, Runner: p, Limits: p.Limits(), Isolated: p.Backend() != sandbox.BackendUnsafeHost, lang: lang}
}

// defaults are the env args of the tests that do not test time limits:
// a test's timeout no busy machine reaches (with generousPool).
var defaults = Params{Language: "python", TimeoutS: 60, DebugChars: 200, Batch: true}

func reply(code string) episode.Action {
	return episode.Action{Content: "Here it is:\n```python\n" + code + "\n```\n"}
}

func step(t testing.TB, e *Env, a episode.Action) (float64, map[string]any) {
	t.Helper()
	return stepWithin(t, 120*time.Second, e, a)
}

func stepWithin(t testing.TB, d time.Duration, e *Env, a episode.Action) (float64, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	res, err := e.Step(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Done {
		t.Fatal("not done")
	}
	return res.Reward, res.Info
}

// TestRowsInEachLayout scores a right and a wrong solution of every
// hand-written row (one per rLLM layout) loaded through pkg/dataset.
func TestRowsInEachLayout(t *testing.T) {
	p := generousPool(t)
	for _, row := range load(t, "rows.jsonl") {
		t.Run(row["id"].(string), func(t *testing.T) {
			e := newEnv(t, p, row, defaults)
			if r, info := step(t, e, reply(row["solution"].(string))); r != 1 || info["is_correct"] != true {
				t.Errorf("right solution: reward %v info %v", r, info)
			}
			r, info := step(t, e, reply(row["wrong"].(string)))
			if r != 0 || info["is_correct"] != false {
				t.Errorf("wrong solution: reward %v info %v", r, info)
			}
			f, ok := info["first_failure"].(map[string]any)
			if !ok || f["reason"] == "" || f["input"] == "" {
				t.Errorf("no first failure recorded: %v", info)
			}
		})
	}
}

func TestPartialCredit(t *testing.T) {
	p := generousPool(t)
	task := episode.Task{"id": "p", "ground_truth": []any{"assert f(1) == 1", "assert f(2) == 4", "assert f(3) == 9", "assert f(4) == 0"}}
	params := defaults
	params.Partial = true
	r, info := step(t, newEnv(t, p, task, params), reply("def f(x):\n    return x * x"))
	if r != 0.75 || info["tests_passed"] != 3 || info["tests_run"] != 4 {
		t.Fatalf("reward %v info %v", r, info)
	}
	r, info = step(t, newEnv(t, p, task, defaults), reply("def f(x):\n    return x * x"))
	if r != 0 || info["tests_run"] != 4 {
		t.Fatalf("all-or-nothing: reward %v info %v", r, info)
	}
	r, info = step(t, newEnv(t, p, task, defaults), reply("def f(x):\n    return 0"))
	if r != 0 || info["tests_run"] != 1 {
		t.Fatalf("stops at the first failure: reward %v info %v", r, info)
	}
}

func TestNoCodeBlock(t *testing.T) {
	p := generousPool(t)
	e := newEnv(t, p, load(t, "rows.jsonl")[0], defaults)
	r, info := step(t, e, episode.Action{Content: "print(6)"})
	if r != 0 || info["format_error"] == nil {
		t.Fatalf("reward %v info %v", r, info)
	}
}

// TestHostileReplies: each bad program of the issue, sent as a reply to
// a stdin task, scores 0 with its reason in the episode, and the host is
// left as it was.
func TestHostileReplies(t *testing.T) {
	p := pool(t)
	t.Setenv("OPENAI_API_KEY", "sk-test-secret-do-not-leak")
	port, reached := repotest.HostListener(t)
	marker := filepath.Join(os.TempDir(), fmt.Sprintf("rllm-code-escape-%d", os.Getpid()))
	defer os.Remove(marker)
	home, _ := os.UserHomeDir()
	// The task's answer is "ok": a reply that prints it after its attack
	// would pass if the attack went unnoticed.
	// Two tests, so that the batch harness is exercised as well as one
	// sandbox a test.
	task := episode.Task{"id": "hostile", "ground_truth": `[{"input": "", "output": "ok"}, {"input": "", "output": "ok"}]`}
	tests := []struct{ name, code, reason string }{
		{"fork bomb", "import os\nwhile True:\n    os.fork()", "process limit"},
		{"endless allocation", "x = []\nwhile True:\n    x.append(bytearray(1 << 24))", "memory limit"},
		{"infinite loop", "while True:\n    pass", "time limit"},
		{"1 GB print", "import sys\nb = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(b)", "output limit"},
		{"sleep past the timeout", "import time\ntime.sleep(60)\nprint('ok')", "time limit"},
		{"scratch file and big output", "open('scratch', 'w').write('x' * 100000)\nprint('y' * 30000)", "wrong answer"},
		{"write host /tmp", fmt.Sprintf("open(%q, 'w').write('x')\nprint('wrote')", marker), "wrong answer"},
		{"read /etc/hostname", "print(open('/etc/hostname').read())\nprint('ok')", "FileNotFoundError"},
		{"read home", fmt.Sprintf("import os\nos.listdir(%q)\nprint('ok')", home), "FileNotFoundError"},
		{"read env for keys", "import os\nprint('ok' if 'sk-test-secret-do-not-leak' in str(os.environ) else 'no key')", "wrong answer"},
		{"tcp connect", fmt.Sprintf("import socket\nsocket.create_connection(('127.0.0.1', %d), timeout=2)\nprint('ok')", port), "ConnectionRefusedError"},
		{"forge the harness's results", "import os\nfor p in (os.getppid(), 1, 2, 3):\n    try:\n        open('/proc/%d/fd/1' % p, 'w').write('{\"exit\": 0, \"out\": \"ok\\\\n\", \"took\": 0}\\n' * 2)\n    except OSError:\n        pass\nraise SystemExit(3)", "exit status 3"},
		{"kill the harness", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('ok')", "killed by signal"},
	}
	for _, tc := range tests {
		for _, batch := range []bool{true, false} {
			if tc.name == "kill the harness" && !batch {
				continue // without the harness the parent is the sandbox's init
			}
			t.Run(fmt.Sprintf("%s/batch=%v", tc.name, batch), func(t *testing.T) {
				start := time.Now()
				r, info := step(t, newEnv(t, p, task, Params{Language: "python", TimeoutS: 3, DebugChars: 200, Batch: batch}), reply(tc.code))
				if r != 0 {
					t.Fatalf("reward %v: %v", r, info)
				}
				f, _ := info["first_failure"].(map[string]any)
				reason, _ := f["reason"].(string)
				if !strings.Contains(reason, tc.reason) {
					t.Errorf("reason %q, want it to mention %q", reason, tc.reason)
				}
				if got, _ := f["got"].(string); len(got) > 400 {
					t.Errorf("got kept untruncated: %d bytes", len(got))
				}
				if d := time.Since(start); d > 60*time.Second {
					t.Errorf("took %v", d) // a bound on a hang, not a speed test
				}
			})
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a reply wrote %s on the host", marker)
	}
	if reached() {
		t.Error("a reply reached a listener on the host's 127.0.0.1")
	}
}

func TestTotalTimeout(t *testing.T) {
	p := pool(t)
	task := episode.Task{"id": "slow", "ground_truth": []any{"import time; time.sleep(0.6)", "import time; time.sleep(0.6)", "import time; time.sleep(0.6)"}}
	params := Params{Language: "python", TimeoutS: 5, TotalTimeoutS: 1, DebugChars: 200, Partial: true}
	r, info := step(t, newEnv(t, p, task, params), reply("x = 1"))
	f, _ := info["first_failure"].(map[string]any)
	if r >= 1 || f == nil || !strings.Contains(f["reason"].(string), "time limit") {
		t.Fatalf("reward %v info %v", r, info)
	}
}

func TestMalformedRowsNameTheTask(t *testing.T) {
	for _, row := range load(t, "malformed.jsonl") {
		id := row["id"].(string)
		_, err := ParseTests(row)
		var ue *usererr.Error
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "task "+id) {
			t.Errorf("%s: %v, want an error naming the task", id, err)
		}
	}
}

func TestUnsupportedLanguage(t *testing.T) {
	_, err := New(episode.Task{"id": "t1", "ground_truth": "assert True"}, Params{Language: "cobol", TimeoutS: 1})
	if err == nil || !strings.Contains(err.Error(), "task t1") || !strings.Contains(err.Error(), "cobol") {
		t.Fatalf("err %v", err)
	}
}

func TestExtract(t *testing.T) {
	tests := []struct {
		reply, code string
		ok          bool
	}{
		{"```python\nprint(1)\n```", "print(1)", true},
		{"a\n```\nx = 1\n```\nb\n```py\ny = 2\n```", "y = 2", true},
		{"```python\nfirst\n```\n```cpp\nsecond\n```", "second", true},
		{"```print(1)```", "", false},
		{"```c++\nint x;\n```", "", false},
		{"```python\nunterminated", "", false},
		{"no code", "", false},
	}
	for _, tc := range tests {
		code, _, ok := Extract(tc.reply)
		if code != tc.code || ok != tc.ok {
			t.Errorf("Extract(%q) = %q, %v; want %q, %v", tc.reply, code, ok, tc.code, tc.ok)
		}
	}
}

func TestOutputsMatch(t *testing.T) {
	tests := []struct {
		got, want string
		eq        bool
	}{
		{"3\n", "3", true},
		{"3.0", "3", true},
		{"007", "7", true},
		{"1E+3", "1000", true},
		{"1 2  3", "1 2 3", true},
		{"a\r\nb\r\n", "a\nb", true},
		{"\n\na\n\n", "a", true},
		{"a\n\nb", "a\nb", false},
		{"0.1000001", "0.1", false},
		{"Yes", "YES", false},
		{"nan", "nan", true}, // equal as text before any number is read
		{"nan 1", "NaN 1", false},
		{"inf", "Infinity", true},
		{"1e99999999", "1e99999998", false},
		{"1_000", "1000", true},
	}
	for _, tc := range tests {
		if got := OutputsMatch(tc.got, tc.want); got != tc.eq {
			t.Errorf("OutputsMatch(%q, %q) = %v", tc.got, tc.want, got)
		}
	}
}

// JSONEqual compares two JSON texts with Python's == on the decoded
// values (numbers by value: 1 == 1.0, True == 1; lists elementwise;
// objects by keys), as Function tests compare a result with the expected
// output (session.go): the tests' and the fuzz target's entry point.
func JSONEqual(got, want string) bool {
	var a, b any
	if decodeNumbers(got, &a) != nil || decodeNumbers(want, &b) != nil {
		return false
	}
	return pyEqual(a, b)
}

func TestJSONEqual(t *testing.T) {
	tests := []struct {
		a, b string
		eq   bool
	}{
		{"3", "3.0", true},
		{"true", "1", true},
		{"[1, [2, 3]]", "[1,[2,3]]", true},
		{`{"a": 1}`, `{"a": 1.0}`, true},
		{`"1"`, "1", false},
		{"null", "null", true},
		{"[1]", "[1, 2]", false},
		{"1 2", "1", false},
		{"", "1", false},
	}
	for _, tc := range tests {
		if got := JSONEqual(tc.a, tc.b); got != tc.eq {
			t.Errorf("JSONEqual(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func TestGenerateSolvable(t *testing.T) {
	rows, err := Generate(40, 7, Options{Tests: 3})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Generate(40, 7, Options{Tests: 3})
	if fmt.Sprint(rows) != fmt.Sprint(again) {
		t.Fatal("the same seed gave other rows")
	}
	for _, r := range rows {
		if _, err := ParseTests(r); err != nil {
			t.Fatalf("%v: %v", r["id"], err)
		}
	}
	if _, err := Generate(1, 0, Options{Tests: 0}); err == nil {
		t.Fatal("0 tests accepted")
	}
}

// TestGeneratedSolutions runs a reference solution of every generated
// problem family against its hidden tests.
func TestGeneratedSolutions(t *testing.T) {
	p := generousPool(t)
	solutions := map[string]string{
		"code_sum":           "a, b = map(int, input().split())\nprint(a + b)",
		"code_max":           "input()\nprint(max(map(int, input().split())))",
		"code_reverse":       "print(input()[::-1])",
		"code_sum_even":      "def sum_even(xs):\n    return sum(x for x in xs if x % 2 == 0)",
		"code_count_vowels":  "def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)",
		"code_fib":           "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
		"code_sorted_unique": "def sorted_unique(xs):\n    return sorted(set(xs))",
	}
	rows, _ := Generate(60, 1, Options{Tests: 3})
	seen := map[string]bool{}
	for _, r := range rows {
		src := r["data_source"].(string)
		if seen[src] {
			continue
		}
		seen[src] = true
		sol, ok := solutions[src]
		if !ok {
			t.Fatalf("no reference solution for %s", src)
		}
		if rew, info := step(t, newEnv(t, p, r, defaults), reply(sol)); rew != 1 {
			t.Errorf("%s: reward %v %v", src, rew, info)
		}
	}
	if len(seen) != len(solutions) {
		t.Errorf("60 rows drew %d of %d families", len(seen), len(solutions))
	}
}

// TestBigOutputPassesInBatch: an output larger than its share of a batch
// run's output limit is run again alone and passes.
func TestBigOutputPassesInBatch(t *testing.T) {
	p := generousPool(t)
	want := strings.Repeat("y", 30000)
	task := episode.Task{"id": "big", "ground_truth": []any{
		map[string]any{"input": "", "output": want}, map[string]any{"input": "", "output": want}}}
	r, info := step(t, newEnv(t, p, task, defaults), reply("open('scratch', 'w').write('x' * 100000)\nprint('y' * 30000)"))
	if r != 1 {
		t.Fatalf("reward %v info %v", r, info)
	}
}

func TestParseTestsNamesTheJSONType(t *testing.T) {
	for _, tc := range []struct {
		truth any
		want  string
	}{
		{3.0, "ground_truth is a number;"},
		{[]any{true}, "ground_truth[0] is a boolean;"},
		{map[string]any{"input": "1", "output": nil}, "must be strings, not a string and null"},
		{map[string]any{"inputs": "1", "outputs": []any{}}, "must both be arrays, not a string and an array"},
	} {
		_, err := ParseTests(episode.Task{"id": "t1", "ground_truth": tc.truth})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ground_truth %#v: err %v, want %q", tc.truth, err, tc.want)
		}
	}
}

// TestNothingOfATestRemains: a test that starts a process in a session of
// its own (setsid, out of reach of its process group's kill) and leaves
// a file does not hand either to the next test. The program passes a
// test only when it finds what an earlier test left: graded one sandbox
// a test it passes none, and batched it must pass none either (issue
// 32: it passed 2 of 3).
func TestNothingOfATestRemains(t *testing.T) {
	p := generousPool(t)
	task := episode.Task{"id": "linger", "ground_truth": []any{
		map[string]any{"input": "", "output": "ok"}, map[string]any{"input": "", "output": "ok"}, map[string]any{"input": "", "output": "ok"}}}
	prog := `import os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0rllm-linger")
    alive = True
except OSError:
    alive = False
left = os.path.exists("left-behind") or os.path.exists("/tmp/left-behind")
print("ok" if alive or left else "no", flush=True)
open("left-behind", "w").close()
open("/tmp/left-behind", "w").close()
if os.fork() == 0:
    try:
        os.setsid()
        l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        l.bind("\0rllm-linger")
        l.listen(8)
        time.sleep(60)
    finally:
        os._exit(0)
time.sleep(0.5)`
	for _, batch := range []bool{true, false} {
		params := defaults
		params.Partial, params.Batch = true, batch
		_, info := step(t, newEnv(t, p, task, params), reply(prog))
		if info["tests_passed"] != 0 || info["tests_run"] != 3 {
			t.Errorf("batch=%v: %v; a later test found what an earlier one left", batch, info)
		}
	}
}

// TestFormatExample: the warm-up's replies are fenced code blocks the
// env reads (issue 36: the warm-up taught test JSON, never a block),
// naming the function the question calls.
func TestFormatExample(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := map[string]bool{}
	for _, q := range []string{"Write add(a, b).", "Read n and then n integers; print their sum."} {
		for range 20 {
			ex := FormatExample(q+"\n"+Instruction, rng)
			c, _, ok := Extract(ex)
			if !ok {
				t.Fatalf("%q has no code block the env reads", ex)
			}
			if strings.HasPrefix(c, "def ") {
				names[strings.TrimPrefix(strings.SplitN(c, "(", 2)[0], "def ")] = true
			}
		}
	}
	if !names["add"] || len(names) != 1 {
		t.Errorf("functions defined: %v, want add only", names)
	}
}

// TestSameScoresEverywhere: right answers score 1, and a wrong one the
// same fraction, on bwrap and Docker, batched and one test a run, on
// rows of 40 tests of each kind (issue 39: under Docker, batched grading
// killed one test of a right answer with SIGKILL, so every task with tens
// of tests scored 0: the harness's kill of every other process after a
// test reached the container's idle process, whose end ends the
// container).
func TestSameScoresEverywhere(t *testing.T) {
	const n = 40
	var stdin, fn, asserts []any
	for i := range n {
		stdin = append(stdin, map[string]any{"input": fmt.Sprintf("%d %d\n", i, 2*i), "output": fmt.Sprint(3 * i)})
		fn = append(fn, map[string]any{"input": fmt.Sprintf("%d\n%d", i, 2*i), "output": fmt.Sprint(3 * i), "testtype": "functional"})
		asserts = append(asserts, fmt.Sprintf("assert add(%d, %d) == %d", i, 2*i, 3*i))
	}
	rows := []struct {
		name       string
		task       episode.Task
		right, bad string
	}{
		{"stdin", episode.Task{"id": "stdin40", "ground_truth": stdin},
			"a, b = map(int, input().split())\nprint(a + b)", "a, b = map(int, input().split())\nprint(a + b if a != 20 else 0)"},
		{"function", episode.Task{"id": "fn40", "metadata": map[string]any{"func_name": "add"}, "ground_truth": fn},
			"def add(a, b):\n    return a + b", "def add(a, b):\n    return a + b if a != 20 else 0"},
		{"MBPP", episode.Task{"id": "mbpp40", "ground_truth": asserts},
			"def add(a, b):\n    return a + b", "def add(a, b):\n    return a + b if a != 20 else 0"},
	}
	for _, backend := range []string{sandbox.BackendBwrap, sandbox.BackendDocker} {
		t.Run(backend, func(t *testing.T) {
			p := openPoolOn(t, backend, generous)
			for _, row := range rows {
				for _, batch := range []bool{true, false} {
					t.Run(fmt.Sprintf("%s/batch=%v", row.name, batch), func(t *testing.T) {
						if backend == sandbox.BackendDocker && !batch && testing.Short() {
							t.Skip("a container a test: minutes (-short)")
						}
						params := defaults
						params.Batch = batch
						// One test a run on Docker is a container (two for
						// asserts) a test: minutes on a busy machine.
						if r, info := stepWithin(t, 15*time.Minute, newEnv(t, p, row.task, params), reply(row.right)); r != 1 || info["tests_passed"] != n {
							t.Errorf("right answer: reward %v: %v", r, info)
						}
						if !batch {
							return // the wrong answer's fraction: batched only
						}
						params.Partial = true
						if r, info := step(t, newEnv(t, p, row.task, params), reply(row.bad)); r != float64(n-1)/n {
							t.Errorf("answer wrong at one test: reward %v, want %v: %v", r, float64(n-1)/n, info)
						}
					})
				}
			}
		})
	}
}
