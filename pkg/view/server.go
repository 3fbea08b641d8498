// Package view is `rllm view`: a read-only web page of the runs under the
// folders it is given — their status and configuration differences,
// metrics charts that follow a live run, the episodes every step kept
// (pkg/episodestore) token by token, and eval results with pass@k.
//
// Every asset is embedded (assets/: the page, and uPlot, vendored from
// npm with its licence), so it works offline. The server never opens a
// path a request names: runs are found by scanning the folders and named
// by id; files are opened only when, symlinks resolved, they are under a
// folder given. Responses are bounded (pages of episodes, windows of
// tokens, clipped texts).
package view

import (
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"mime"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episodestore"
	"github.com/rllm-org/rllm-go/pkg/plot"
	"github.com/rllm-org/rllm-go/pkg/runs"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

//go:embed assets
var assets embed.FS

// Options configure a Server.
type Options struct {
	// Token, when set, is required of every request (the ?token= of the
	// printed URL, then a cookie). Serve sets one for an address other
	// than loopback.
	Token string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Server serves the viewer over the roots.
type Server struct {
	roots []*root
	opts  Options
	now   func() time.Time

	mu      sync.Mutex
	runs    map[string]*run
	order   []*run
	scanned time.Time
	cache   map[string]*cached // parsed files by path
}

type cached struct {
	size    int64
	mtime   time.Time
	value   any
	touched time.Time
}

const maxCached = 256

// New checks the folders and returns a server over them.
func New(dirs []string, opts Options) (*Server, error) {
	s := &Server{opts: opts, now: opts.Now, cache: map[string]*cached{}}
	if s.now == nil {
		s.now = time.Now
	}
	for _, d := range dirs {
		st, err := os.Stat(d)
		if err != nil {
			return nil, usererr.Errorf("rllm view: %s does not exist; give run directories or folders that hold them", d)
		}
		if !st.IsDir() {
			return nil, usererr.Errorf("rllm view: %s is a file; give the folder that holds it", d)
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, err
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, err
		}
		s.roots = append(s.roots, &root{path: abs, real: real})
	}
	return s, nil
}

// rescan refreshes the runs at most once a second.
func (s *Server) rescan(force bool) []*run {
	s.mu.Lock()
	defer s.mu.Unlock()
	if force || s.runs == nil || s.now().Sub(s.scanned) > time.Second {
		order := scan(s.roots)
		m := make(map[string]*run, len(order))
		for _, r := range order {
			m[r.ID] = r
		}
		s.runs, s.order, s.scanned = m, order, s.now()
	}
	return s.order
}

func (s *Server) lookup(id string) (*run, bool) {
	s.rescan(false)
	s.mu.Lock()
	r, ok := s.runs[id]
	s.mu.Unlock()
	if !ok {
		s.rescan(true)
		s.mu.Lock()
		r, ok = s.runs[id]
		s.mu.Unlock()
	}
	return r, ok
}

// load returns parse(path)'s result, reparsed when the file's size or
// time changes. The file must be under the run's root.
func (s *Server) load(r *run, p string, parse func(string) (any, error)) (any, time.Time, error) {
	if !r.root.inside(p) {
		return nil, time.Time{}, errOutside
	}
	st, err := os.Stat(p)
	if err != nil {
		return nil, time.Time{}, err
	}
	s.mu.Lock()
	c, ok := s.cache[p]
	s.mu.Unlock()
	if ok && c.size == st.Size() && c.mtime.Equal(st.ModTime()) {
		s.mu.Lock()
		c.touched = s.now()
		s.mu.Unlock()
		return c.value, st.ModTime(), nil
	}
	v, err := parse(p)
	if err != nil {
		return nil, st.ModTime(), err
	}
	s.mu.Lock()
	if len(s.cache) >= maxCached {
		var oldest string
		for k, c := range s.cache {
			if oldest == "" || c.touched.Before(s.cache[oldest].touched) {
				oldest = k
			}
		}
		delete(s.cache, oldest)
	}
	s.cache[p] = &cached{size: st.Size(), mtime: st.ModTime(), value: v, touched: s.now()}
	s.mu.Unlock()
	return v, st.ModTime(), nil
}

var errOutside = errors.New("not under the folders given")

// metrics is a run's metrics.jsonl, parsed (none when it has none).
func (s *Server) metrics(r *run) ([]plot.Record, time.Time, error) {
	p := filepath.Join(r.dir, runs.MetricsFile)
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil, time.Time{}, nil
	}
	v, mtime, err := s.load(r, p, func(p string) (any, error) {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return plot.ReadMetrics(f, p)
	})
	if err != nil {
		return nil, mtime, err
	}
	return v.([]plot.Record), mtime, nil
}

// entries is the index of one step's (or an eval file's) episodes.
func (s *Server) entries(r *run, phase string, step int) ([]episodestore.Entry, string, error) {
	data, index := r.file, ""
	if r.Kind == "train" {
		dir, ok := r.phases[phase]
		if !ok {
			return nil, "", fmt.Errorf("no phase %q", phase)
		}
		data, index = episodestore.DataPath(dir, step), episodestore.IndexPath(dir, step)
		if !r.root.inside(index) {
			index = ""
		}
	}
	v, _, err := s.load(r, data, func(p string) (any, error) { return episodestore.ReadIndex(p, index) })
	if err != nil {
		return nil, data, err
	}
	return v.([]episodestore.Entry), data, nil
}

// steps lists a phase's kept steps.
func (s *Server) steps(r *run, phase string) []int {
	if r.Kind == "eval" {
		return []int{0}
	}
	dir, ok := r.phases[phase]
	if !ok || !r.root.inside(dir) {
		return nil
	}
	steps, _, _ := episodestore.Steps(dir)
	return steps
}

// Handler is the viewer's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", s.page)
	mux.HandleFunc("/assets/", s.asset)
	mux.HandleFunc("/api/runs", s.apiRuns)
	mux.HandleFunc("/api/metrics", s.apiMetrics)
	mux.HandleFunc("/api/steps", s.apiSteps)
	mux.HandleFunc("/api/episodes", s.apiEpisodes)
	mux.HandleFunc("/api/episode", s.apiEpisode)
	mux.HandleFunc("/api/task", s.apiTask)
	mux.HandleFunc("/api/passk", s.apiPassK)
	return s.guard(mux)
}

const tokenCookie = "rllm_view_token"

// guard refuses what a read-only page never sends, requests without the
// token when one is set, and, on loopback, Host names that are not this
// machine's (DNS rebinding).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "rllm view is read-only", http.StatusMethodNotAllowed)
			return
		}
		if s.opts.Token == "" {
			host := req.Host
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
			host = strings.Trim(host, "[]")
			if ip := net.ParseIP(host); !(host == "localhost" || ip != nil && ip.IsLoopback()) {
				http.Error(w, "rllm view answers requests for localhost only", http.StatusForbidden)
				return
			}
		} else {
			got := req.URL.Query().Get("token")
			if got == "" {
				if c, err := req.Cookie(tokenCookie); err == nil {
					got = c.Value
				}
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) != 1 {
				http.Error(w, "rllm view needs the token of the URL it printed", http.StatusUnauthorized)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: s.opts.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		}
		next.ServeHTTP(w, req)
	})
}

func (s *Server) page(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/" {
		http.NotFound(w, req)
		return
	}
	s.serveAsset(w, "index.html")
}

func (s *Server) asset(w http.ResponseWriter, req *http.Request) {
	name := strings.TrimPrefix(req.URL.Path, "/assets/")
	// Names are the embedded files' own; nothing else is looked up.
	if name == "" || strings.ContainsAny(name, "/\\") || name != path.Clean(name) || strings.HasPrefix(name, ".") {
		http.NotFound(w, req)
		return
	}
	s.serveAsset(w, name)
}

func (s *Server) serveAsset(w http.ResponseWriter, name string) {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		http.Error(w, "404 page not found", http.StatusNotFound)
		return
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "text/plain; charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(b)
}

// maxResponse bounds a JSON answer.
const maxResponse = 16 << 20

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if len(b) > maxResponse {
		http.Error(w, "the answer is larger than the viewer's limit; ask for a smaller page", http.StatusRequestEntityTooLarge)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

func badRequest(w http.ResponseWriter, format string, args ...any) {
	http.Error(w, fmt.Sprintf(format, args...), http.StatusBadRequest)
}

// runOf is the run a request's ?run= names.
func (s *Server) runOf(w http.ResponseWriter, req *http.Request) (*run, bool) {
	id := req.URL.Query().Get("run")
	r, ok := s.lookup(id)
	if !ok {
		http.Error(w, fmt.Sprintf("no run %q under the folders given", id), http.StatusNotFound)
	}
	return r, ok
}

func intParam(req *http.Request, name string, def, lo, hi int) (int, error) {
	v := req.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s=%q: give a whole number from %d to %d", name, v, lo, hi)
	}
	return n, nil
}

func floatParam(req *http.Request, name string) (float64, bool, error) {
	v := req.URL.Query().Get(name)
	if v == "" {
		return 0, false, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) {
		return 0, false, fmt.Errorf("%s=%q: give a number", name, v)
	}
	return f, true, nil
}

func (s *Server) apiRuns(w http.ResponseWriter, req *http.Request) {
	order := s.rescan(false)
	now := s.now()
	sums := make([]runSummary, len(order))
	for i, r := range order {
		sums[i] = s.summarize(r, now)
	}
	configDiffs(order, sums)
	var roots []string
	for _, r := range s.roots {
		roots = append(roots, r.path)
	}
	writeJSON(w, map[string]any{"runs": sums, "roots": roots})
}

// metricRow is a metrics.jsonl record with non-finite values as null.
type metricRow map[string]*float64

func (s *Server) apiMetrics(w http.ResponseWriter, req *http.Request) {
	r, ok := s.runOf(w, req)
	if !ok {
		return
	}
	since, err := intParam(req, "since", -1, -1, math.MaxInt32)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	recs, _, err := s.metrics(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	rows := []metricRow{}
	keys := map[string]bool{}
	for _, rec := range recs {
		for k := range rec.Values {
			keys[k] = true
		}
		if rec.Step <= since {
			continue
		}
		row := metricRow{}
		st := float64(rec.Step)
		row["step"] = &st
		for k, v := range rec.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				row[k] = nil
			} else {
				v := v
				row[k] = &v
			}
		}
		rows = append(rows, row)
	}
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	last := -1
	if len(recs) > 0 {
		last = recs[len(recs)-1].Step
	}
	writeJSON(w, map[string]any{"rows": rows, "keys": names, "last": last})
}

func (s *Server) apiSteps(w http.ResponseWriter, req *http.Request) {
	r, ok := s.runOf(w, req)
	if !ok {
		return
	}
	out := map[string][]int{}
	for _, phase := range []string{episodestore.PhaseTrain, episodestore.PhaseVal, episodestore.PhaseEval} {
		if st := s.steps(r, phase); len(st) > 0 && (r.Kind == "eval") == (phase == episodestore.PhaseEval) {
			out[phase] = st
		}
	}
	writeJSON(w, map[string]any{"phases": out, "kind": r.Kind})
}

// request's phase and step.
// runStep reads a request's run, phase and step, answering the request
// itself when one is wrong (ok false).
func (s *Server) runStep(w http.ResponseWriter, req *http.Request) (r *run, phase string, step int, ok bool) {
	if r, ok = s.runOf(w, req); !ok {
		return nil, "", 0, false
	}
	phase, step, err := phaseStep(req)
	if err != nil {
		badRequest(w, "%v", err)
		return nil, "", 0, false
	}
	return r, phase, step, true
}

func phaseStep(req *http.Request) (string, int, error) {
	phase := req.URL.Query().Get("phase")
	switch phase {
	case episodestore.PhaseTrain, episodestore.PhaseVal, episodestore.PhaseEval:
	case "":
		phase = episodestore.PhaseTrain
	default:
		return "", 0, fmt.Errorf("phase=%q: give train, val or eval", phase)
	}
	step, err := intParam(req, "step", 0, 0, math.MaxInt32)
	return phase, step, err
}

// filter is what the episodes list keeps.
type filter struct {
	minR, maxR     float64
	hasMin, hasMax bool
	term, source   string
	minLen, maxLen int
	correct        string
	task           string
}

func parseFilter(req *http.Request) (filter, error) {
	var f filter
	var err error
	if f.minR, f.hasMin, err = floatParam(req, "min_reward"); err != nil {
		return f, err
	}
	if f.maxR, f.hasMax, err = floatParam(req, "max_reward"); err != nil {
		return f, err
	}
	q := req.URL.Query()
	f.term, f.source, f.correct, f.task = q.Get("term"), q.Get("source"), q.Get("correct"), q.Get("task")
	if f.minLen, err = intParam(req, "min_len", 0, 0, math.MaxInt32); err != nil {
		return f, err
	}
	if f.maxLen, err = intParam(req, "max_len", math.MaxInt32, 0, math.MaxInt32); err != nil {
		return f, err
	}
	return f, nil
}

func (f *filter) keep(e *episodestore.Entry) bool {
	switch {
	case f.hasMin && e.Reward < f.minR, f.hasMax && e.Reward > f.maxR:
		return false
	case f.term != "" && e.Termination != f.term, f.source != "" && e.Source != f.source:
		return false
	case e.ResponseTokens < f.minLen || e.ResponseTokens > f.maxLen:
		return false
	case f.correct == "true" && !e.Correct, f.correct == "false" && e.Correct:
		return false
	case f.task != "" && e.Task != f.task:
		return false
	}
	return true
}

// listed is an index entry as the list shows it.
type listed struct {
	I int `json:"i"`
	episodestore.Entry
}

func (s *Server) apiEpisodes(w http.ResponseWriter, req *http.Request) {
	r, phase, step, ok := s.runStep(w, req)
	if !ok {
		return
	}
	f, err := parseFilter(req)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	offset, err := intParam(req, "offset", 0, 0, math.MaxInt32)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	limit, err := intParam(req, "limit", 50, 1, 500)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	entries, _, err := s.entries(r, phase, step)
	if errors.Is(err, fs.ErrNotExist) {
		http.Error(w, fmt.Sprintf("run %s keeps no %s episodes of step %d", r.Name, phase, step), http.StatusNotFound)
		return
	}
	if err != nil && entries == nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	terms, sources := map[string]int{}, map[string]int{}
	page := []listed{}
	matched := 0
	for i := range entries {
		e := &entries[i]
		terms[e.Termination]++
		sources[e.Source]++
		if !f.keep(e) {
			continue
		}
		if matched >= offset && len(page) < limit {
			page = append(page, listed{I: i, Entry: *e})
		}
		matched++
	}
	note := ""
	if err != nil {
		note = err.Error()
	}
	writeJSON(w, map[string]any{"total": len(entries), "matched": matched, "offset": offset, "episodes": page,
		"terms": terms, "sources": sources, "note": note})
}

func (s *Server) apiPassK(w http.ResponseWriter, req *http.Request) {
	r, phase, step, ok := s.runStep(w, req)
	if !ok {
		return
	}
	entries, _, err := s.entries(r, phase, step)
	if err != nil && entries == nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	writeJSON(w, passAtK(entries))
}
