package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rllm gateway in front of the embedded policy: a session is created
// with the admin key the gateway wrote, called with its key, its trace
// read back and deleted; without the admin key nobody manages sessions.
func TestGatewayRecordsASession(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &syncBuffer{}
	addrc := make(chan string, 1)
	keyFile := filepath.Join(t.TempDir(), "keys", "admin.key")
	opts := &gatewayOptions{host: "127.0.0.1", port: 0, modelName: "policy", maxCalls: 8, maxBodyMB: 1, maxSessions: 4, adminKeyFile: keyFile,
		ready: func(a string) { addrc <- a },
		args:  []string{"backend.local.d_model=16", "backend.local.heads=2", "backend.local.layers=1", "backend.local.context=64", "rollout.max_tokens=4"}}
	done := make(chan error, 1)
	go func() { done <- runGateway(ctx, testApp(io.Discard, stderr), opts) }()
	var base string
	select {
	case addr := <-addrc:
		base = "http://" + addr
	case err := <-done:
		t.Fatalf("gateway ended early: %v (%s)", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not start")
	}
	do := func(method, path, key, body string) (int, map[string]any, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		json.Unmarshal(b, &out)
		return resp.StatusCode, out, string(b)
	}
	b, err := os.ReadFile(keyFile)
	st, serr := os.Stat(keyFile)
	if err != nil || serr != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the admin key file: %v %v %v", err, serr, st)
	}
	admin := strings.TrimSpace(string(b))
	if len(admin) < 32 || strings.Contains(stderr.String(), admin) || !strings.Contains(stderr.String(), "admin key written to "+keyFile) {
		t.Fatalf("key %q; stderr:\n%s", admin, stderr.String())
	}
	if code, _, _ := do("POST", "/sessions", "", `{}`); code != 401 {
		t.Fatalf("creating a session without the admin key: %d", code)
	}
	code, s, raw := do("POST", "/sessions", admin, `{"session_id":"ep-1","sampling_params":{"temperature":0.5,"max_tokens":3}}`)
	if code != 200 {
		t.Fatalf("create: %d %s", code, raw)
	}
	key := s["api_key"].(string)
	if code, _, raw := do("POST", "/sessions/ep-1/v1/chat/completions", key, `{"model":"x","messages":[{"role":"user","content":"3+4="}]}`); code != 200 {
		t.Fatalf("call: %d %s", code, raw)
	}
	if code, _, _ := do("POST", "/sessions/ep-1/v1/chat/completions", "", `{"messages":[{"role":"user","content":"3+4="}]}`); code != 401 {
		t.Fatalf("a call without the key: %d", code)
	}
	for _, tok := range []string{"", "sk-guess"} {
		for _, r := range [][2]string{{"GET", "/sessions"}, {"GET", "/sessions/ep-1"}, {"GET", "/sessions/ep-1/traces"}, {"DELETE", "/sessions/ep-1"}} {
			if code, _, _ := do(r[0], r[1], tok, ""); code != 401 {
				t.Errorf("%s %s with token %q: %d, want 401", r[0], r[1], tok, code)
			}
		}
	}
	if code, _, _ := do("DELETE", "/sessions/ep-1", key, ""); code != 401 {
		t.Errorf("a session deleting itself: %d, want 401", code)
	}
	if code, _, _ := do("GET", "/sessions/ep-1/traces", key, ""); code != 200 {
		t.Errorf("a session reading its own traces: %d", code)
	}
	code, _, raw = do("GET", "/sessions/ep-1/traces", admin, "")
	var traces []struct {
		PromptIDs     []int     `json:"prompt_token_ids"`
		CompletionIDs []int     `json:"completion_token_ids"`
		Logprobs      []float64 `json:"logprobs"`
		WeightVersion string    `json:"weight_version"`
	}
	if err := json.Unmarshal([]byte(raw), &traces); err != nil || code != 200 || len(traces) != 1 {
		t.Fatalf("traces: %d %s", code, raw)
	}
	tr := traces[0]
	if len(tr.PromptIDs) == 0 || len(tr.CompletionIDs) == 0 || len(tr.CompletionIDs) > 3 || len(tr.Logprobs) != len(tr.CompletionIDs) || tr.WeightVersion == "" {
		t.Fatalf("trace %+v", tr)
	}
	if code, _, _ := do("DELETE", "/sessions/ep-1", admin, ""); code != 200 {
		t.Fatal("delete")
	}
	if code, _, _ := do("POST", "/sessions/ep-1/v1/chat/completions", key, `{"messages":[{"role":"user","content":"x"}]}`); code != 404 {
		t.Fatalf("a call after DELETE: %d", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("gateway returned %v after cancel", err)
	}
	if _, err := os.Stat(keyFile); !os.IsNotExist(err) {
		t.Errorf("the admin key file outlived the gateway: %v", err)
	}
}

// rllm gateway --output json keeps the CLI's contract: every stderr line
// is a JSON object, its start line included.
func TestGatewayJSONLines(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &syncBuffer{}
	stderr.onLine = func(s string) {
		if strings.Contains(s, "gateway serving") {
			cancel()
		}
	}
	a := testApp(io.Discard, stderr)
	args := []string{"gateway", "--port", "0", "--output", "json", "--admin-key-file", filepath.Join(t.TempDir(), "admin.key"), "backend.local.d_model=16", "backend.local.heads=2", "backend.local.layers=1", "backend.local.context=64"}
	if code := a.Run(ctx, args); code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if !strings.Contains(stderr.String(), "gateway serving") {
		t.Fatalf("no start line:\n%s", stderr.String())
	}
	for _, line := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Errorf("stderr line is not a JSON object: %q", line)
		}
	}
}
