package rollout

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// The two retry layers multiply and the final error says by how much; an
// answer the server will give again is not retried at either layer.
func TestRetryLayersCountRequests(t *testing.T) {
	cases := []struct {
		name         string
		status       int
		wantRequests int64 // for 2 episodes, max_attempts 2, retry_limit 3
		wantMsg      string
	}{
		{"server error", 500, 12, "6 requests to the server in all: the episode was run 3 times, workflow.retry_limit=3"},
		{"rate limited", 429, 12, "6 requests to the server in all"},
		{"bad request", 400, 2, "not run again: the server gives this answer to every try"},
		{"not found", 404, 2, "not run again"},
		{"unprocessable", 422, 2, "not run again"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				fmt.Fprintf(w, `{"error":{"message":"the server says no (%d)","type":"BadRequestError","param":null,"code":%d}}`, tc.status, tc.status)
			}))
			defer srv.Close()
			c := newTestClient(t, Options{Endpoints: []string{srv.URL}, Retry: RetryPolicy{MaxAttempts: 2}, EjectAfter: 100})
			eng, err := NewEngine(func() (Workflow, error) { return chatWorkflow{s: c, turns: 1}, nil }, EngineOptions{RetryLimit: 3, NParallel: 1})
			if err != nil {
				t.Fatal(err)
			}
			tasks := []episode.Task{{"question": "a"}, {"question": "b"}}
			eps, err := eng.Run(context.Background(), tasks)
			if err != nil {
				t.Fatal(err)
			}
			if got := hits.Load(); got != tc.wantRequests {
				t.Errorf("the server saw %d requests, want %d", got, tc.wantRequests)
			}
			for _, ep := range eps {
				if ep.TerminationReason != episode.TerminationError || !strings.Contains(ep.Error, tc.wantMsg) || !strings.Contains(ep.Error, "the server says no") {
					t.Errorf("episode %s ended %s: %q, want an error saying %q and the server's message", ep.ID, ep.TerminationReason, ep.Error, tc.wantMsg)
				}
			}
		})
	}
}
