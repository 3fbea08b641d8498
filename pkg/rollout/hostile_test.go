package rollout

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// A server that misbehaves, by accident or on purpose, ends in an error
// that says what it did; it never steers the client elsewhere, stalls it
// past its bounds or makes it hold more memory than its caps.
func TestHostileServers(t *testing.T) {
	other := fakevllm.New(fakevllm.Config{Model: "fake-model"})
	defer other.Close()
	tests := []struct {
		name  string
		cfg   fakevllm.Config
		fault fakevllm.Fault
		opts  Options
		want  []string
	}{
		{"200 with an error object", fakevllm.Config{}, fakevllm.FaultErrorOK, Options{},
			[]string{"answered 200 with an error instead of choices: fake: model overloaded (type overloaded_error)"}},
		{"redirect to another host", fakevllm.Config{RedirectTo: other.URL}, fakevllm.FaultRedirect, Options{APIKey: "k"},
			[]string{"302", "a redirect from http://127.0.0.1", "/v1/chat/completions to " + other.URL + "/v1/chat/completions, on another host"}},
		{"redirect loop on the same host", fakevllm.Config{}, fakevllm.FaultRedirect, Options{},
			[]string{"302", "would turn the POST into a GET"}},
		{"huge body", fakevllm.Config{HugeBody: 8 << 20}, fakevllm.FaultHugeBody, Options{MaxResponseBytes: 1 << 20},
			[]string{"the body is larger than the limit of 1048576 bytes"}},
		{"gzip bomb", fakevllm.Config{HugeBody: 64 << 20}, fakevllm.FaultGzipBomb, Options{MaxResponseBytes: 1 << 20},
			[]string{"the body is larger than the limit of 1048576 bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakevllm.New(tt.cfg)
			defer s.Close()
			tt.opts.Endpoints = []string{s.URL}
			c := newTestClient(t, tt.opts)
			s.InjectNext(tt.fault)
			before := other.Stats().Requests
			_, err := c.Sample(context.Background(), chatReq("hi"))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if got := other.Stats().Requests; got != before {
				t.Errorf("the other host received %d requests", got-before)
			}
			if st := c.Stats(); st.Attempts != 1 {
				t.Errorf("%d attempts, want 1 (not retryable)", st.Attempts)
			}
		})
	}
}

// A 307 on the same host keeps the POST and is followed; one to another
// host is refused even though it would keep the method.
func TestRedirectsFollowedOnlyOnTheSameHost(t *testing.T) {
	s := fakevllm.New(fakevllm.Config{})
	defer s.Close()
	var hits atomic.Int64
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer foreign.Close()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/old/v1/chat/completions":
			http.Redirect(w, r, "/new/v1/chat/completions", http.StatusTemporaryRedirect)
		case "/new/v1/chat/completions":
			http.Redirect(w, r, s.URL+"/v1/chat/completions", http.StatusTemporaryRedirect)
		case "/away/v1/chat/completions":
			http.Redirect(w, r, foreign.URL+"/v1/chat/completions", http.StatusPermanentRedirect)
		case "/loop/v1/chat/completions":
			http.Redirect(w, r, r.URL.Path, http.StatusTemporaryRedirect)
		}
	}))
	defer front.Close()
	for _, tc := range []struct{ path, want string }{
		{"/old", "on another host"}, // same host once, then away
		{"/away", "to " + foreign.URL + "/v1/chat/completions, on another host"},
		{"/loop", "redirects in a loop"},
	} {
		c := newTestClient(t, Options{Endpoints: []string{front.URL + tc.path}, APIKey: "secret"})
		_, err := c.Sample(context.Background(), chatReq("hi"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.path, err, tc.want)
		}
	}
	if hits.Load() != 0 {
		t.Errorf("the foreign host received %d requests", hits.Load())
	}
}

func TestRetryAfterCappedAndReported(t *testing.T) {
	s := fakevllm.New(fakevllm.Config{RetryAfter: 99999, FaultFor: func(string, int64) fakevllm.Fault { return fakevllm.FaultRateLimit }})
	defer s.Close()
	c := newTestClient(t, Options{Endpoints: []string{s.URL}, Retry: RetryPolicy{MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
	var waits []time.Duration
	c.sleep = func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	_, err := c.Sample(context.Background(), chatReq("hi"))
	var re *RetriesExhaustedError
	if !errors.As(err, &re) || re.Attempts != 3 {
		t.Fatalf("error %v, want exhaustion after 3 attempts", err)
	}
	for _, w := range waits {
		if w > 5*time.Millisecond {
			t.Errorf("waited %v, above the 5ms cap", w)
		}
	}
	for _, want := range []string{"gave up on the request after 3 attempts (rollout.retry.max_attempts=3)", "the server asked to wait 27h46m39s", "more than rollout.retry.backoff_max_s (5ms)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// The request timeout bounds a whole attempt, the body included: a
// server that sends headers and then trickles nothing ends in a timeout.
func TestTimeoutBoundsTheBody(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"choices":[{"text":"`))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c := newTestClient(t, Options{Endpoints: []string{srv.URL}, RequestTimeout: 50 * time.Millisecond, Retry: RetryPolicy{MaxAttempts: 1}})
	_, err := c.Sample(context.Background(), chatReq("hi"))
	if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("error %v, want the attempt's deadline", err)
	}
}

// Answers that are small by nature are capped small.
func TestModelsAnswerCappedSmall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			w.Write([]byte(`{"data":[{"id":"`))
			w.Write([]byte(strings.Repeat("m", 2<<20)))
			w.Write([]byte(`"}]}`))
		}
	}))
	defer srv.Close()
	c := newTestClient(t, Options{Endpoints: []string{srv.URL}})
	err := c.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "/v1/models failed: the body is larger than the limit of 1048576 bytes") {
		t.Fatalf("error %v, want the /v1/models cap", err)
	}
}

// Memory stays near the cap however large the body: the body streams
// through the decoder instead of being buffered whole.
func TestHugeBodyMemoryBounded(t *testing.T) {
	for _, f := range []fakevllm.Fault{fakevllm.FaultHugeBody, fakevllm.FaultGzipBomb} {
		s := fakevllm.New(fakevllm.Config{HugeBody: 128 << 20})
		c := newTestClient(t, Options{Endpoints: []string{s.URL}, MaxResponseBytes: 4 << 20})
		s.InjectNext(f)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := c.Sample(context.Background(), chatReq("hi"))
		runtime.ReadMemStats(&after)
		s.Close()
		if err == nil {
			t.Fatalf("%v: no error", f)
		}
		// The server's own writes are counted too; 128 MB read whole would
		// be far above this.
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 48<<20 {
			t.Errorf("%v: allocated %d MB for a body capped at 4 MB", f, grew>>20)
		}
	}
}

func TestAPIKeyWithLineBreakRefused(t *testing.T) {
	_, err := NewClient(Options{Endpoints: []string{"http://x:1"}, Model: "m", APIKey: "abc\ndef"})
	if err == nil || !strings.Contains(err.Error(), "line break") || strings.Contains(err.Error(), "abc") || !usererr.Is(err) {
		t.Fatalf("error %v, want a usage error about the line break that does not show the key", err)
	}
}

// With the default cap, a 100 MB answer to a request of 32 tokens is
// refused after the few MB such an answer can honestly take, streamed or
// announced by its Content-Length: memory stays far below the cap.
func TestHugeBodyBoundedByMaxTokens(t *testing.T) {
	const size = 100 << 20
	announced := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(size))
		chunk := make([]byte, 64<<10)
		for n := 0; n < size; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer announced.Close()
	streamed := fakevllm.New(fakevllm.Config{HugeBody: size})
	defer streamed.Close()
	for _, tc := range []struct {
		name, url string
		fault     bool
		want      string
	}{
		{"streamed", streamed.URL, true, "the most an answer to this request's max_tokens can honestly take"},
		{"announced", announced.URL, false, "by its Content-Length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, Options{Endpoints: []string{tc.url}, Retry: RetryPolicy{MaxAttempts: 1}})
			if tc.fault {
				streamed.InjectNext(fakevllm.FaultHugeBody)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := c.Sample(context.Background(), chatReq("hi"))
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			// 32 tokens may take 1 MiB + 128 KiB; the default cap is 32 MiB.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 12<<20 {
				t.Errorf("allocated %d MB to refuse the body", grew>>20)
			}
		})
	}
}
