package tracking

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// WandBSettings are the W&B settings the program read (WANDB_* and
// ~/.netrc, as the wandb SDK reads them).
type WandBSettings struct {
	APIKey string
	// KeyFrom names where the key came from, for messages:
	// "WANDB_API_KEY" or "~/.netrc".
	KeyFrom string
	// BaseURL is WANDB_BASE_URL; empty means https://api.wandb.ai.
	BaseURL                      string
	Entity, Project, Name, RunID string
	Tags                         []string
	// Mode is WANDB_MODE: "" or "online", "disabled", "offline".
	Mode string
}

// DefaultWandBURL is W&B's cloud API.
const DefaultWandBURL = "https://api.wandb.ai"

// W&B's file_stream file names (wandb-core core/internal/filestream).
const (
	wandbHistory = "wandb-history.jsonl"
	wandbSummary = "wandb-summary.json"
	wandbOutput  = "output.log"
)

// The GraphQL operations, with the fields rllm reads (documents of
// wandb-core's core/api/graphql).
const (
	gqlViewer         = `query Viewer { viewer { id entity username } }`
	gqlUpsertBucket   = `mutation UpsertBucket($id: String, $name: String, $project: String, $entity: String, $displayName: String, $config: JSONString, $host: String, $program: String, $tags: [String!], $summaryMetrics: JSONString) { upsertBucket(input: {id: $id, name: $name, modelName: $project, entityName: $entity, displayName: $displayName, config: $config, host: $host, jobProgram: $program, tags: $tags, summaryMetrics: $summaryMetrics}) { bucket { id name displayName project { id name entity { id name } } historyLineCount } inserted } }`
	gqlResumeStatus   = `query RunResumeStatus($project: String, $entity: String, $name: String!) { model(name: $project, entityName: $entity) { id name entity { id name } bucket(name: $name, missingOk: true) { id name logLineCount historyLineCount eventsLineCount } } }`
	gqlRewindRun      = `mutation RewindRun($runName: String!, $entity: String, $project: String, $metricName: String!, $metricValue: Float!) { rewindRun(input: {runName: $runName, entityName: $entity, projectName: $project, metricName: $metricName, metricValue: $metricValue}) { rewoundRun { id name historyLineCount } } }`
	gqlCreateRunFiles = `mutation CreateRunFiles($entity: String!, $project: String!, $run: String!, $files: [String!]!) { createRunFiles(input: {entityName: $entity, projectName: $project, runName: $run, files: $files}) { runID uploadHeaders files { name uploadUrl } } }`
)

type wandbSink struct {
	set    WandBSettings
	base   *url.URL
	http   *http.Client
	now    func() time.Time
	notify func(string)
	st     *stateFile
	config map[string]any

	entity, project, runID, display string
	created                         bool
	resume                          bool
	resumedAt                       int
	// offsets are the next line of each file_stream file.
	history, output int
	// last is the last step sent (or, after a resume W&B could not
	// rewind, the last step it holds): later rows only, so _step
	// increases strictly.
	last      int
	start     time.Time
	runtime0  float64 // _runtime the run had before this process
	lastRow   map[string]float64
	lastStep  int
	sentSteps int
}

// openWandB checks the key (one Viewer query) and creates or resumes the
// run. A refused key is a usage error; a W&B that does not answer is
// warned about and the run is created when it does.
func openWandB(ctx context.Context, spec Spec, st *stateFile, haveTB bool) (Sink, error) {
	set := spec.WandB
	switch set.Mode {
	case "", "online", "run":
	case "disabled", "dryrun":
		spec.Notify("wandb: WANDB_MODE=" + set.Mode + ": nothing is sent to W&B")
		return nil, nil
	case "offline":
		spec.Notify(fmt.Sprintf("wandb: WANDB_MODE=offline: rllm writes TensorBoard event files in %s/%s instead; upload them later with: wandb sync --sync-tensorboard %s/%s", spec.Dir, TensorBoardDir, spec.Dir, TensorBoardDir))
		if haveTB {
			return nil, nil
		}
		return openTensorBoard(spec, spec.ResumedAt)
	default:
		return nil, usererr.Errorf("WANDB_MODE: %q is not a mode; use online, offline or disabled", set.Mode)
	}
	base, err := checkWandB(set)
	if err != nil {
		return nil, err
	}
	if set.KeyFrom == "" {
		set.KeyFrom = "WANDB_API_KEY"
	}
	w := &wandbSink{set: set, base: base, http: spec.HTTP, now: spec.Now, notify: spec.Notify, st: st, config: spec.Config,
		project: firstOf(set.Project, spec.Project, "uncategorized"), display: firstOf(set.Name, spec.Name), entity: set.Entity,
		start: spec.Now(), resumedAt: spec.ResumedAt, last: -1 << 62}
	w.runID = set.RunID
	if d := st.get().WandB; spec.ResumedAt >= 0 && d != nil && d.RunID != "" && (w.runID == "" || w.runID == d.RunID) {
		w.runID, w.resume, w.runtime0 = d.RunID, true, d.Runtime
		if w.entity == "" {
			w.entity = d.Entity
		}
		if set.Project == "" && d.Project != "" {
			w.project = d.Project
		}
	}
	if w.runID == "" {
		w.runID = newRunID()
	}
	return newQueue(w, spec, w.begin), nil
}

// begin is the queue's first call: the key checked (Viewer), then the run
// created or resumed.
func (w *wandbSink) begin(ctx context.Context) error {
	if err := w.checkKey(ctx); err != nil {
		return err
	}
	err := w.ensureRun(ctx)
	if err != nil && !retryable(err) {
		return usererr.Errorf("wandb: %v", err)
	}
	return err
}

// checkWandB refuses W&B settings that cannot work, without sending
// anything; it returns the API's base URL.
func checkWandB(set WandBSettings) (*url.URL, error) {
	if set.BaseURL == "" {
		set.BaseURL = DefaultWandBURL
	}
	base, err := url.Parse(strings.TrimRight(set.BaseURL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, usererr.Errorf("WANDB_BASE_URL: %s is not an http(s) URL", Redact(set.BaseURL))
	}
	base.User = nil
	if set.APIKey == "" {
		return nil, usererr.Errorf("trainer.logger includes wandb but there is no W&B API key: set WANDB_API_KEY, or run `wandb login` (it writes the key to ~/.netrc for %s)", base.Host)
	}
	if set.RunID != "" && !validRunID(set.RunID) {
		return nil, usererr.Errorf("WANDB_RUN_ID: %q is not a W&B run id (letters, digits, - and _ only, at most 128)", set.RunID)
	}
	return base, nil
}

func firstOf(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// newRunID is a run id as the wandb SDK makes them: 8 lowercase letters
// and digits.
func newRunID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 8)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func validRunID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !(r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func (w *wandbSink) name() string { return WandB }
func (w *wandbSink) maxRows() int { return 200 }

// auth sets W&B's credentials: HTTP basic, user "api", the key as password.
func (w *wandbSink) auth(req *http.Request) {
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("api:"+w.set.APIKey)))
}

func (w *wandbSink) graphql(ctx context.Context, query string, vars map[string]any, out any) error {
	req, err := newJSONRequest(http.MethodPost, w.base.String()+"/graphql", map[string]any{"query": query, "variables": vars})
	if err != nil {
		return err
	}
	w.auth(req)
	var resp struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := call(ctx, w.http, "W&B at "+w.base.String(), req, &resp); err != nil {
		return err
	}
	if len(resp.Errors) > 0 {
		msgs := make([]string, len(resp.Errors))
		for i, e := range resp.Errors {
			msgs[i] = e.Message
		}
		return &sendError{permanent: true, msg: "W&B: " + strings.Join(msgs, "; ")}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Data, out); err != nil {
		return &sendError{permanent: true, msg: fmt.Sprintf("W&B answered data that is not what it should be: %v", err)}
	}
	return nil
}

// checkKey asks W&B who the key belongs to.
func (w *wandbSink) checkKey(ctx context.Context) error {
	var v struct {
		Viewer *struct {
			Entity string `json:"entity"`
		} `json:"viewer"`
	}
	err := w.graphql(ctx, gqlViewer, map[string]any{}, &v)
	var se *sendError
	if err != nil && asSendError(err, &se) && (se.status == http.StatusUnauthorized || se.status == http.StatusForbidden) || err == nil && v.Viewer == nil {
		return usererr.Errorf("wandb: the API key in %s is refused by %s; check it at %s/authorize, or run `wandb login --relogin`", w.set.KeyFrom, w.base, appURL(w.base))
	}
	if err != nil {
		return err
	}
	if w.entity == "" {
		w.entity = v.Viewer.Entity
	}
	return nil
}

func asSendError(err error, se **sendError) bool {
	e, ok := err.(*sendError)
	if ok {
		*se = e
	}
	return ok
}

// appURL is where people look at runs: wandb.ai for the cloud API, the
// server itself otherwise.
func appURL(base *url.URL) string {
	if base.Host == "api.wandb.ai" {
		return "https://wandb.ai"
	}
	return base.String()
}

// wandbConfig is the run config as W&B stores it: {"key": {"value": v}}.
func wandbConfig(c map[string]any) map[string]any {
	out := make(map[string]any, len(c))
	for k, v := range c {
		out[k] = map[string]any{"value": v}
	}
	return out
}

// ensureRun creates or resumes the run (UpsertBucket), once.
func (w *wandbSink) ensureRun(ctx context.Context) error {
	if w.created {
		return nil
	}
	if w.resume {
		if err := w.resumeOffsets(ctx); err != nil {
			return err
		}
	}
	cfg, _ := json.Marshal(wandbConfig(w.config))
	vars := map[string]any{"name": w.runID, "project": w.project, "config": string(cfg), "program": "rllm"}
	if w.entity != "" {
		vars["entity"] = w.entity
	}
	if w.display != "" {
		vars["displayName"] = w.display
	}
	if len(w.set.Tags) > 0 {
		vars["tags"] = w.set.Tags
	}
	var out struct {
		UpsertBucket *struct {
			Bucket *struct {
				Name    string `json:"name"`
				Project struct {
					Name   string `json:"name"`
					Entity struct {
						Name string `json:"name"`
					} `json:"entity"`
				} `json:"project"`
				HistoryLineCount *int `json:"historyLineCount"`
			} `json:"bucket"`
		} `json:"upsertBucket"`
	}
	if err := w.graphql(ctx, gqlUpsertBucket, vars, &out); err != nil {
		return err
	}
	if out.UpsertBucket == nil || out.UpsertBucket.Bucket == nil {
		return &sendError{permanent: true, msg: "W&B answered UpsertBucket without the run"}
	}
	b := out.UpsertBucket.Bucket
	w.entity, w.project = b.Project.Entity.Name, b.Project.Name
	if !w.resume && b.HistoryLineCount != nil {
		w.history = *b.HistoryLineCount // a WANDB_RUN_ID that exists: continue it
	}
	w.created = true
	err := w.st.update(func(d *stateData) {
		d.WandB = &wandbState{BaseURL: w.base.String(), Entity: w.entity, Project: w.project, RunID: w.runID, LastStep: w.lastAcked(d), Runtime: w.runtime0}
	})
	w.notify(fmt.Sprintf("wandb: run %s/%s/%s/runs/%s", appURL(w.base), w.entity, w.project, w.runID))
	return err
}

func (w *wandbSink) lastAcked(d *stateData) int {
	if d.WandB != nil && d.WandB.RunID == w.runID {
		return d.WandB.LastStep
	}
	return -1
}

// resumeOffsets continues a resumed run where W&B has it: its file
// offsets, after rewinding the steps this run redoes.
func (w *wandbSink) resumeOffsets(ctx context.Context) error {
	vars := map[string]any{"project": w.project, "name": w.runID}
	if w.entity != "" {
		vars["entity"] = w.entity
	}
	var rs struct {
		Model *struct {
			Bucket *struct {
				LogLineCount     *int `json:"logLineCount"`
				HistoryLineCount *int `json:"historyLineCount"`
			} `json:"bucket"`
		} `json:"model"`
	}
	if err := w.graphql(ctx, gqlResumeStatus, vars, &rs); err != nil {
		return err
	}
	if rs.Model == nil || rs.Model.Bucket == nil {
		w.notify(fmt.Sprintf("warning: wandb: run %s is not in project %s any more; it is created again", w.runID, w.project))
		return nil
	}
	if c := rs.Model.Bucket.HistoryLineCount; c != nil {
		w.history = *c
	}
	if c := rs.Model.Bucket.LogLineCount; c != nil {
		w.output = *c
	}
	acked := -1
	if d := w.st.get().WandB; d != nil {
		acked = d.LastStep
	}
	if acked <= w.resumedAt {
		return nil
	}
	// The steps after the checkpoint are trained again: rewind W&B's
	// history to before them, so they are replaced, not appended.
	vars = map[string]any{"runName": w.runID, "project": w.project, "metricName": "_step", "metricValue": float64(w.resumedAt + 1)}
	if w.entity != "" {
		vars["entity"] = w.entity
	}
	var rw struct {
		RewindRun *struct {
			RewoundRun *struct {
				HistoryLineCount *int `json:"historyLineCount"`
			} `json:"rewoundRun"`
		} `json:"rewindRun"`
	}
	err := w.graphql(ctx, gqlRewindRun, vars, &rw)
	if err != nil && retryable(err) {
		return err
	}
	if err != nil || rw.RewindRun == nil || rw.RewindRun.RewoundRun == nil || rw.RewindRun.RewoundRun.HistoryLineCount == nil {
		why := "no rewound run in the answer"
		if err != nil {
			why = err.Error()
		}
		w.notify(fmt.Sprintf("warning: wandb: could not rewind run %s to step %d (%s); W&B keeps steps %d-%d as first logged and gets the steps after %d", w.runID, w.resumedAt+1, why, w.resumedAt+1, acked, acked))
		w.last = acked
		return nil
	}
	w.history = *rw.RewindRun.RewoundRun.HistoryLineCount
	return nil
}

// historyLine is a row as a W&B history line: _step, _runtime,
// _timestamp and the metrics, NaN and ±Infinity written as the wandb
// SDK writes them (bare NaN, Infinity, -Infinity).
func (w *wandbSink) historyLine(r Row) string {
	var b strings.Builder
	ts := r.Time
	if ts.IsZero() {
		ts = w.now()
	}
	fmt.Fprintf(&b, `{"_step":%d,"_runtime":%s,"_timestamp":%s`, r.Step, num(w.runtime(ts)), num(float64(ts.UnixNano())/1e9))
	for _, k := range slices.Sorted(maps.Keys(r.Metrics)) {
		if strings.HasPrefix(k, "_") {
			continue // W&B's own keys
		}
		kb, _ := json.Marshal(k)
		b.WriteByte(',')
		b.Write(kb)
		b.WriteByte(':')
		b.WriteString(num(r.Metrics[k]))
	}
	b.WriteByte('}')
	return b.String()
}

func (w *wandbSink) runtime(ts time.Time) float64 {
	return w.runtime0 + max(ts.Sub(w.start).Seconds(), 0)
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "Infinity"
	case math.IsInf(v, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

type fsChunk struct {
	Offset  int      `json:"offset"`
	Content []string `json:"content"`
}

type fsRequest struct {
	Files    map[string]fsChunk `json:"files,omitempty"`
	Uploaded []string           `json:"uploaded,omitempty"`
	Complete *bool              `json:"complete,omitempty"`
	ExitCode *int               `json:"exitcode,omitempty"`
}

func (w *wandbSink) fileStream(ctx context.Context, body fsRequest) error {
	u := fmt.Sprintf("%s/files/%s/%s/%s/file_stream", w.base, url.PathEscape(w.entity), url.PathEscape(w.project), url.PathEscape(w.runID))
	req, err := newJSONRequest(http.MethodPost, u, body)
	if err != nil {
		return err
	}
	w.auth(req)
	return call(ctx, w.http, "W&B file_stream", req, nil)
}

func (w *wandbSink) send(ctx context.Context, rows []Row, events []Event) error {
	if err := w.ensureRun(ctx); err != nil {
		return err
	}
	var hist, out, uploaded []string
	last := w.last
	for _, r := range rows {
		if r.Step <= last {
			continue // W&B's _step only increases
		}
		var extra string
		if r.Table != nil {
			ref, name, err := w.uploadTable(ctx, r.Step, r.Table)
			if err != nil && retryable(err) {
				return err
			}
			if err != nil {
				w.notify(fmt.Sprintf("warning: wandb: table %s of step %d not uploaded: %v", r.Table.Key, r.Step, err))
			} else {
				extra, uploaded = ref, append(uploaded, name)
			}
		}
		last = r.Step
		line := w.historyLine(r)
		if extra != "" {
			line = line[:len(line)-1] + "," + extra + "}"
		}
		hist = append(hist, line)
		w.lastRow, w.lastStep = r.Metrics, r.Step
	}
	for _, e := range events {
		ts := e.Time
		if ts.IsZero() {
			ts = w.now()
		}
		out = append(out, strings.TrimSuffix(ts.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), "Z")+" "+fmt.Sprintf("warning: step %d: %s", e.Step, e.Message))
	}
	if len(hist) == 0 && len(out) == 0 {
		return nil
	}
	body := fsRequest{Files: map[string]fsChunk{}, Uploaded: uploaded}
	if len(hist) > 0 {
		body.Files[wandbHistory] = fsChunk{Offset: w.history, Content: hist}
	}
	if len(out) > 0 {
		body.Files[wandbOutput] = fsChunk{Offset: w.output, Content: out}
	}
	if err := w.fileStream(ctx, body); err != nil {
		return err
	}
	w.history += len(hist)
	w.output += len(out)
	w.last = last
	w.sentSteps += len(hist)
	rt := w.runtime(w.now())
	return w.st.update(func(d *stateData) {
		if d.WandB != nil && d.WandB.RunID == w.runID {
			d.WandB.LastStep, d.WandB.Runtime = last, rt
		}
	})
}

// finish sends the summary and config.yaml, then marks the run complete
// with an exit code (0 finished, 1 failed, 255 killed).
func (w *wandbSink) finish(ctx context.Context, s Summary) error {
	if err := w.ensureRun(ctx); err != nil {
		return err
	}
	sum := map[string]any{}
	for k, v := range w.lastRow {
		sum[k] = v
	}
	for k, v := range s.Values {
		sum[k] = v
	}
	sum["_step"] = w.lastStep
	sum["_runtime"] = w.runtime(w.now())
	line := summaryLine(sum)
	uploaded, err := w.upload(ctx, "config.yaml", w.configYAML())
	if err != nil {
		if retryable(err) {
			return err
		}
		w.notify(fmt.Sprintf("warning: wandb: config.yaml not uploaded: %v", err))
	}
	code := 0
	switch s.Status {
	case Failed:
		code = 1
	case Killed:
		code = 255
	}
	done := true
	return w.fileStream(ctx, fsRequest{Files: map[string]fsChunk{wandbSummary: {Offset: 0, Content: []string{line}}}, Uploaded: uploaded, Complete: &done, ExitCode: &code})
}

func summaryLine(m map[string]any) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		switch v := m[k].(type) {
		case float64:
			b.WriteString(num(v))
		default:
			vb, _ := json.Marshal(v)
			b.Write(vb)
		}
	}
	b.WriteByte('}')
	return b.String()
}

// uploadTable uploads a table file as the wandb SDK writes one
// (media/table/<key>_<step>_<hash>.table.json: {"columns", "data"}) and
// returns the history value that refers to it and the file's name.
func (w *wandbSink) uploadTable(ctx context.Context, step int, t *Table) (string, string, error) {
	data, err := json.Marshal(map[string]any{"columns": t.Columns, "data": t.Rows})
	if err != nil {
		return "", "", &sendError{permanent: true, msg: err.Error()}
	}
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	safe := strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == ' ' {
			return '_'
		}
		return r
	}, t.Key)
	name := fmt.Sprintf("media/table/%s_%d_%s.table.json", safe, step, digest[:20])
	if _, err := w.upload(ctx, name, data); err != nil {
		return "", "", err
	}
	key, _ := json.Marshal(t.Key)
	ref, _ := json.Marshal(map[string]any{"_type": "table-file", "path": name, "sha256": digest, "size": len(data), "ncols": len(t.Columns), "nrows": len(t.Rows)})
	return string(key) + ":" + string(ref), name, nil
}

// configYAML is config.yaml as the wandb SDK writes it.
func (w *wandbSink) configYAML() []byte {
	b, err := yaml.Marshal(wandbConfig(w.config))
	if err != nil {
		return nil
	}
	return b
}

// upload puts one run file through the URL CreateRunFiles gives (with its
// headers, without W&B's credentials) and returns the names to list as
// uploaded.
func (w *wandbSink) upload(ctx context.Context, name string, data []byte) ([]string, error) {
	var out struct {
		CreateRunFiles *struct {
			UploadHeaders []string `json:"uploadHeaders"`
			Files         []struct {
				Name      string `json:"name"`
				UploadURL string `json:"uploadUrl"`
			} `json:"files"`
		} `json:"createRunFiles"`
	}
	if err := w.graphql(ctx, gqlCreateRunFiles, map[string]any{"entity": w.entity, "project": w.project, "run": w.runID, "files": []string{name}}, &out); err != nil {
		return nil, err
	}
	if out.CreateRunFiles == nil || len(out.CreateRunFiles.Files) == 0 {
		return nil, &sendError{permanent: true, msg: "W&B answered CreateRunFiles without an upload URL"}
	}
	f := out.CreateRunFiles.Files[0]
	u, err := url.Parse(f.UploadURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, &sendError{permanent: true, msg: "W&B gave an upload URL that is not http(s)"}
	}
	req, err := http.NewRequest(http.MethodPut, u.String(), bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	for _, h := range out.CreateRunFiles.UploadHeaders {
		if k, v, ok := strings.Cut(h, ":"); ok {
			req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	if err := call(ctx, w.http, "the W&B upload URL", req, nil); err != nil {
		return nil, err
	}
	return []string{name}, nil
}
