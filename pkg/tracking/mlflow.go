package tracking

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// MLflowSettings are the MLflow settings the program read (MLFLOW_*).
type MLflowSettings struct {
	TrackingURI        string
	Token              string
	Username, Password string
	ExperimentName     string
	RunID              string
}

// MLflow's limits (mlflow/utils/validation.py).
const (
	mlflowMaxMetrics   = 1000
	mlflowMaxParams    = 100
	mlflowMaxTags      = 100
	mlflowMaxBytes     = 1 << 20
	mlflowMaxKey       = 250
	mlflowMaxParamVal  = 500 // older servers' limit; current ones take 6000
	mlflowMaxTagVal    = 8000
	mlflowBatchReserve = 64 << 10
)

type mlflowSink struct {
	set    MLflowSettings
	base   *url.URL // the tracking URI without user information
	http   *http.Client
	now    func() time.Time
	notify func(string)
	st     *stateFile

	experiment          string
	experimentID, runID string
	runName             string
	params              [][2]string // cleaned key, value, still to log
	created, resume     bool
	resumedAt, last     int
	truncated, changed  int
	lastTruncatedKey    string
}

func openMLflow(ctx context.Context, spec Spec, st *stateFile) (Sink, error) {
	set := spec.MLflow
	u, err := checkMLflow(set)
	if err != nil {
		return nil, err
	}
	if u.User != nil {
		if set.Username == "" {
			set.Username = u.User.Username()
			set.Password, _ = u.User.Password()
		}
		u.User = nil
	}
	m := &mlflowSink{set: set, base: u, http: spec.HTTP, now: spec.Now, notify: spec.Notify, st: st,
		experiment: firstOf(set.ExperimentName, spec.Project, "Default"), runName: spec.Name, resumedAt: spec.ResumedAt, last: -1 << 62}
	m.runID = set.RunID
	if d := st.get().MLflow; spec.ResumedAt >= 0 && d != nil && d.RunID != "" && (m.runID == "" || m.runID == d.RunID) {
		m.runID, m.resume, m.experimentID = d.RunID, true, d.ExperimentID
	}
	m.params = mlflowParams(spec.Config, &m.truncated, &m.lastTruncatedKey)
	if m.truncated > 0 {
		spec.Notify(fmt.Sprintf("mlflow: %d config values longer than %d characters are logged cut to that length (e.g. %s)", m.truncated, mlflowMaxParamVal, m.lastTruncatedKey))
	}
	return newQueue(m, spec, m.begin), nil
}

// begin is the queue's first call: the experiment found or created (which
// checks the credentials), then the run created or resumed.
func (m *mlflowSink) begin(ctx context.Context) error {
	err := m.ensureRun(ctx)
	if err != nil && !retryable(err) {
		if _, ok := err.(*usererr.Error); ok {
			return err
		}
		return usererr.Errorf("mlflow: %v", err)
	}
	return err
}

// checkMLflow refuses MLflow settings that cannot work, without sending
// anything; it returns the tracking URI.
func checkMLflow(set MLflowSettings) (*url.URL, error) {
	if set.TrackingURI == "" {
		return nil, usererr.Errorf("trainer.logger includes mlflow but MLFLOW_TRACKING_URI is not set; give the tracking server's URL (e.g. http://localhost:5000)")
	}
	u, err := url.Parse(strings.TrimRight(set.TrackingURI, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usererr.Errorf("MLFLOW_TRACKING_URI: %s is not an http(s) URL; rllm speaks MLflow's REST API, so give a tracking server's URL (mlflow server), not a local path or databricks", Redact(set.TrackingURI))
	}
	return u, nil
}

func (m *mlflowSink) name() string { return MLflow }
func (m *mlflowSink) maxRows() int { return 100 }

func (m *mlflowSink) credentialVar() string {
	switch {
	case m.set.Token != "":
		return "MLFLOW_TRACKING_TOKEN"
	case m.set.Username != "":
		return "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD"
	}
	return ""
}

func (m *mlflowSink) request(ctx context.Context, method, route string, body any, out any) error {
	u := m.base.String() + "/api/2.0/mlflow/" + route
	req, err := newJSONRequest(method, u, body)
	if err != nil {
		return err
	}
	switch {
	case m.set.Token != "":
		req.Header.Set("Authorization", "Bearer "+m.set.Token)
	case m.set.Username != "":
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(m.set.Username+":"+m.set.Password)))
	}
	err = call(ctx, m.http, "MLflow at "+m.base.String(), req, out)
	if se, ok := err.(*sendError); ok && (se.status == http.StatusUnauthorized || se.status == http.StatusForbidden) {
		if v := m.credentialVar(); v != "" {
			return usererr.Errorf("mlflow: %s refuses the credentials in %s (%d); check them", m.base, v, se.status)
		}
		return usererr.Errorf("mlflow: %s asks for credentials (%d); set MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD", m.base, se.status)
	}
	return err
}

// mlflowErrorCode is the error_code of an MLflow error answer.
func mlflowErrorCode(err error) string {
	se, ok := err.(*sendError)
	if !ok {
		return ""
	}
	var e struct {
		Code string `json:"error_code"`
	}
	json.Unmarshal([]byte(se.body), &e)
	return e.Code
}

// ensureRun finds or creates the experiment, then creates the run, or
// resumes it (status RUNNING again, the params it has not logged again).
func (m *mlflowSink) ensureRun(ctx context.Context) error {
	if m.created {
		return nil
	}
	if m.experimentID == "" && m.runID == "" {
		var got struct {
			Experiment struct {
				ID string `json:"experiment_id"`
			} `json:"experiment"`
		}
		err := m.request(ctx, http.MethodGet, "experiments/get-by-name?experiment_name="+url.QueryEscape(m.experiment), nil, &got)
		switch {
		case err == nil:
			m.experimentID = got.Experiment.ID
		case mlflowErrorCode(err) == "RESOURCE_DOES_NOT_EXIST":
			var made struct {
				ID string `json:"experiment_id"`
			}
			err = m.request(ctx, http.MethodPost, "experiments/create", map[string]any{"name": m.experiment}, &made)
			if mlflowErrorCode(err) == "RESOURCE_ALREADY_EXISTS" {
				// Another run created it meanwhile: take that one.
				err = m.request(ctx, http.MethodGet, "experiments/get-by-name?experiment_name="+url.QueryEscape(m.experiment), nil, &got)
				made.ID = got.Experiment.ID
			}
			if err != nil {
				return err
			}
			m.experimentID = made.ID
		default:
			return err
		}
	}
	if m.runID != "" {
		var got struct {
			Run struct {
				Info struct {
					ExperimentID string `json:"experiment_id"`
				} `json:"info"`
				Data struct {
					Params []struct {
						Key   string `json:"key"`
						Value string `json:"value"`
					} `json:"params"`
				} `json:"data"`
			} `json:"run"`
		}
		if err := m.request(ctx, http.MethodGet, "runs/get?run_id="+url.QueryEscape(m.runID), nil, &got); err != nil {
			if mlflowErrorCode(err) == "RESOURCE_DOES_NOT_EXIST" {
				return usererr.Errorf("mlflow: run %s is not on %s (MLFLOW_RUN_ID or the run directory's %s names it); unset MLFLOW_RUN_ID or remove %s", m.runID, m.base, StateFile, StateFile)
			}
			return err
		}
		m.experimentID = got.Run.Info.ExperimentID
		have := map[string]string{}
		for _, p := range got.Run.Data.Params {
			have[p.Key] = p.Value
		}
		var todo [][2]string
		for _, p := range m.params {
			old, ok := have[p[0]]
			switch {
			case !ok:
				todo = append(todo, p)
			case old != p[1]:
				m.changed++
				if m.changed == 1 {
					m.notify(fmt.Sprintf("warning: mlflow: param %s was %q and is now %q; MLflow keeps a param's first value, so the run keeps it", p[0], old, p[1]))
				}
			}
		}
		m.params = todo
		if err := m.request(ctx, http.MethodPost, "runs/update", map[string]any{"run_id": m.runID, "status": "RUNNING"}, nil); err != nil {
			return err
		}
		if d := m.st.get().MLflow; d != nil && d.RunID == m.runID && d.LastStep > m.resumedAt {
			// MLflow cannot remove logged values: keep the first ones of
			// the steps this run redoes, log only the ones after.
			m.last = d.LastStep
			m.notify(fmt.Sprintf("mlflow: steps %d-%d are logged already (MLflow keeps logged values); this run logs from step %d", m.resumedAt+1, d.LastStep, d.LastStep+1))
		}
	} else {
		tags := []map[string]string{{"key": "mlflow.runName", "value": m.runName}, {"key": "mlflow.source.name", "value": "rllm"}, {"key": "mlflow.source.type", "value": "LOCAL"}}
		var made struct {
			Run struct {
				Info struct {
					RunID string `json:"run_id"`
				} `json:"info"`
			} `json:"run"`
		}
		body := map[string]any{"experiment_id": m.experimentID, "run_name": m.runName, "start_time": m.now().UnixMilli(), "tags": tags}
		if err := m.request(ctx, http.MethodPost, "runs/create", body, &made); err != nil {
			return err
		}
		m.runID = made.Run.Info.RunID
	}
	m.created = true
	m.notify(fmt.Sprintf("mlflow: run %s/#/experiments/%s/runs/%s", m.base, m.experimentID, m.runID))
	last := m.last
	return m.st.update(func(d *stateData) {
		if d.MLflow == nil || d.MLflow.RunID != m.runID {
			d.MLflow = &mlflowState{TrackingURI: m.base.String(), ExperimentID: m.experimentID, RunID: m.runID, LastStep: max(last, -1)}
		}
	})
}

// mlflowParams flattens the config to dot keys, cleaned and cut to
// MLflow's limits, in key order.
func mlflowParams(c map[string]any, truncated *int, example *string) [][2]string {
	flat := map[string]string{}
	flatten("", c, flat)
	out := make([][2]string, 0, len(flat))
	for _, k := range slices.Sorted(maps.Keys(flat)) {
		v := flat[k]
		if len(v) > mlflowMaxParamVal {
			v = cutUTF8(v, mlflowMaxParamVal)
			*truncated++
			*example = k
		}
		out = append(out, [2]string{MLflowKey(k), v})
	}
	return out
}

func flatten(prefix string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 && prefix != "" {
			out[prefix] = "{}"
		}
		for k, e := range x {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			flatten(key, e, out)
		}
	case nil:
		out[prefix] = "None"
	case string:
		out[prefix] = x
	case bool:
		out[prefix] = strconv.FormatBool(x)
	case float64:
		out[prefix] = strconv.FormatFloat(x, 'g', -1, 64)
	default:
		b, _ := json.Marshal(x)
		out[prefix] = string(b)
	}
}

func cutUTF8(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// MLflowKey is a metric or param key as MLflow accepts it: only letters,
// digits, _ - . space : and /, "@" written as "_at_" (val/pass@1 becomes
// val/pass_at_1), no path that normalises to another name, at most 250
// characters.
func MLflowKey(k string) string {
	var b strings.Builder
	for _, r := range k {
		switch {
		case r == '@':
			b.WriteString("_at_")
		case r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-. :/", r)):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" {
		s = "_"
	}
	if c := path.Clean(s); c != s || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "../") || s == ".." {
		parts := strings.Split(s, "/")
		var keep []string
		for _, p := range parts {
			switch p {
			case "", ".":
			case "..":
				keep = append(keep, "__")
			default:
				keep = append(keep, p)
			}
		}
		s = strings.Join(keep, "/")
		if s == "" {
			s = "_"
		}
	}
	if len(s) > mlflowMaxKey {
		s = s[:mlflowMaxKey]
	}
	return s
}

// mlflowValue is a metric value as MLflow's clients send it: a JSON
// number, or "NaN", "Infinity", "-Infinity" (protobuf's JSON mapping).
type mlflowValue float64

func (v mlflowValue) MarshalJSON() ([]byte, error) {
	f := float64(v)
	switch {
	case math.IsNaN(f):
		return []byte(`"NaN"`), nil
	case math.IsInf(f, 1):
		return []byte(`"Infinity"`), nil
	case math.IsInf(f, -1):
		return []byte(`"-Infinity"`), nil
	}
	return []byte(strconv.FormatFloat(f, 'g', -1, 64)), nil
}

type mlflowMetric struct {
	Key       string      `json:"key"`
	Value     mlflowValue `json:"value"`
	Timestamp int64       `json:"timestamp"`
	Step      int         `json:"step"`
}

func (m *mlflowSink) logBatch(ctx context.Context, metrics []mlflowMetric, params [][2]string, tags [][2]string) error {
	body := map[string]any{"run_id": m.runID}
	if len(metrics) > 0 {
		body["metrics"] = metrics
	}
	kv := func(s [][2]string) []map[string]string {
		out := make([]map[string]string, len(s))
		for i, p := range s {
			out[i] = map[string]string{"key": p[0], "value": p[1]}
		}
		return out
	}
	if len(params) > 0 {
		body["params"] = kv(params)
	}
	if len(tags) > 0 {
		body["tags"] = kv(tags)
	}
	return m.request(ctx, http.MethodPost, "runs/log-batch", body, nil)
}

// send logs the params still to log (100 a batch), then the rows'
// metrics in batches within MLflow's limits (1000 metrics, 1 MB).
func (m *mlflowSink) send(ctx context.Context, rows []Row, _ []Event) error {
	if err := m.ensureRun(ctx); err != nil {
		return err
	}
	for len(m.params) > 0 {
		n := min(len(m.params), mlflowMaxParams)
		if err := m.logBatch(ctx, nil, m.params[:n], nil); err != nil {
			return err
		}
		m.params = m.params[n:]
	}
	var batch []mlflowMetric
	size, batchLast := 0, m.last
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := m.logBatch(ctx, batch, nil, nil); err != nil {
			return err
		}
		m.last = batchLast
		batch, size = batch[:0], 0
		return m.st.update(func(d *stateData) {
			if d.MLflow != nil && d.MLflow.RunID == m.runID {
				d.MLflow.LastStep = m.last
			}
		})
	}
	for _, r := range rows {
		if r.Step <= m.last {
			continue
		}
		ts := r.Time
		if ts.IsZero() {
			ts = m.now()
		}
		keys := slices.Sorted(maps.Keys(r.Metrics))
		if len(batch)+len(keys) > mlflowMaxMetrics || size > mlflowMaxBytes-mlflowBatchReserve {
			if err := flush(); err != nil {
				return err
			}
		}
		for _, k := range keys {
			mk := MLflowKey(k)
			batch = append(batch, mlflowMetric{Key: mk, Value: mlflowValue(r.Metrics[k]), Timestamp: ts.UnixMilli(), Step: r.Step})
			size += len(mk) + 60
			if len(batch) == mlflowMaxMetrics {
				// One row with more keys than a batch takes: it goes in
				// several, and counts as sent with the last.
				if err := m.logBatch(ctx, batch, nil, nil); err != nil {
					return err
				}
				batch, size = batch[:0], 0
			}
		}
		batchLast = r.Step
	}
	return flush()
}

// finish writes the summary as tags (rllm.summary.<key>) and ends the
// run with its status.
func (m *mlflowSink) finish(ctx context.Context, s Summary) error {
	if err := m.ensureRun(ctx); err != nil {
		return err
	}
	var tags [][2]string
	for _, k := range slices.Sorted(maps.Keys(s.Values)) {
		tags = append(tags, [2]string{MLflowKey("rllm.summary." + k), strconv.FormatFloat(s.Values[k], 'g', -1, 64)})
	}
	for len(tags) > 0 {
		n := min(len(tags), mlflowMaxTags)
		if err := m.logBatch(ctx, nil, nil, tags[:n]); err != nil {
			if retryable(err) {
				return err
			}
			m.notify(fmt.Sprintf("warning: mlflow: summary tags refused: %v", err))
			break
		}
		tags = tags[n:]
	}
	status := s.Status
	if status == "" {
		status = Finished
	}
	return m.request(ctx, http.MethodPost, "runs/update", map[string]any{"run_id": m.runID, "status": string(status), "end_time": m.now().UnixMilli()}, nil)
}
