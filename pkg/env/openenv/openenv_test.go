package openenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// fakeServer speaks OpenEnv's /ws frames for a counting game: reset gives
// {"count": 0, "echo_seed": seed}, step {"message": m} adds len(m) and is
// done at 10 with reward 1. Messages "close" (drop the socket), "error"
// (EXECUTION_ERROR frame) and "sleep" (no answer) misbehave. At most
// capacity episodes run at once; beyond that reset gets CAPACITY_REACHED.
type fakeServer struct {
	capacity int32
	active   atomic.Int32
	resets   atomic.Int32
	lastTask sync.Map // seed → task
}

func (f *fakeServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"status":"healthy"}`)
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := r.Context()
		send := func(typ string, data any) {
			b, _ := json.Marshal(map[string]any{"type": typ, "data": data})
			c.Write(ctx, websocket.MessageText, b)
		}
		count, admitted := 0, false
		defer func() {
			if admitted {
				f.active.Add(-1)
			}
		}()
		for {
			_, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			var fr struct {
				Type string         `json:"type"`
				Data map[string]any `json:"data"`
			}
			if json.Unmarshal(msg, &fr) != nil {
				send("error", map[string]any{"message": "bad json", "code": "INVALID_JSON"})
				continue
			}
			switch fr.Type {
			case "reset":
				if !admitted {
					if f.capacity > 0 && f.active.Add(1) > f.capacity {
						f.active.Add(-1)
						send("error", map[string]any{"message": "server full", "code": "CAPACITY_REACHED"})
						continue
					}
					admitted = true
				}
				f.resets.Add(1)
				f.lastTask.Store(fr.Data["seed"], fr.Data["task"])
				count = 0
				send("observation", map[string]any{"observation": map[string]any{"count": 0, "echo_seed": fr.Data["seed"], "text": "count to 10"}, "reward": nil, "done": false})
			case "step":
				m, ok := fr.Data["message"].(string)
				if !ok || len(fr.Data) != 1 {
					send("error", map[string]any{"message": "extra or missing fields", "code": "VALIDATION_ERROR"})
					continue
				}
				switch m {
				case "close":
					c.Close(websocket.StatusInternalError, "boom")
					return
				case "error":
					send("error", map[string]any{"message": "the sandbox died", "code": "EXECUTION_ERROR"})
					continue
				case "sleep":
					time.Sleep(time.Second)
					continue
				}
				count += len(m)
				done := count >= 10
				var reward any = 0.0
				if done {
					reward = true
				}
				send("observation", map[string]any{"observation": map[string]any{"count": count}, "reward": reward, "done": done})
			case "close":
				return
			}
		}
	})
	return mux
}

func params(urls ...string) Params {
	return Params{URL: urls, ActionField: "message", StepTimeoutS: 0.5, ConnectTimeoutS: 2}
}

func TestEpisode(t *testing.T) {
	f := &fakeServer{}
	ts := httptest.NewServer(f.handler())
	defer ts.Close()
	c, err := NewClient(params(ts.URL))
	if err != nil {
		t.Fatal(err)
	}
	e := &Episode{c: c, task: episode.Task{"seed": 42, "question": "q"}}
	defer e.Close()
	ctx := context.Background()
	obs, _, err := e.Reset(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o := obs.(map[string]any); o["echo_seed"] != 42.0 || o["text"] != "count to 10" {
		t.Fatalf("reset %v", obs)
	}
	task, _ := f.lastTask.Load(42.0)
	if task.(map[string]any)["question"] != "q" {
		t.Fatalf("task %v", task)
	}
	res, err := e.Step(ctx, episode.Action{Content: "abcde"})
	if err != nil || res.Done || res.Reward != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	res, err = e.Step(ctx, episode.Action{Content: "fghij"})
	if err != nil || !res.Done || res.Reward != 1 {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestJSONActions(t *testing.T) {
	ts := httptest.NewServer((&fakeServer{}).handler())
	defer ts.Close()
	p := params(ts.URL)
	p.ActionField = ""
	c, _ := NewClient(p)
	e := &Episode{c: c, task: episode.Task{}}
	defer e.Close()
	if _, _, err := e.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := e.Step(context.Background(), episode.Action{Content: `{"message": "1234567890"}`})
	if err != nil || !res.Done {
		t.Fatalf("%+v %v", res, err)
	}
	// A reply that is not a JSON object is the model's format error.
	e2 := &Episode{c: c, task: episode.Task{}}
	defer e2.Close()
	e2.Reset(context.Background())
	res, err = e2.Step(context.Background(), episode.Action{Content: "move left"})
	if err != nil || res.Done || res.Info["format_error"] == nil || res.Observation == nil {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestFaults(t *testing.T) {
	ts := httptest.NewServer((&fakeServer{}).handler())
	defer ts.Close()
	tests := []struct {
		action  string
		timeout bool
		want    string
	}{
		{"close", false, "closed the connection while rllm was waiting for the answer to step (status 1011)"},
		{"error", false, "reported an error for step: EXECUTION_ERROR: the sandbox died"},
		{"sleep", true, "timed out waiting for the answer to step after 500ms"},
		{"", false, "VALIDATION_ERROR: extra or missing fields"},
	}
	for _, tt := range tests {
		c, _ := NewClient(params(ts.URL))
		e := &Episode{c: c, task: episode.Task{}}
		if _, _, err := e.Reset(context.Background()); err != nil {
			t.Fatal(err)
		}
		a := episode.Action{Content: tt.action}
		if tt.action == "" {
			a.Fields = map[string]any{"message": "x", "extra": 1}
		}
		_, err := e.Step(context.Background(), a)
		e.Close()
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "OpenEnv server "+ts.URL) || errors.Is(err, env.ErrTimeout) != tt.timeout {
			t.Errorf("%q: %v, want %q", tt.action, err, tt.want)
		}
	}
}

func TestHealthAndRefusal(t *testing.T) {
	dead := httptest.NewServer(nil)
	deadURL := dead.URL
	dead.Close()
	c, _ := NewClient(params(deadURL))
	_, _, err := (&Episode{c: c, task: episode.Task{}}).Reset(context.Background())
	if err == nil || !strings.Contains(err.Error(), "OpenEnv server "+deadURL+" does not answer GET /health") || !usererr.Is(err) {
		t.Fatalf("err %v", err)
	}
	notOpenEnv := httptest.NewServer(http.NotFoundHandler())
	defer notOpenEnv.Close()
	c, _ = NewClient(params(notOpenEnv.URL))
	_, _, err = (&Episode{c: c, task: episode.Task{}}).Reset(context.Background())
	if err == nil || !strings.Contains(err.Error(), "answers GET /health with 404 Not Found") {
		t.Fatalf("err %v", err)
	}
	for _, bad := range [][]string{nil, {"ftp://x"}, {"localhost:8000"}} {
		if _, _, err := env.Resolve("openenv", map[string]any{"url": bad}); err == nil || !usererr.Is(err) {
			t.Errorf("url %v: %v", bad, err)
		}
	}
	if _, _, err := env.Resolve("openenv", map[string]any{"url": "http://a:1,http://b:2"}); err != nil {
		t.Error(err)
	}
}

func TestCapacitySpreadsAndWaits(t *testing.T) {
	a, b := &fakeServer{capacity: 1}, &fakeServer{capacity: 1}
	ta, tb := httptest.NewServer(a.handler()), httptest.NewServer(b.handler())
	defer ta.Close()
	defer tb.Close()
	c, _ := NewClient(params(ta.URL, tb.URL))
	ctx := context.Background()
	e1, e2 := &Episode{c: c, task: episode.Task{}}, &Episode{c: c, task: episode.Task{}}
	if _, _, err := e1.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e2.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if a.active.Load() != 1 || b.active.Load() != 1 {
		t.Fatalf("episodes not spread: %d %d", a.active.Load(), b.active.Load())
	}
	// Both full: a third episode waits until one ends.
	go func() {
		time.Sleep(300 * time.Millisecond)
		e1.Close()
	}()
	e3 := &Episode{c: c, task: episode.Task{}}
	if _, _, err := e3.Reset(ctx); err != nil {
		t.Fatalf("third episode: %v", err)
	}
	e3.Close()
	// Nothing frees up: the wait is bounded by connect_timeout_s.
	e1 = &Episode{c: c, task: episode.Task{}}
	if _, _, err := e1.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	c.p.ConnectTimeoutS = 0.3
	_, _, err := (&Episode{c: c, task: episode.Task{}}).Reset(ctx)
	if err == nil || !strings.Contains(err.Error(), "no server had room for the episode within env.args.connect_timeout_s (0.3s)") || !errors.Is(err, ErrCapacity) {
		t.Fatalf("err %v", err)
	}
	e1.Close()
	e2.Close()
}

// BenchmarkStep is the per-step overhead of an OpenEnv episode against an
// in-test WebSocket server (loopback, one connection).
func BenchmarkStep(b *testing.B) {
	ts := httptest.NewServer((&fakeServer{}).handler())
	defer ts.Close()
	c, _ := NewClient(Params{URL: []string{ts.URL}, ActionField: "message", StepTimeoutS: 10, ConnectTimeoutS: 10})
	e := &Episode{c: c, task: episode.Task{}}
	defer e.Close()
	if _, _, err := e.Reset(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.Step(context.Background(), episode.Action{Content: ""}); err != nil {
			b.Fatal(err)
		}
	}
}

// A server still booting (503 on /health) is waited for, and neither a
// failed check nor an episode cancelled mid-check fails later episodes.
func TestHealthRecovers(t *testing.T) {
	f := &fakeServer{}
	inner := f.handler()
	var healthCalls atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && healthCalls.Add(1) <= 3 {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	defer ts.Close()
	p := params(ts.URL)
	p.ConnectTimeoutS = 60
	c, _ := NewClient(p)
	// The first episode is cancelled while the server boots.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := (&Episode{c: c, task: episode.Task{}}).Reset(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled episode: %v", err)
	}
	// The next one waits for the server to come up.
	e := &Episode{c: c, task: episode.Task{}}
	defer e.Close()
	if _, _, err := e.Reset(context.Background()); err != nil {
		t.Fatalf("episode after the server booted: %v", err)
	}
	if n := healthCalls.Load(); n < 4 {
		t.Fatalf("%d /health calls", n)
	}
}

// lineHandler hands each log record's message to a channel.
type lineHandler struct{ lines chan string }

func (h lineHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h lineHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.lines <- r.Message:
	default:
	}
	return nil
}
func (h lineHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h lineHandler) WithGroup(string) slog.Handler      { return h }

// A URL where nothing listens is waited for (it may be a server still
// booting), but the wait is said at once: which server, why, for how
// long and what to do, not only "0/1 episodes done" for five minutes.
func TestWaitForAbsentServerIsSaid(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	p := params(url)
	p.ConnectTimeoutS = 300
	c, _ := NewClient(p)
	lines := make(chan string, 4)
	c.Log = slog.New(lineHandler{lines})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := (&Episode{c: c, task: episode.Task{}}).Reset(ctx)
		done <- err
	}()
	select {
	case line := <-lines:
		for _, want := range []string{"OpenEnv server " + url + " does not answer GET /health", "env.args.connect_timeout_s (5m0s)", "start it", "env.args.url"} {
			if !strings.Contains(line, want) {
				t.Errorf("line %q lacks %q", line, want)
			}
		}
	case err := <-done:
		t.Fatalf("the wait ended (%v) without a line saying what it waited for", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}
