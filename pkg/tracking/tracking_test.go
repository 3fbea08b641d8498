package tracking

import (
	"context"
	"errors"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/tracking/trackingtest"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

const testKey = "0123456789abcdef0123456789abcdef01234567"

// fakeClock is a clock that only moves when the queue waits.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	slept []time.Duration
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.slept = append(c.slept, d)
	c.mu.Unlock()
	time.Sleep(time.Millisecond) // let the fake's handlers run
	return ctx.Err()
}

func (c *fakeClock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.slept)
}

// lines collects Notify's lines.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) add(s string) { l.mu.Lock(); l.l = append(l.l, s); l.mu.Unlock() }
func (l *lines) all() string  { l.mu.Lock(); defer l.mu.Unlock(); return strings.Join(l.l, "\n") }
func (l *lines) count(sub string) int {
	n := 0
	for _, s := range strings.Split(l.all(), "\n") {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

func testSpec(t *testing.T, dir string, loggers ...string) (Spec, *fakeClock, *lines) {
	clk, out := newClock(), &lines{}
	return Spec{
		Loggers: loggers, Dir: dir, Project: "rllm", Name: "arith",
		Config:    map[string]any{"trainer": map[string]any{"total_training_steps": 3.0, "logger": []any{"console", "wandb"}}, "rollout": map[string]any{"n": 8.0, "api_key_env": "OPENAI_API_KEY"}},
		ResumedAt: -1, Notify: out.add, Now: clk.Now, Sleep: clk.Sleep, StartTimeout: 5 * time.Second,
	}, clk, out
}

// openReady opens the sinks and waits for the trackers' first answers.
func openReady(spec Spec) (*Set, error) {
	set, err := Open(context.Background(), spec)
	if err != nil {
		return nil, err
	}
	if err := set.Ready(context.Background()); err != nil {
		set.Close(context.Background(), Summary{Status: Failed})
		return nil, err
	}
	return set, nil
}

func rows(from, to int) []Row {
	var out []Row
	for s := from; s <= to; s++ {
		out = append(out, Row{Step: s, Metrics: map[string]float64{"critic/score/mean": float64(s) / 10, "val/pass@1": 0.5}})
	}
	return out
}

func logAll(set *Set, rs []Row) {
	for _, r := range rs {
		set.Log(r)
	}
}

func closeSet(t *testing.T, set *Set, st Status) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := set.Close(ctx, Summary{Status: st, Values: map[string]float64{"best/val/pass@1": 0.75}}); err != nil {
		t.Fatal(err)
	}
}

func historySteps(r *trackingtest.WandBRun) []int {
	var s []int
	for _, h := range r.History {
		s = append(s, int(h["_step"].(float64)))
	}
	return s
}

func TestWandBRun(t *testing.T) {
	fake := trackingtest.NewWandB(t, testKey)
	spec, _, out := testSpec(t, t.TempDir(), WandB)
	spec.WandB = WandBSettings{APIKey: testKey, BaseURL: fake.URL, Tags: []string{"grpo", "arith"}}
	set, err := openReady(spec)
	if err != nil {
		t.Fatal(err)
	}
	rs := rows(1, 3)
	rs[1].Metrics["actor/kl_loss"] = math.NaN()
	rs[2].Metrics["actor/entropy"] = math.Inf(1)
	logAll(set, rs)
	set.Event(Event{Step: 2, Kind: "stall", Message: "reward flat"})
	closeSet(t, set, Finished)

	runs := fake.Runs()
	if len(runs) != 1 {
		t.Fatalf("%d runs, want 1", len(runs))
	}
	r := runs[0]
	if got := historySteps(r); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("history steps %v, want [1 2 3]", got)
	}
	if r.History[1]["actor/kl_loss"] != "NaN" || r.History[2]["actor/entropy"] != "Infinity" {
		t.Errorf("non-finite values: %v, %v", r.History[1]["actor/kl_loss"], r.History[2]["actor/entropy"])
	}
	if r.Project != "rllm" || r.DisplayName != "arith" || !slices.Equal(r.Tags, []string{"grpo", "arith"}) {
		t.Errorf("run %+v", r)
	}
	if v, ok := r.Config["trainer"].(map[string]any)["value"].(map[string]any); !ok || v["total_training_steps"] != 3.0 {
		t.Errorf("config %v", r.Config)
	}
	if !r.Complete || r.ExitCode != 0 || r.Summary["best/val/pass@1"] != 0.75 || r.Summary["_step"] != 3.0 {
		t.Errorf("complete %v exit %d summary %v", r.Complete, r.ExitCode, r.Summary)
	}
	if !slices.Contains(r.Uploaded, "config.yaml") || !strings.Contains(string(r.Files["config.yaml"]), "total_training_steps") {
		t.Errorf("config.yaml: uploaded %v", r.Uploaded)
	}
	if len(r.Output) != 1 || !strings.Contains(r.Output[0], "warning: step 2: reward flat") {
		t.Errorf("output.log %q", r.Output)
	}
	if rf := fake.Refusals(); len(rf) > 0 {
		t.Errorf("the fake refused: %q", rf)
	}
	if strings.Contains(out.all(), testKey) {
		t.Error("the key was printed")
	}
}

func TestWandBWrongKey(t *testing.T) {
	fake := trackingtest.NewWandB(t, testKey)
	for _, from := range []string{"WANDB_API_KEY", "~/.netrc"} {
		spec, _, out := testSpec(t, t.TempDir(), Console, WandB)
		spec.WandB = WandBSettings{APIKey: "wrong-key-0000", KeyFrom: from, BaseURL: fake.URL}
		_, err := openReady(spec)
		var ue *usererr.Error
		if !errors.As(err, &ue) || ue.ExitCode() != 2 {
			t.Fatalf("err = %v, want a usage error", err)
		}
		if !strings.Contains(err.Error(), "wandb") || !strings.Contains(err.Error(), from) || strings.Contains(err.Error()+out.all(), "wrong-key-0000") {
			t.Errorf("err = %v", err)
		}
	}
	if len(fake.Runs()) != 0 {
		t.Error("a run was created with a refused key")
	}
}

func TestNoKeyOrURL(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    WandBSettings
		m    MLflowSettings
		lg   []string
		want string
	}{
		{"no wandb key", WandBSettings{}, MLflowSettings{}, []string{WandB}, "WANDB_API_KEY"},
		{"bad base url", WandBSettings{APIKey: "k", BaseURL: "ftp://x"}, MLflowSettings{}, []string{WandB}, "WANDB_BASE_URL"},
		{"bad mode", WandBSettings{Mode: "sometimes"}, MLflowSettings{}, []string{WandB}, "WANDB_MODE"},
		{"bad run id", WandBSettings{APIKey: "k", RunID: "a/b"}, MLflowSettings{}, []string{WandB}, "WANDB_RUN_ID"},
		{"no mlflow uri", WandBSettings{}, MLflowSettings{}, []string{MLflow}, "MLFLOW_TRACKING_URI"},
		{"mlflow path", WandBSettings{}, MLflowSettings{TrackingURI: "./mlruns"}, []string{MLflow}, "MLFLOW_TRACKING_URI"},
		{"mlflow password hidden", WandBSettings{}, MLflowSettings{TrackingURI: "file://u:hunter2@host/x"}, []string{MLflow}, "MLFLOW_TRACKING_URI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.lg, tc.w, tc.m)
			var ue *usererr.Error
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("Check: %v, want a usage error naming %s", err, tc.want)
			}
			spec, _, _ := testSpec(t, t.TempDir(), tc.lg...)
			spec.WandB, spec.MLflow = tc.w, tc.m
			if _, err := openReady(spec); !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v", err)
			}
		})
	}
	if err := Check([]string{WandB}, WandBSettings{Mode: "disabled"}, MLflowSettings{}); err != nil {
		t.Errorf("disabled W&B needs no key: %v", err)
	}
}

// A resumed run continues the same W&B run: the steps it redoes replace
// the first ones (RewindRun), none twice, none missing; a server that
// cannot rewind keeps the first ones and gets the steps after them.
func TestWandBResume(t *testing.T) {
	for _, noRewind := range []bool{false, true} {
		fake := trackingtest.NewWandB(t, testKey)
		fake.NoRewind = noRewind
		dir := t.TempDir()
		spec, _, out := testSpec(t, dir, WandB)
		spec.WandB = WandBSettings{APIKey: testKey, BaseURL: fake.URL}
		set, err := openReady(spec)
		if err != nil {
			t.Fatal(err)
		}
		logAll(set, rows(1, 5))
		closeSet(t, set, Killed) // killed after step 5; its checkpoint is step 3
		spec.ResumedAt = 3
		set, err = openReady(spec)
		if err != nil {
			t.Fatal(err)
		}
		rs := rows(4, 7)
		for _, r := range rs {
			r.Metrics["again"] = 1
		}
		logAll(set, rs)
		closeSet(t, set, Finished)
		runs := fake.Runs()
		if len(runs) != 1 {
			t.Fatalf("noRewind=%v: %d runs, want one", noRewind, len(runs))
		}
		r := runs[0]
		if got := historySteps(r); !slices.Equal(got, []int{1, 2, 3, 4, 5, 6, 7}) {
			t.Logf("refusals %q\n%s", fake.Refusals(), out.all())
			t.Errorf("noRewind=%v: history steps %v, want 1-7 once each", noRewind, got)
		}
		_, redone := r.History[3]["again"]
		if redone == noRewind {
			t.Errorf("noRewind=%v: step 4 is from the %s run", noRewind, map[bool]string{true: "second", false: "first"}[redone])
		}
		if noRewind && out.count("could not rewind") != 1 {
			t.Errorf("no warning about the rewind: %s", out.all())
		}
		if r.Upserts != 2 || !r.Complete {
			t.Errorf("upserts %d complete %v", r.Upserts, r.Complete)
		}
	}
}

// Two runs in one project at once are two W&B runs.
func TestWandBTwoRuns(t *testing.T) {
	fake := trackingtest.NewWandB(t, testKey)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec, _, _ := testSpec(t, t.TempDir(), WandB)
			spec.WandB = WandBSettings{APIKey: testKey, BaseURL: fake.URL}
			set, err := openReady(spec)
			if err != nil {
				t.Error(err)
				return
			}
			logAll(set, rows(1, 20))
			closeSet(t, set, Finished)
		}()
	}
	wg.Wait()
	runs := fake.Runs()
	if len(runs) != 2 || runs[0].Name == runs[1].Name {
		t.Fatalf("%d runs", len(runs))
	}
	for _, r := range runs {
		if len(r.History) != 20 {
			t.Errorf("run %s has %d rows", r.Name, len(r.History))
		}
	}
}

// A tracker answering 500 for a minute, then recovering: one warning, one
// line when it answers, every row sent; 429's Retry-After is honoured.
func TestOutageRecovers(t *testing.T) {
	fake := trackingtest.NewWandB(t, testKey)
	spec, clk, out := testSpec(t, t.TempDir(), WandB)
	spec.WandB = WandBSettings{APIKey: testKey, BaseURL: fake.URL}
	set, err := openReady(spec)
	if err != nil {
		t.Fatal(err)
	}
	down := clk.Now().Add(time.Minute)
	var mu sync.Mutex
	served429 := false
	fake.Intercept = func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if !served429 {
			served429 = true
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}
		if clk.Now().Before(down) {
			w.WriteHeader(http.StatusInternalServerError)
			return true
		}
		return false
	}
	logAll(set, rows(1, 10))
	closeSet(t, set, Finished)
	r := fake.Runs()[0]
	if len(r.History) != 10 || !r.Complete {
		t.Fatalf("%d rows, complete %v", len(r.History), r.Complete)
	}
	if n := out.count("is not answering"); n != 1 {
		t.Errorf("%d outage warnings, want 1:\n%s", n, out.all())
	}
	if n := out.count("answers again"); n != 1 {
		t.Errorf("%d recovery lines, want 1:\n%s", n, out.all())
	}
	slept := clk.Slept()
	if len(slept) == 0 || slept[0] != 7*time.Second {
		t.Errorf("waits %v, want Retry-After's 7s first", slept)
	}
	for _, d := range slept {
		if d > time.Minute {
			t.Errorf("a wait of %v", d)
		}
	}
}

// A tracker that never answers: Open waits StartTimeout, training goes
// on, Close returns within its deadline and says what was not sent.
func TestHangingTracker(t *testing.T) {
	release := make(chan struct{})
	fake := trackingtest.NewWandB(t, testKey)
	fake.Intercept = func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return true
	}
	t.Cleanup(func() { close(release) })
	spec, _, out := testSpec(t, t.TempDir(), WandB, JSONLines)
	spec.WandB = WandBSettings{APIKey: testKey, BaseURL: fake.URL}
	spec.StartTimeout = 100 * time.Millisecond
	set, err := openReady(spec)
	if err != nil {
		t.Fatal(err)
	}
	logAll(set, rows(1, 50))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() {
		set.Close(ctx, Summary{Status: Finished})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Close did not return after its deadline")
	}
	if !strings.Contains(out.all(), "50 rows not sent") || !strings.Contains(out.all(), "metrics.jsonl has every row") {
		t.Errorf("no count of the rows not sent:\n%s", out.all())
	}
	b, _ := os.ReadFile(filepath.Join(spec.Dir, MetricsFile))
	if n := strings.Count(string(b), "\n"); n != 50 {
		t.Errorf("metrics.jsonl has %d lines", n)
	}
}

// An unreachable URL: a warning at start, training goes on, the rows are
// counted at the end.
func TestUnreachable(t *testing.T) {
	fake := trackingtest.StartWandB(testKey)
	url := fake.URL
	fake.Close()
	spec, _, out := testSpec(t, t.TempDir(), WandB)
	spec.WandB = WandBSettings{APIKey: testKey, BaseURL: url}
	set, err := openReady(spec)
	if err != nil {
		t.Fatal(err)
	}
	logAll(set, rows(1, 3))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	set.Close(ctx, Summary{Status: Finished})
	if !strings.Contains(out.all(), "warning: wandb") || !strings.Contains(out.all(), "3 rows not sent") || strings.Contains(out.all(), testKey) {
		t.Errorf("lines:\n%s", out.all())
	}
}

// Past the queue's bound the oldest rows are dropped and counted.
func TestQueueBound(t *testing.T) {
	gate := make(chan struct{})
	fake := trackingtest.NewWandB(t, testKey)
	spec, _, out := testSpec(t, t.TempDir(), WandB)
	spec.WandB = WandBSettings{APIKey: testKey, BaseURL: fake.URL}
	spec.QueueRows = 10
	set, err := openReady(spec)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	fake.Intercept = func(w http.ResponseWriter, r *http.Request) bool {
		once.Do(func() { <-gate })
		return false
	}
	set.Log(rows(1, 1)[0]) // held by the gate
	time.Sleep(50 * time.Millisecond)
	logAll(set, rows(2, 30))
	close(gate)
	closeSet(t, set, Finished)
	r := fake.Runs()[0]
	if got := historySteps(r); len(got) != 11 || got[0] != 1 || got[1] != 21 || got[10] != 30 {
		t.Errorf("steps %v, want 1 and 21-30", got)
	}
	if !strings.Contains(out.all(), "19 rows dropped") {
		t.Errorf("lines:\n%s", out.all())
	}
}
