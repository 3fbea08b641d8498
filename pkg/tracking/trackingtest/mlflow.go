package trackingtest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// MLflowMetric is one logged metric value.
type MLflowMetric struct {
	Key       string
	Value     float64
	Timestamp int64
	Step      int64
}

// MLflowRun is a run as the fake MLflow holds it.
type MLflowRun struct {
	ID, ExperimentID, Name string
	Status                 string
	EndTime                int64
	Params                 map[string]string
	Tags                   map[string]string
	Metrics                []MLflowMetric
	Batches                int
}

// MLflow is a fake MLflow tracking server.
type MLflow struct {
	*httptest.Server
	// Token, when set, is the bearer token it requires.
	Token string
	// ParamLimit is the longest param value it takes (500, as older
	// servers; current ones take 6000).
	ParamLimit int
	Intercept  func(w http.ResponseWriter, r *http.Request) bool

	mu          sync.Mutex
	experiments map[string]string // name → id
	runs        map[string]*MLflowRun
	nextID      int
	refusals    []string
}

// NewMLflow starts a fake MLflow requiring token ("" for none).
func NewMLflow(t testing.TB, token string) *MLflow {
	f := StartMLflow(token)
	t.Cleanup(f.Close)
	return f
}

// StartMLflow starts a fake MLflow requiring token; Close stops it.
func StartMLflow(token string) *MLflow {
	f := &MLflow{Token: token, ParamLimit: 500, experiments: map[string]string{"Default": "0"}, runs: map[string]*MLflowRun{}, nextID: 1}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// Run is a copy of run id, or nil.
func (f *MLflow) Run(id string) *MLflowRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.runs[id]
	if r == nil {
		return nil
	}
	cp := *r
	cp.Metrics = append([]MLflowMetric(nil), r.Metrics...)
	return &cp
}

// Runs are copies of every run.
func (f *MLflow) Runs() []*MLflowRun {
	f.mu.Lock()
	var ids []string
	for id := range f.runs {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	var out []*MLflowRun
	for _, id := range ids {
		out = append(out, f.Run(id))
	}
	return out
}

// Refusals are the messages of every refused request.
func (f *MLflow) Refusals() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.refusals...)
}

func (f *MLflow) fail(w http.ResponseWriter, status int, code, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.refusals = append(f.refusals, code+": "+msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error_code": code, "message": msg})
}

func (f *MLflow) ok(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// MLflow's key rule (mlflow/utils/validation.py): letters, digits, _ - .
// space : /, and a path that normalises to itself.
var mlflowKey = regexp.MustCompile(`^[/\w.\- :]*$`)

func validKey(k string) bool {
	return k != "" && len(k) <= 250 && mlflowKey.MatchString(k) && path.Clean(k) == k && !strings.HasPrefix(k, "/")
}

func (f *MLflow) serve(w http.ResponseWriter, r *http.Request) {
	if f.Intercept != nil && f.Intercept(w, r) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Token != "" && r.Header.Get("Authorization") != "Bearer "+f.Token {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "You are not authenticated. Please see https://www.mlflow.org/docs/latest/auth/index.html#authenticating-to-mlflow on how to authenticate.")
		f.refusals = append(f.refusals, "unauthenticated")
		return
	}
	route, ok := strings.CutPrefix(r.URL.Path, "/api/2.0/mlflow/")
	if !ok {
		f.fail(w, http.StatusNotFound, "ENDPOINT_NOT_FOUND", "no endpoint %s", r.URL.Path)
		return
	}
	var body map[string]any
	if r.Method == http.MethodPost {
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			f.fail(w, http.StatusBadRequest, "BAD_REQUEST", "Bad Request. Content-Type must be 'application/json'")
			return
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			f.fail(w, http.StatusBadRequest, "BAD_REQUEST", "reading: %v", err)
			return
		}
		if route == "runs/log-batch" && len(b) > 1<<20 {
			f.fail(w, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "Batched logging API requests must be at most 1048576 bytes, got %d", len(b))
			return
		}
		if err := json.Unmarshal(b, &body); err != nil {
			f.fail(w, http.StatusBadRequest, "MALFORMED_REQUEST", "not JSON: %v", err)
			return
		}
	}
	str := func(k string) string { s, _ := body[k].(string); return s }
	switch route {
	case "experiments/get-by-name":
		name := r.URL.Query().Get("experiment_name")
		id, ok := f.experiments[name]
		if !ok {
			f.fail(w, http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST", "Could not find experiment with name '%s'", name)
			return
		}
		f.ok(w, map[string]any{"experiment": map[string]any{"experiment_id": id, "name": name, "lifecycle_stage": "active"}})
	case "experiments/create":
		name := str("name")
		if name == "" {
			f.fail(w, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "Missing value for required parameter 'name'")
			return
		}
		if _, ok := f.experiments[name]; ok {
			f.fail(w, http.StatusBadRequest, "RESOURCE_ALREADY_EXISTS", "Experiment '%s' already exists.", name)
			return
		}
		id := strconv.Itoa(100 + f.nextID)
		f.nextID++
		f.experiments[name] = id
		f.ok(w, map[string]any{"experiment_id": id})
	case "runs/create":
		exp := str("experiment_id")
		found := false
		for _, id := range f.experiments {
			found = found || id == exp
		}
		if !found {
			f.fail(w, http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST", "No Experiment with id=%s exists", exp)
			return
		}
		id := fmt.Sprintf("%032x", f.nextID)
		f.nextID++
		run := &MLflowRun{ID: id, ExperimentID: exp, Name: str("run_name"), Status: "RUNNING", Params: map[string]string{}, Tags: map[string]string{}}
		if tags, ok := body["tags"].([]any); ok {
			for _, t := range tags {
				m, _ := t.(map[string]any)
				k, _ := m["key"].(string)
				v, _ := m["value"].(string)
				run.Tags[k] = v
			}
		}
		f.runs[id] = run
		f.ok(w, map[string]any{"run": f.runJSON(run)})
	case "runs/get":
		run := f.runs[r.URL.Query().Get("run_id")]
		if run == nil {
			f.fail(w, http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST", "Run '%s' not found", r.URL.Query().Get("run_id"))
			return
		}
		f.ok(w, map[string]any{"run": f.runJSON(run)})
	case "runs/update":
		run := f.runs[str("run_id")]
		if run == nil {
			f.fail(w, http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST", "Run '%s' not found", str("run_id"))
			return
		}
		switch s := str("status"); s {
		case "RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED":
			run.Status = s
		case "":
		default:
			f.fail(w, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "Invalid value %q for parameter 'status'", s)
			return
		}
		if e, ok := body["end_time"].(float64); ok {
			run.EndTime = int64(e)
		}
		f.ok(w, map[string]any{"run_info": f.runJSON(run)["info"]})
	case "runs/log-batch":
		f.logBatch(w, body)
	default:
		f.fail(w, http.StatusNotFound, "ENDPOINT_NOT_FOUND", "no endpoint %s", r.URL.Path)
	}
}

func (f *MLflow) runJSON(run *MLflowRun) map[string]any {
	var params, tags []map[string]string
	for k, v := range run.Params {
		params = append(params, map[string]string{"key": k, "value": v})
	}
	for k, v := range run.Tags {
		tags = append(tags, map[string]string{"key": k, "value": v})
	}
	return map[string]any{"info": map[string]any{"run_id": run.ID, "run_uuid": run.ID, "experiment_id": run.ExperimentID, "run_name": run.Name, "status": run.Status, "lifecycle_stage": "active"},
		"data": map[string]any{"params": params, "tags": tags}}
}

// logBatch validates the whole batch first (a batch is all or nothing),
// then applies it.
func (f *MLflow) logBatch(w http.ResponseWriter, body map[string]any) {
	run := f.runs[fmt.Sprint(body["run_id"])]
	if run == nil {
		f.fail(w, http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST", "Run '%v' not found", body["run_id"])
		return
	}
	list := func(k string) []map[string]any {
		xs, _ := body[k].([]any)
		out := make([]map[string]any, 0, len(xs))
		for _, x := range xs {
			m, _ := x.(map[string]any)
			out = append(out, m)
		}
		return out
	}
	metrics, params, tags := list("metrics"), list("params"), list("tags")
	bad := func(format string, args ...any) {
		f.fail(w, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", format, args...)
	}
	switch {
	case len(metrics) > 1000:
		bad("A batch logging request can contain at most 1000 metrics. Got %d metrics.", len(metrics))
		return
	case len(params) > 100:
		bad("A batch logging request can contain at most 100 params. Got %d params.", len(params))
		return
	case len(tags) > 100:
		bad("A batch logging request can contain at most 100 tags. Got %d tags.", len(tags))
		return
	case len(metrics)+len(params)+len(tags) > 1000:
		bad("A batch logging request can contain at most 1000 metrics, params, and tags in total.")
		return
	}
	var newMetrics []MLflowMetric
	for _, m := range metrics {
		k, _ := m["key"].(string)
		if !validKey(k) {
			bad("Invalid metric name: '%s'. Names may only contain alphanumerics, underscores (_), dashes (-), periods (.), spaces ( ), colon(:) and slashes (/).", k)
			return
		}
		var v float64
		switch x := m["value"].(type) {
		case float64:
			v = x
		case string:
			switch x {
			case "NaN":
				v = math.NaN()
			case "Infinity":
				v = math.Inf(1)
			case "-Infinity":
				v = math.Inf(-1)
			default:
				bad("Got invalid value %q for metric '%s'", x, k)
				return
			}
		default:
			bad("Got invalid value %v for metric '%s'", m["value"], k)
			return
		}
		ts, ok1 := m["timestamp"].(float64)
		step, ok2 := m["step"].(float64)
		if !ok1 || !ok2 {
			bad("Missing value for required parameter 'timestamp' or 'step' of metric '%s'", k)
			return
		}
		newMetrics = append(newMetrics, MLflowMetric{Key: k, Value: v, Timestamp: int64(ts), Step: int64(step)})
	}
	newParams := map[string]string{}
	for _, p := range params {
		k, _ := p["key"].(string)
		v, _ := p["value"].(string)
		if !validKey(k) {
			bad("Invalid param name: '%s'.", k)
			return
		}
		if len(v) > f.ParamLimit {
			bad("Param value '%s...' had length %d, which exceeded length limit of %d", v[:20], len(v), f.ParamLimit)
			return
		}
		if old, ok := run.Params[k]; ok && old != v {
			bad("Changing param values is not allowed. Param with key='%s' was already logged with value='%s' for run ID='%s'. Attempted logging new value '%s'.", k, old, run.ID, v)
			return
		}
		newParams[k] = v
	}
	newTags := map[string]string{}
	for _, t := range tags {
		k, _ := t["key"].(string)
		v, _ := t["value"].(string)
		if !validKey(k) || len(v) > 8000 {
			bad("Invalid tag '%s'", k)
			return
		}
		newTags[k] = v
	}
	run.Metrics = append(run.Metrics, newMetrics...)
	for k, v := range newParams {
		run.Params[k] = v
	}
	for k, v := range newTags {
		run.Tags[k] = v
	}
	run.Batches++
	f.ok(w, map[string]any{})
}
