package view

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/episodestore"
)

func newTestServer(t *testing.T, opts Options, dirs ...string) *httptest.Server {
	t.Helper()
	s, err := New(dirs, opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

func get(t *testing.T, ts *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(ts.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func getJSON(t *testing.T, ts *httptest.Server, path string, v any) {
	t.Helper()
	code, body := get(t, ts, path)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

type runsAnswer struct {
	Runs []runSummary `json:"runs"`
}

func TestRunsAndStatus(t *testing.T) {
	root := t.TempDir()
	fixtureRun(t, filepath.Join(root, "a"), 4, 8, 1e-3)
	fixtureRun(t, filepath.Join(root, "b"), 4, 8, 3e-3)
	os.Remove(filepath.Join(root, "b", "latest_checkpointed_iteration.txt")) // no checkpoint of its last step
	old := time.Now().Add(-time.Hour)
	for _, f := range []string{"a/metrics.jsonl", "b/metrics.jsonl", "a/episodes/train", "b/episodes/train", "a/episodes/train/000004.jsonl.gz"} {
		os.Chtimes(filepath.Join(root, f), old, old)
	}
	fixtureEval(t, filepath.Join(root, "eval.jsonl"))
	os.MkdirAll(filepath.Join(root, "notarun", "deeper"), 0o755)
	os.WriteFile(filepath.Join(root, "notarun", "data.jsonl"), []byte(`{"question":"1+1","answer":"2"}`+"\n"), 0o644)
	ts := newTestServer(t, Options{}, root)
	var got runsAnswer
	getJSON(t, ts, "/api/runs", &got)
	byName := map[string]runSummary{}
	for _, r := range got.Runs {
		byName[strings.TrimPrefix(r.Name, filepath.Base(root)+"/")] = r
	}
	if len(got.Runs) != 3 {
		t.Fatalf("runs %+v, want a, b and eval.jsonl (a dataset is no run)", got.Runs)
	}
	a, b, ev := byName["a"], byName["b"], byName["eval.jsonl"]
	if a.Status != statusFinished || a.Steps != 4 || a.TotalSteps != 4 || a.BestVal == nil || a.BestVal.Step != 4 {
		t.Errorf("run a: %+v", a)
	}
	if b.Status != statusCrashed {
		t.Errorf("run b (no checkpoint, not written for an hour): status %s", b.Status)
	}
	if ev.Kind != "eval" {
		t.Errorf("eval file: %+v", ev)
	}
	if a.Config["actor.optim.lr"] != "0.001" || b.Config["actor.optim.lr"] != "0.003" {
		t.Errorf("config diffs %v / %v", a.Config, b.Config)
	}
	if _, ok := a.Config["env.name"]; ok {
		t.Error("a key both runs share is shown as a difference")
	}
	// A run written a moment ago is training.
	now := time.Now()
	os.Chtimes(filepath.Join(root, "b", "metrics.jsonl"), now, now)
	getJSON(t, ts, "/api/runs", &got)
	for _, r := range got.Runs {
		if strings.HasSuffix(r.Name, "/b") && r.Status != statusTraining {
			t.Errorf("run b just written: status %s", r.Status)
		}
	}
}

func TestMetricsNaNAndCut(t *testing.T) {
	root := t.TempDir()
	fixtureRun(t, filepath.Join(root, "a"), 3, 2, 1e-3)
	ts := newTestServer(t, Options{}, root)
	var m struct {
		Rows []map[string]*float64 `json:"rows"`
		Last int                   `json:"last"`
	}
	getJSON(t, ts, "/api/metrics?run=0:a", &m)
	if len(m.Rows) != 3 || m.Last != 3 {
		t.Fatalf("rows %d, last %d; want 3 (the cut line skipped)", len(m.Rows), m.Last)
	}
	if v, ok := m.Rows[1]["actor/grad_norm"]; !ok || v != nil {
		t.Errorf("a NaN metric is %v, want null", v)
	}
	getJSON(t, ts, "/api/metrics?run=0:a&since=2", &m)
	if len(m.Rows) != 1 || *m.Rows[0]["step"] != 3 {
		t.Errorf("since=2: %v", m.Rows)
	}
}

func TestEpisodesFilterAndOpen(t *testing.T) {
	root := t.TempDir()
	fixtureRun(t, filepath.Join(root, "a"), 2, 40, 1e-3)
	ts := newTestServer(t, Options{}, root)
	var list struct {
		Total, Matched int
		Episodes       []listed
	}
	getJSON(t, ts, "/api/episodes?run=0:a&step=2&min_reward=1", &list)
	if list.Total != 40 || list.Matched != 10 || len(list.Episodes) != 10 {
		t.Fatalf("reward ≥ 1: %d of %d, %d listed; want 10 of 40", list.Matched, list.Total, len(list.Episodes))
	}
	getJSON(t, ts, "/api/episodes?run=0:a&step=2&term=max_response_length_exceeded&source=gsm8k&limit=2&offset=1", &list)
	if list.Matched != 5 || len(list.Episodes) != 2 || list.Episodes[0].I != 11 {
		t.Errorf("term+source page: %+v", list)
	}
	var ep struct {
		ID       string `json:"id"`
		Response tokens `json:"response"`
		Samples  []shownSample
	}
	getJSON(t, ts, "/api/episode?run=0:a&step=2&i=3", &ep)
	want := fixtureRecord(2, 3)
	if ep.ID != want.ID || len(ep.Response.IDs) != 5 || ep.Response.IDs[0] != want.Samples[0].ResponseIDs[0] || ep.Response.Mask[2] != 0 || ep.Response.LP[4] == nil || *ep.Response.LP[4] != episodestore.NegInf {
		t.Errorf("episode 3: %+v", ep)
	}
	if code, _ := get(t, ts, "/api/episode?run=0:a&step=2&i=40"); code != 404 {
		t.Errorf("episode past the end: %d", code)
	}
	for _, bad := range []string{"step=-1", "step=x", "limit=100000", "min_reward=nan", "phase=../../etc"} {
		if code, _ := get(t, ts, "/api/episodes?run=0:a&"+bad); code != 400 {
			t.Errorf("%s: %d, want 400", bad, code)
		}
	}
	var task struct {
		Hits []struct {
			Step   int    `json:"step"`
			Answer string `json:"answer"`
		} `json:"hits"`
	}
	getJSON(t, ts, "/api/task?run=0:a&task=arith-1", &task)
	if len(task.Hits) != 8 || task.Hits[0].Step != 1 || task.Hits[7].Step != 2 || !strings.Contains(task.Hits[0].Answer, "at step 1") {
		t.Errorf("task across steps: %+v", task.Hits)
	}
}

func TestPassAtK(t *testing.T) {
	root := t.TempDir()
	fixtureEval(t, filepath.Join(root, "eval.jsonl.gz"))
	ts := newTestServer(t, Options{}, root)
	var p struct {
		K   int `json:"k"`
		All struct {
			PassAt1 float64 `json:"pass_at_1"`
			PassAtK float64 `json:"pass_at_k"`
			Tasks   int
		} `json:"all"`
	}
	getJSON(t, ts, "/api/passk?run=0:eval.jsonl.gz&phase=eval", &p)
	// Tasks solved 0, 1 and 2 times of 4: pass@1 = (0 + .25 + .5)/3, pass@4 = 2/3.
	if p.K != 4 || p.All.Tasks != 3 || abs(p.All.PassAt1-0.25) > 1e-9 || abs(p.All.PassAtK-2.0/3) > 1e-9 {
		t.Errorf("pass@k %+v", p)
	}
}

func abs(x float64) float64 { return max(x, -x) }

// Nothing outside the folders given is served: not by path, not by an
// encoded path, not through a symlink.
func TestNothingOutside(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("SECRET"), 0o644)
	fixtureRun(t, filepath.Join(outside, "other"), 2, 4, 1e-3)
	fixtureRun(t, filepath.Join(root, "a"), 2, 4, 1e-3)
	os.Symlink(filepath.Join(outside, "other"), filepath.Join(root, "linked-run"))
	// A run whose step file is a symlink to a file outside.
	data := episodestore.DataPath(episodestore.PhaseDir(filepath.Join(root, "a"), "train"), 2)
	os.Remove(data)
	os.Symlink(episodestore.DataPath(episodestore.PhaseDir(filepath.Join(outside, "other"), "train"), 2), data)
	ts := newTestServer(t, Options{}, root)
	var got runsAnswer
	getJSON(t, ts, "/api/runs", &got)
	for _, r := range got.Runs {
		if strings.Contains(r.Name, "linked") {
			t.Errorf("a symlinked run outside the folder is listed: %s", r.Name)
		}
	}
	for _, p := range []string{
		"/assets/../server.go", "/assets/%2e%2e/server.go", "/assets/%2e%2e%2fserver.go", "/..%2f..%2f" + url.PathEscape(filepath.Join(outside, "secret.txt")),
		"/assets/..%5cserver.go", "/api/metrics?run=0:../" + filepath.Base(outside) + "/other", "/api/metrics?run=" + url.QueryEscape(filepath.Join(outside, "other")),
		"/api/episodes?run=0:a&step=2", "/api/episode?run=0:a&step=2&i=0", "/assets/.%2e/.%2e/etc/passwd", "/" + filepath.Join(outside, "secret.txt"),
	} {
		code, body := get(t, ts, p)
		if code == 200 || strings.Contains(body, "SECRET") || strings.Contains(body, "package view") || strings.Contains(body, "answer 0 at step 2") {
			t.Errorf("GET %s: %d %.200s", p, code, body)
		}
	}
	// The page and its assets are served.
	for _, p := range []string{"/", "/assets/app.js", "/assets/uPlot.iife.min.js", "/assets/uPlot.LICENSE"} {
		if code, _ := get(t, ts, p); code != 200 {
			t.Errorf("GET %s: %d", p, code)
		}
	}
}

func TestSecretsHidden(t *testing.T) {
	root := t.TempDir()
	fixtureRun(t, filepath.Join(root, "a"), 1, 1, 1e-3)
	fixtureRun(t, filepath.Join(root, "b"), 1, 1, 1e-3)
	b, _ := os.ReadFile(filepath.Join(root, "b", "config.json"))
	os.WriteFile(filepath.Join(root, "b", "config.json"), []byte(strings.Replace(string(b), "sk-secret", "sk-other", 1)), 0o644)
	ts := newTestServer(t, Options{}, root)
	_, body := get(t, ts, "/api/runs")
	if strings.Contains(body, "sk-") || !strings.Contains(body, "workflow.args.api_key") {
		t.Errorf("runs answer shows a secret or hides the key that differs: %s", body)
	}
}

func TestReadOnlyTokenAndHost(t *testing.T) {
	root := t.TempDir()
	ts := newTestServer(t, Options{}, root)
	resp, _ := http.Post(ts.URL+"/api/runs", "application/json", strings.NewReader("{}"))
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/api/runs", nil)
	req.Host = "evil.example:7860" // DNS rebinding
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a foreign Host: %d", resp.StatusCode)
	}
	tok := newTestServer(t, Options{Token: "s3cret"}, root)
	if code, _ := get(t, tok, "/api/runs"); code != http.StatusUnauthorized {
		t.Errorf("no token: %d", code)
	}
	if code, _ := get(t, tok, "/api/runs?token=wrong"); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d", code)
	}
	resp, err := http.Get(tok.URL + "/?token=s3cret")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the token: %v %v", resp, err)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == tokenCookie {
			cookie = c
		}
	}
	req, _ = http.NewRequest("GET", tok.URL+"/api/runs", nil)
	req.AddCookie(cookie)
	if resp, _ := http.DefaultClient.Do(req); resp.StatusCode != 200 {
		t.Errorf("the token's cookie: %d", resp.StatusCode)
	}
}

// An episode with a 1M-token response opens in bounded windows.
func TestHugeEpisode(t *testing.T) {
	root := t.TempDir()
	dir := episodestore.PhaseDir(filepath.Join(root, "a"), "train")
	n := 1_000_000
	ids, lps, mask := make([]int, n), make([]float64, n), make([]int8, n)
	for i := range ids {
		ids[i], lps[i], mask[i] = i%50000, -0.125, 1
	}
	rec := &episodestore.Record{Step: 1, Phase: "train", Episode: episode.Episode{ID: "big:0", TerminationReason: episode.TerminationMaxResponseLength,
		Trajectories: []episode.Trajectory{{Steps: []episode.Step{{ChatCompletions: []episode.Message{{Role: "assistant", Content: strings.Repeat("x", 4<<20)}}}}}}},
		Samples: []episodestore.Sample{{PromptIDs: []int{1}, ResponseIDs: ids, Logprobs: lps, LossMask: mask, Termination: episode.TerminationMaxResponseLength}}}
	f, _ := episodestore.Create(dir, 1)
	if _, err := f.Write(rec); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ts := newTestServer(t, Options{}, root)
	code, body := get(t, ts, "/api/episode?run=0:a&step=1&i=0&tok_offset=999000&tok_limit=5000")
	if code != 200 || len(body) > 2<<20 {
		t.Fatalf("%d, %d bytes", code, len(body))
	}
	var ep struct {
		Response  tokens        `json:"response"`
		Samples   []shownSample `json:"samples"`
		Truncated bool          `json:"truncated"`
	}
	json.Unmarshal([]byte(body), &ep)
	if ep.Response.Offset != 999000 || len(ep.Response.IDs) != 1000 || ep.Samples[0].ResponseLen != n || !ep.Truncated {
		t.Errorf("window at %d of %d tokens, length %d, truncated %v", ep.Response.Offset, len(ep.Response.IDs), ep.Samples[0].ResponseLen, ep.Truncated)
	}
}

// A step being written (the last record cut) lists what is complete.
func TestRunBeingWritten(t *testing.T) {
	root := t.TempDir()
	fixtureRun(t, filepath.Join(root, "a"), 1, 6, 1e-3)
	data := episodestore.DataPath(episodestore.PhaseDir(filepath.Join(root, "a"), "train"), 1)
	b, _ := os.ReadFile(data)
	os.WriteFile(data, b[:len(b)-40], 0o644)
	ts := newTestServer(t, Options{}, root)
	var list struct{ Total int }
	getJSON(t, ts, "/api/episodes?run=0:a&step=1", &list)
	if list.Total != 5 {
		t.Errorf("a cut step lists %d episodes, want the 5 complete", list.Total)
	}
	// It grows: the cache sees the new size.
	writeFixtureStep(t, filepath.Join(root, "b"), 1, 1)
	os.WriteFile(data, b, 0o644)
	getJSON(t, ts, "/api/episodes?run=0:a&step=1", &list)
	if list.Total != 6 {
		t.Errorf("after the step was written: %d episodes, want 6", list.Total)
	}
}

func TestPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	_, err = Listen("127.0.0.1", port)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "port "+strconv.Itoa(port)) || !strings.Contains(err.Error(), "--port") {
		t.Errorf("a port in use: %v", err)
	}
}

func TestNotAFolder(t *testing.T) {
	f := filepath.Join(t.TempDir(), "x")
	os.WriteFile(f, nil, 0o644)
	for _, d := range []string{f, filepath.Join(f, "missing")} {
		if _, err := New([]string{d}, Options{}); err == nil {
			t.Errorf("New(%s) accepted", d)
		}
	}
}
