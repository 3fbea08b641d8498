package rollout

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A plain OpenAI-compatible API has no /health: Check must accept its 404
// and still check /v1/models, while a 503 on /health stays "not ready".
func TestCheckWithoutHealthEndpoint(t *testing.T) {
	cases := []struct {
		name   string
		health int // 0: no /health route (404)
		model  string
		want   string // "" for success
	}{
		{"no /health", 0, "gpt-test", ""},
		{"no /health, wrong model", 0, "other", `serves "other", not "gpt-test"`},
		{"loading", http.StatusServiceUnavailable, "gpt-test", "/health answered 503"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			if tc.health != 0 {
				mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tc.health) })
			}
			mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
				w.Write([]byte(`{"object":"list","data":[{"id":"` + tc.model + `","object":"model"}]}`))
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			c, err := NewClient(Options{Endpoints: []string{srv.URL + "/v1"}, Model: "gpt-test"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = c.Check(context.Background())
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
