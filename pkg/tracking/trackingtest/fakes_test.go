package trackingtest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func post(t *testing.T, url, auth string, body any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp.StatusCode, out.String()
}

// The fake W&B refuses what W&B refuses: no credentials, file_stream
// offsets with a gap or an overlap, a _step that does not increase, a run
// that does not exist.
func TestFakeWandBRefuses(t *testing.T) {
	f := NewWandB(t, "key")
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("api:key"))
	upsert := map[string]any{"query": "mutation UpsertBucket($name: String, $project: String) { upsertBucket(input: {name: $name, modelName: $project}) { bucket { name } } }",
		"variables": map[string]any{"name": "r1", "project": "p"}}
	if code, _ := post(t, f.URL+"/graphql", "", upsert); code != http.StatusUnauthorized {
		t.Errorf("no credentials: %d", code)
	}
	if code, _ := post(t, f.URL+"/graphql", "Basic "+base64.StdEncoding.EncodeToString([]byte("api:other")), upsert); code != http.StatusUnauthorized {
		t.Errorf("wrong key: %d", code)
	}
	if code, body := post(t, f.URL+"/graphql", auth, upsert); code != 200 || strings.Contains(body, "errors") {
		t.Fatalf("upsert: %d %s", code, body)
	}
	fs := f.URL + "/files/fake-entity/p/r1/file_stream"
	line := func(step int) string {
		b, _ := json.Marshal(map[string]any{"_step": step, "_runtime": 1, "_timestamp": 1})
		return string(b)
	}
	hist := func(off int, steps ...int) map[string]any {
		var c []string
		for _, s := range steps {
			c = append(c, line(s))
		}
		return map[string]any{"files": map[string]any{"wandb-history.jsonl": map[string]any{"offset": off, "content": c}}}
	}
	for _, tc := range []struct {
		name string
		url  string
		body map[string]any
		want int
	}{
		{"first lines", fs, hist(0, 1, 2), 200},
		{"a gap", fs, hist(3, 3), 400},
		{"an overlap", fs, hist(1, 3), 400},
		{"a step that does not increase", fs, hist(2, 2), 400},
		{"the next lines", fs, hist(2, 3, 4), 200},
		{"NaN as wandb writes it", fs, map[string]any{"files": map[string]any{"wandb-summary.json": map[string]any{"offset": 0, "content": []string{`{"a":NaN,"b":-Infinity}`}}}}, 200},
		{"two summary lines", fs, map[string]any{"files": map[string]any{"wandb-summary.json": map[string]any{"offset": 0, "content": []string{"{}", "{}"}}}}, 400},
		{"uploaded without a put", fs, map[string]any{"uploaded": []string{"config.yaml"}}, 400},
		{"no such run", f.URL + "/files/fake-entity/p/nope/file_stream", hist(0, 1), 404},
	} {
		if code, body := post(t, tc.url, auth, tc.body); code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.want)
		}
	}
	if r := f.Run("fake-entity", "p", "r1"); len(r.History) != 4 || r.Summary["a"] != "NaN" {
		t.Errorf("run %+v", r)
	}
}

// The fake MLflow refuses what MLflow refuses: no token, a param changed,
// more than 100 params or 1000 metrics, a batch over 1 MB, a key outside
// MLflow's characters, a param over the length limit; a refused batch
// changes nothing.
func TestFakeMLflowRefuses(t *testing.T) {
	f := NewMLflow(t, "tok")
	auth := "Bearer tok"
	api := f.URL + "/api/2.0/mlflow/"
	if code, _ := post(t, api+"runs/create", "", map[string]any{"experiment_id": "0"}); code != http.StatusUnauthorized {
		t.Errorf("no token: %d", code)
	}
	code, body := post(t, api+"runs/create", auth, map[string]any{"experiment_id": "0", "run_name": "r"})
	if code != 200 {
		t.Fatalf("create: %d %s", code, body)
	}
	var made struct {
		Run struct {
			Info struct {
				RunID string `json:"run_id"`
			} `json:"info"`
		} `json:"run"`
	}
	json.Unmarshal([]byte(body), &made)
	id := made.Run.Info.RunID
	params := func(n int, v string) []map[string]string {
		var p []map[string]string
		for i := range n {
			p = append(p, map[string]string{"key": "p" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + string(rune('a'+i/26)), "value": v})
		}
		return p
	}
	metrics := func(n int, key string) []map[string]any {
		var m []map[string]any
		for i := range n {
			m = append(m, map[string]any{"key": key, "value": i, "timestamp": 1, "step": i})
		}
		return m
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		want string
	}{
		{"params", map[string]any{"run_id": id, "params": []map[string]string{{"key": "lr", "value": "0.1"}}}, ""},
		{"the same param again", map[string]any{"run_id": id, "params": []map[string]string{{"key": "lr", "value": "0.1"}}}, ""},
		{"a param changed", map[string]any{"run_id": id, "params": []map[string]string{{"key": "lr", "value": "0.2"}}}, "Changing param values is not allowed"},
		{"101 params", map[string]any{"run_id": id, "params": params(101, "v")}, "at most 100 params"},
		{"1001 metrics", map[string]any{"run_id": id, "metrics": metrics(1001, "m")}, "at most 1000 metrics"},
		{"a key MLflow refuses", map[string]any{"run_id": id, "metrics": metrics(1, "val/pass@1")}, "Invalid metric name"},
		{"a long param", map[string]any{"run_id": id, "params": []map[string]string{{"key": "long", "value": strings.Repeat("a", 501)}}}, "exceeded length limit"},
		{"over 1 MB", map[string]any{"run_id": id, "tags": []map[string]string{{"key": "t", "value": strings.Repeat("a", 1<<20)}}}, "at most 1048576 bytes"},
		{"NaN as a string", map[string]any{"run_id": id, "metrics": []map[string]any{{"key": "m", "value": "NaN", "timestamp": 1, "step": 0}}}, ""},
	} {
		code, body := post(t, api+"runs/log-batch", auth, tc.body)
		switch {
		case tc.want == "" && code != 200:
			t.Errorf("%s: %d %s", tc.name, code, body)
		case tc.want != "" && (code != 400 || !strings.Contains(body, tc.want) || !strings.Contains(body, "INVALID_PARAMETER_VALUE")):
			t.Errorf("%s: %d %s, want 400 with %q", tc.name, code, body, tc.want)
		}
	}
	r := f.Run(id)
	if r.Params["lr"] != "0.1" || len(r.Params) != 1 || len(r.Metrics) != 1 {
		t.Errorf("params %v, %d metrics: a refused batch changed the run", r.Params, len(r.Metrics))
	}
}
