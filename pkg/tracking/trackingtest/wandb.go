// Package trackingtest has fakes of the W&B and MLflow servers for tests:
// httptest servers that speak their HTTP APIs as the official clients
// use them and refuse what the real services refuse.
//
// W&B: the GraphQL documents and file_stream protocol of wandb-core
// (github.com/wandb/wandb, core/api/graphql and core/internal/filestream
// at b6e29505884ea60c79ca12091f1f75bd39d2f955). MLflow: the REST API
// (mlflow.org/docs/latest/rest-api.html) with the limits of
// mlflow/utils/validation.py.
package trackingtest

import (
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// WandBRun is a run as the fake W&B holds it.
type WandBRun struct {
	Entity, Project, Name string
	DisplayName           string
	Config                map[string]any
	Tags                  []string
	History               []map[string]any // one per history line
	HistoryLines          []string
	Output                []string
	Summary               map[string]any
	Uploaded              []string
	Files                 map[string][]byte
	Complete              bool
	ExitCode              int
	Upserts               int
}

// WandB is a fake W&B server.
type WandB struct {
	*httptest.Server
	// Key is the API key it accepts.
	Key    string
	Entity string
	// NoRewind makes RewindRun answer an error, as servers without the
	// feature do.
	NoRewind bool
	// Intercept, when set, sees every request first; when it returns
	// true it has answered.
	Intercept func(w http.ResponseWriter, r *http.Request) bool

	mu       sync.Mutex
	runs     map[string]*WandBRun
	requests int
	refusals []string
}

// NewWandB starts a fake W&B that accepts key; it closes with the test.
func NewWandB(t testing.TB, key string) *WandB {
	f := StartWandB(key)
	t.Cleanup(f.Close)
	return f
}

// StartWandB starts a fake W&B that accepts key; Close stops it.
func StartWandB(key string) *WandB {
	f := &WandB{Key: key, Entity: "fake-entity", runs: map[string]*WandBRun{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// Run is a copy of the run entity/project/name, or nil.
func (f *WandB) Run(entity, project, name string) *WandBRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.runs[entity+"/"+project+"/"+name]
	if r == nil {
		return nil
	}
	cp := *r
	cp.History = append([]map[string]any(nil), r.History...)
	return &cp
}

// Runs are copies of every run.
func (f *WandB) Runs() []*WandBRun {
	f.mu.Lock()
	var keys []string
	for k := range f.runs {
		keys = append(keys, k)
	}
	f.mu.Unlock()
	var out []*WandBRun
	for _, k := range keys {
		p := strings.SplitN(k, "/", 3)
		out = append(out, f.Run(p[0], p[1], p[2]))
	}
	return out
}

// Refusals are the reasons of every request the fake refused.
func (f *WandB) Refusals() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.refusals...)
}

// Requests counts the requests served.
func (f *WandB) Requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

func (f *WandB) refuse(w http.ResponseWriter, status int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.refusals = append(f.refusals, msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"message": msg}}})
}

func (f *WandB) serve(w http.ResponseWriter, r *http.Request) {
	if f.Intercept != nil && f.Intercept(w, r) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	if strings.HasPrefix(r.URL.Path, "/upload/") {
		f.upload(w, r)
		return
	}
	// Credentials: HTTP basic, user "api", the key as password
	// (core/internal/api/credentials.go).
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("api:"+f.Key))
	if r.Header.Get("Authorization") != want {
		f.refuse(w, http.StatusUnauthorized, "user is not logged in")
		return
	}
	if r.Method != http.MethodPost {
		f.refuse(w, http.StatusMethodNotAllowed, "%s %s: method not allowed", r.Method, r.URL.Path)
		return
	}
	body := io.Reader(io.LimitReader(r.Body, 64<<20))
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			f.refuse(w, http.StatusBadRequest, "bad gzip body")
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		f.refuse(w, http.StatusBadRequest, "reading the body: %v", err)
		return
	}
	switch {
	case r.URL.Path == "/graphql":
		f.graphql(w, b)
	case strings.HasSuffix(r.URL.Path, "/file_stream") && strings.HasPrefix(r.URL.Path, "/files/"):
		p := strings.Split(strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/files/"), "/file_stream"), "/")
		if len(p) != 3 {
			f.refuse(w, http.StatusNotFound, "no such path %s", r.URL.Path)
			return
		}
		f.fileStream(w, p[0], p[1], p[2], b)
	default:
		f.refuse(w, http.StatusNotFound, "no such path %s", r.URL.Path)
	}
}

var opName = regexp.MustCompile(`^\s*(query|mutation)\s+(\w+)`)

func (f *WandB) graphql(w http.ResponseWriter, b []byte) {
	var req struct {
		Query     string         `json:"query"`
		Variables map[string]any `json:"variables"`
	}
	if err := json.Unmarshal(b, &req); err != nil || req.Query == "" {
		f.refuse(w, http.StatusBadRequest, "not a GraphQL request")
		return
	}
	m := opName.FindStringSubmatch(req.Query)
	if m == nil {
		f.refuse(w, http.StatusBadRequest, "no operation name")
		return
	}
	v := req.Variables
	str := func(k string) string { s, _ := v[k].(string); return s }
	var data any
	switch m[2] {
	case "Viewer":
		data = map[string]any{"viewer": map[string]any{"id": "VXNlcjox", "entity": f.Entity, "username": "fake"}}
	case "UpsertBucket":
		if !strings.Contains(req.Query, "upsertBucket(") {
			f.refuse(w, http.StatusBadRequest, "UpsertBucket without upsertBucket")
			return
		}
		project, name := str("project"), str("name")
		entity := firstNonEmpty(str("entity"), f.Entity)
		if project == "" || name == "" {
			f.refuse(w, http.StatusOK, "UpsertBucket needs a project (modelName) and a run name")
			return
		}
		key := entity + "/" + project + "/" + name
		run := f.runs[key]
		inserted := run == nil
		if inserted {
			run = &WandBRun{Entity: entity, Project: project, Name: name, Files: map[string][]byte{}}
			f.runs[key] = run
		}
		run.Upserts++
		run.Complete = false // upserting a finished run resumes it
		if c := str("config"); c != "" {
			var cfg map[string]any
			if err := json.Unmarshal([]byte(c), &cfg); err != nil {
				f.refuse(w, http.StatusOK, "config is not a JSON object: %v", err)
				return
			}
			for k, x := range cfg {
				if mm, ok := x.(map[string]any); !ok || len(mm) != 1 || mm["value"] == nil && len(mm) != 1 {
					f.refuse(w, http.StatusOK, "config key %q is not {\"value\": ...}", k)
					return
				}
			}
			run.Config = cfg
		}
		if d := str("displayName"); d != "" {
			run.DisplayName = d
		}
		if tags, ok := v["tags"].([]any); ok {
			run.Tags = nil
			for _, t := range tags {
				s, _ := t.(string)
				run.Tags = append(run.Tags, s)
			}
		}
		data = map[string]any{"upsertBucket": map[string]any{"inserted": inserted, "bucket": f.bucket(run)}}
	case "RunResumeStatus":
		entity := firstNonEmpty(str("entity"), f.Entity)
		run := f.runs[entity+"/"+str("project")+"/"+str("name")]
		var bucket any
		if run != nil {
			bucket = map[string]any{"id": "UnVuOjE=", "name": run.Name, "historyLineCount": len(run.HistoryLines), "logLineCount": len(run.Output), "eventsLineCount": 0}
		}
		data = map[string]any{"model": map[string]any{"id": "UHJvamVjdDox", "name": str("project"), "entity": map[string]any{"name": entity}, "bucket": bucket}}
	case "RewindRun":
		if f.NoRewind {
			f.refuse(w, http.StatusOK, "rewinding runs is not enabled for this entity")
			return
		}
		entity := firstNonEmpty(str("entity"), f.Entity)
		run := f.runs[entity+"/"+str("project")+"/"+str("runName")]
		if run == nil {
			f.refuse(w, http.StatusOK, "run not found")
			return
		}
		if str("metricName") != "_step" {
			f.refuse(w, http.StatusOK, "rewind only supports _step")
			return
		}
		at, _ := v["metricValue"].(float64)
		var keep []string
		var keepH []map[string]any
		for i, h := range run.History {
			if s, _ := h["_step"].(float64); s < at {
				keep = append(keep, run.HistoryLines[i])
				keepH = append(keepH, h)
			}
		}
		run.HistoryLines, run.History = keep, keepH
		data = map[string]any{"rewindRun": map[string]any{"rewoundRun": f.bucket(run)}}
	case "CreateRunFiles":
		entity, project, name := str("entity"), str("project"), str("run")
		run := f.runs[entity+"/"+project+"/"+name]
		if run == nil {
			f.refuse(w, http.StatusOK, "run %s/%s/%s not found", entity, project, name)
			return
		}
		files, _ := v["files"].([]any)
		var out []map[string]any
		for _, x := range files {
			n, _ := x.(string)
			out = append(out, map[string]any{"name": n, "uploadUrl": f.URL + "/upload/" + entity + "/" + project + "/" + name + "/" + n + "?X-Sig=secret-signature"})
		}
		data = map[string]any{"createRunFiles": map[string]any{"runID": "UnVuOjE=", "uploadHeaders": []string{"X-Fake-Upload:yes"}, "files": out}}
	default:
		f.refuse(w, http.StatusBadRequest, "unknown operation %s", m[2])
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"data": data})
}

func (f *WandB) bucket(run *WandBRun) map[string]any {
	cfg, _ := json.Marshal(run.Config)
	return map[string]any{"id": "UnVuOjE=", "name": run.Name, "displayName": run.DisplayName, "config": string(cfg),
		"project":          map[string]any{"id": "UHJvamVjdDox", "name": run.Project, "entity": map[string]any{"id": "RW50aXR5OjE=", "name": run.Entity}},
		"historyLineCount": len(run.HistoryLines)}
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// upload takes a PUT to an upload URL: no W&B credentials may come with
// it (core/internal/httplayers/urlfilter.go keeps them to the API).
func (f *WandB) upload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		f.refuse(w, http.StatusMethodNotAllowed, "upload URLs take PUT")
		return
	}
	if r.Header.Get("Authorization") != "" {
		f.refuse(w, http.StatusBadRequest, "credentials sent to an upload URL")
		return
	}
	if r.URL.Query().Get("X-Sig") != "secret-signature" || r.Header.Get("X-Fake-Upload") != "yes" {
		f.refuse(w, http.StatusForbidden, "upload without its signature or headers")
		return
	}
	p := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/upload/"), "/", 4)
	if len(p) != 4 {
		f.refuse(w, http.StatusNotFound, "bad upload path")
		return
	}
	run := f.runs[p[0]+"/"+p[1]+"/"+p[2]]
	if run == nil {
		f.refuse(w, http.StatusNotFound, "no run for upload")
		return
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	run.Files[p[3]] = b
}

// fileStream takes one file_stream request: each file's offset must be
// the number of lines the server has (no gap, no overlap), history lines
// must be JSON objects (NaN and ±Infinity allowed, as wandb writes them)
// with a strictly increasing _step, the summary one whole line.
func (f *WandB) fileStream(w http.ResponseWriter, entity, project, name string, b []byte) {
	run := f.runs[entity+"/"+project+"/"+name]
	if run == nil {
		f.refuse(w, http.StatusNotFound, "run %s/%s/%s not found", entity, project, name)
		return
	}
	var req struct {
		Files map[string]struct {
			Offset  *int     `json:"offset"`
			Content []string `json:"content"`
		} `json:"files"`
		Uploaded []string `json:"uploaded"`
		Complete *bool    `json:"complete"`
		ExitCode *int     `json:"exitcode"`
	}
	if err := json.Unmarshal(b, &req); err != nil {
		f.refuse(w, http.StatusBadRequest, "file_stream body is not JSON: %v", err)
		return
	}
	if run.Complete {
		f.refuse(w, http.StatusConflict, "run %s is complete", name)
		return
	}
	type parsed struct {
		lines []string
		objs  []map[string]any
	}
	var hist parsed
	for file, c := range req.Files {
		if c.Offset == nil {
			f.refuse(w, http.StatusBadRequest, "%s: no offset", file)
			return
		}
		switch file {
		case "wandb-history.jsonl":
			if *c.Offset != len(run.HistoryLines) {
				f.refuse(w, http.StatusBadRequest, "wandb-history.jsonl: offset %d, but the server has %d lines", *c.Offset, len(run.HistoryLines))
				return
			}
			last := -1.0
			if n := len(run.History); n > 0 {
				last, _ = run.History[n-1]["_step"].(float64)
			}
			for _, line := range c.Content {
				obj, err := ParseWandBJSON(line)
				if err != nil {
					f.refuse(w, http.StatusBadRequest, "wandb-history.jsonl: %v: %s", err, line)
					return
				}
				s, ok := obj["_step"].(float64)
				if !ok || s <= last {
					f.refuse(w, http.StatusBadRequest, "wandb-history.jsonl: _step %v after %v", obj["_step"], last)
					return
				}
				if _, ok := obj["_runtime"].(float64); !ok {
					f.refuse(w, http.StatusBadRequest, "wandb-history.jsonl: no _runtime")
					return
				}
				if _, ok := obj["_timestamp"].(float64); !ok {
					f.refuse(w, http.StatusBadRequest, "wandb-history.jsonl: no _timestamp")
					return
				}
				for k, v := range obj {
					ref, ok := v.(map[string]any)
					if !ok || ref["_type"] != "table-file" {
						continue
					}
					// A table's file is uploaded before the row names it
					// (wandb/sdk/data_types/table.py).
					p, _ := ref["path"].(string)
					b, ok := run.Files[p]
					var tab struct {
						Columns []string `json:"columns"`
						Data    [][]any  `json:"data"`
					}
					if !ok || json.Unmarshal(b, &tab) != nil || ref["ncols"] != float64(len(tab.Columns)) || ref["nrows"] != float64(len(tab.Data)) || ref["size"] != float64(len(b)) {
						f.refuse(w, http.StatusBadRequest, "wandb-history.jsonl: %s refers to a table file that is missing or does not match", k)
						return
					}
				}
				last = s
				hist.lines = append(hist.lines, line)
				hist.objs = append(hist.objs, obj)
			}
		case "output.log":
			if *c.Offset != len(run.Output) {
				f.refuse(w, http.StatusBadRequest, "output.log: offset %d, but the server has %d lines", *c.Offset, len(run.Output))
				return
			}
		case "wandb-summary.json":
			if len(c.Content) != 1 {
				f.refuse(w, http.StatusBadRequest, "wandb-summary.json takes one whole line, got %d", len(c.Content))
				return
			}
			if _, err := ParseWandBJSON(c.Content[0]); err != nil {
				f.refuse(w, http.StatusBadRequest, "wandb-summary.json: %v", err)
				return
			}
		case "wandb-events.jsonl":
		default:
			f.refuse(w, http.StatusBadRequest, "unknown file_stream file %q", file)
			return
		}
	}
	for _, u := range req.Uploaded {
		if _, ok := run.Files[u]; !ok {
			f.refuse(w, http.StatusBadRequest, "%s listed as uploaded but never put", u)
			return
		}
	}
	// All checked: apply.
	run.HistoryLines = append(run.HistoryLines, hist.lines...)
	run.History = append(run.History, hist.objs...)
	if c, ok := req.Files["output.log"]; ok {
		run.Output = append(run.Output, c.Content...)
	}
	if c, ok := req.Files["wandb-summary.json"]; ok {
		run.Summary, _ = ParseWandBJSON(c.Content[0])
	}
	run.Uploaded = append(run.Uploaded, req.Uploaded...)
	if req.Complete != nil && *req.Complete {
		run.Complete = true
		if req.ExitCode != nil {
			run.ExitCode = *req.ExitCode
		}
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"exitcode": null, "limits": {}}`)
}

// ParseWandBJSON reads a JSON object in wandb's extension of JSON, where
// NaN, Infinity and -Infinity are numbers; they come back as strings
// "NaN", "Infinity", "-Infinity".
func ParseWandBJSON(s string) (map[string]any, error) {
	var b strings.Builder
	inStr, esc := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inStr {
			b.WriteByte(c)
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch {
		case c == '"':
			inStr = true
			b.WriteByte(c)
		case strings.HasPrefix(s[i:], "NaN"):
			b.WriteString(`"NaN"`)
			i += 2
		case strings.HasPrefix(s[i:], "-Infinity"):
			b.WriteString(`"-Infinity"`)
			i += 8
		case strings.HasPrefix(s[i:], "Infinity"):
			b.WriteString(`"Infinity"`)
			i += 7
		default:
			b.WriteByte(c)
		}
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(b.String()), &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return m, nil
}
