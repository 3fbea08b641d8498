// Package gateway is the recording proxy between agent programs and the
// policy model. A program that only knows an OpenAI or Anthropic base URL
// calls /sessions/{id}/v1/chat/completions, /v1/completions,
// /v1/responses or /v1/messages; the gateway checks the session's bearer token, pins the
// model and sampling parameters to the session's, asks the sampler (an
// OpenAI-compatible server, the embedded policy, Tinker's sampler: any
// sampler.Sampler) for the reply with its exact token ids and logprobs,
// records one Trace per call and returns to the program only what it
// asked for, as JSON or as a server-sent event stream. Traces become
// episode trajectories token for token (Trajectories).
//
// The sampler is always called without streaming, so the ids and
// logprobs are complete (vLLM loses ids on streamed tool calls); a
// program that asks for a stream gets the finished reply as a stream of
// chunks, so a streamed call records exactly what a non-streamed one does.
package gateway

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes = 16 << 20
	// DefaultMaxSessionBytes bounds what one session's traces hold.
	DefaultMaxSessionBytes = 256 << 20
	DefaultMaxSessions     = 65536
	DefaultMaxTraces       = 4096
	DefaultModel           = "policy"
	DefaultStreamKeepAlive = 10 * time.Second
)

// Options configure a Gateway.
type Options struct {
	// Sampler and Params serve sessions created over HTTP (POST
	// /sessions); sessions opened in process bring their own.
	Sampler sampler.Sampler
	Params  sampler.Params
	// ChatTemplateKwargs are passed with every chat call.
	ChatTemplateKwargs map[string]any
	// Model is the model name replies carry, whatever the client asked
	// for (default "policy").
	Model string
	// MaxBodyBytes bounds a request body (default 16 MiB): a larger one is
	// refused with 413 before it is read.
	MaxBodyBytes int64
	// MaxSessionBytes bounds what a session's traces hold, all its calls
	// together (default 256 MiB; Session.StoredBytes), and the bodies of
	// its count_tokens calls: the call whose body would take it past gets
	// 413.
	MaxSessionBytes int64
	// MaxSessions bounds the sessions alive at once (default 65536).
	MaxSessions int
	// MaxCalls bounds the calls of a session created over HTTP that does
	// not set its own (0: DefaultMaxTraces).
	MaxCalls int
	// AdminToken is required (Authorization: Bearer or x-api-key) to
	// create, list, read and delete sessions over HTTP and to read any
	// session's traces; a session's own token reads that session's traces
	// and nothing else. Empty: New makes a random one (AdminToken), so
	// session management is never open to whoever reaches the port.
	AdminToken string
	// StreamKeepAlive is how often a streamed Responses call repeats
	// response.in_progress while the sampler works (default 10 s), so that
	// clients with an idle timeout between events wait for a slow sample.
	StreamKeepAlive time.Duration
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Gateway records the calls of every session. Create it with New, serve
// its Handler, and open sessions with Open or POST /sessions.
type Gateway struct {
	opts    Options
	mux     *http.ServeMux
	metrics *metrics

	mu       sync.Mutex
	sessions map[string]*Session
}

// New builds a gateway.
func New(opts Options) *Gateway {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxSessionBytes <= 0 {
		opts.MaxSessionBytes = DefaultMaxSessionBytes
	}
	if opts.Model == "" {
		opts.Model = DefaultModel
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.AdminToken == "" {
		opts.AdminToken = "rllm-admin-" + randomHex(24)
	}
	if opts.StreamKeepAlive <= 0 {
		opts.StreamKeepAlive = DefaultStreamKeepAlive
	}
	g := &Gateway{opts: opts, sessions: map[string]*Session{}, metrics: newMetrics()}
	g.metrics.sessions = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rllm_gateway_sessions", Help: "Sessions alive."},
		func() float64 { g.mu.Lock(); defer g.mu.Unlock(); return float64(len(g.sessions)) })
	g.metrics.reg.MustRegister(g.metrics.sessions)
	m := http.NewServeMux()
	m.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	m.Handle("GET /metrics", promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{}))
	m.HandleFunc("POST /sessions", g.createSession)
	m.HandleFunc("GET /sessions", g.listSessions)
	m.HandleFunc("GET /sessions/{id}", g.getSession)
	m.HandleFunc("GET /sessions/{id}/traces", g.getTraces)
	m.HandleFunc("DELETE /sessions/{id}", g.deleteSession)
	m.HandleFunc("POST /sessions/{id}/v1/chat/completions", g.call(endpointChat))
	m.HandleFunc("POST /sessions/{id}/v1/completions", g.call(endpointCompletions))
	m.HandleFunc("POST /sessions/{id}/v1/messages", g.call(endpointMessages))
	m.HandleFunc("POST /sessions/{id}/v1/messages/count_tokens", g.countTokens)
	m.HandleFunc("POST /sessions/{id}/v1/responses", g.call(endpointResponses))
	m.HandleFunc("GET /sessions/{id}/v1/models", g.models)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeOpenAIError(w, http.StatusNotFound, "not_found_error",
			fmt.Sprintf("no route %s %s; agents call /sessions/{session_id}/v1/chat/completions, /v1/completions, /v1/responses or /v1/messages", r.Method, r.URL.Path))
	})
	g.mux = m
	return g
}

// Handler serves the gateway's routes.
func (g *Gateway) Handler() http.Handler { return g.mux }

// SessionConfig is what a session samples with.
type SessionConfig struct {
	// ID names the session ([A-Za-z0-9._:-], at most 128 bytes); empty
	// picks a random one.
	ID string
	// Sampler and Params: nil/zero take the gateway's.
	Sampler sampler.Sampler
	Params  *sampler.Params
	// ChatTemplateKwargs: nil takes the gateway's.
	ChatTemplateKwargs map[string]any
	// MaxCalls bounds the calls the session answers (0: the gateway's
	// MaxCalls, else DefaultMaxTraces); the call after the last is
	// refused with 429 and OnLimit runs once.
	MaxCalls int
	OnLimit  func()
	Metadata map[string]any
	// Stream keys the per-request seeds of a seeded sampler
	// (sampler.WithStream): an episode's calls through the session draw
	// the seeds its calls would draw in-process, in the order they
	// arrive. Empty: the calls share one stream.
	Stream string
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// ErrTooManySessions is returned by Open when MaxSessions are alive.
var ErrTooManySessions = errors.New("the gateway holds its maximum number of sessions")

// Open creates a session. Its Token authenticates its calls.
func (g *Gateway) Open(cfg SessionConfig) (*Session, error) {
	if cfg.ID == "" {
		cfg.ID = "s-" + randomHex(12)
	}
	if !idRE.MatchString(cfg.ID) {
		return nil, fmt.Errorf("session id %q: use 1 to 128 letters, digits, '.', '_', ':' or '-'", cfg.ID)
	}
	if cfg.Sampler == nil {
		cfg.Sampler = g.opts.Sampler
	}
	if cfg.Sampler == nil {
		return nil, errors.New("the gateway has no sampler for this session")
	}
	params := g.opts.Params
	if cfg.Params != nil {
		params = *cfg.Params
	}
	if cfg.ChatTemplateKwargs == nil {
		cfg.ChatTemplateKwargs = g.opts.ChatTemplateKwargs
	}
	if cfg.MaxCalls <= 0 {
		cfg.MaxCalls = g.opts.MaxCalls
	}
	if cfg.MaxCalls <= 0 {
		cfg.MaxCalls = DefaultMaxTraces
	}
	s := &Session{ID: cfg.ID, Token: "rllm-sess-" + randomHex(24), cfg: cfg, params: params, created: g.opts.Now()}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.sessions[cfg.ID]; ok {
		return nil, fmt.Errorf("session %s already exists", cfg.ID)
	}
	if len(g.sessions) >= g.opts.MaxSessions {
		return nil, ErrTooManySessions
	}
	g.sessions[cfg.ID] = s
	return s, nil
}

// Close ends session id: later calls get 404. It reports whether the
// session existed.
func (g *Gateway) Close(id string) bool {
	g.mu.Lock()
	s, ok := g.sessions[id]
	delete(g.sessions, id)
	g.mu.Unlock()
	if ok {
		s.close()
	}
	return ok
}

// Session returns the live session id.
func (g *Gateway) Session(id string) (*Session, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.sessions[id]
	return s, ok
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// bearer is the token of a request: Authorization: Bearer (OpenAI SDKs,
// Anthropic's ANTHROPIC_AUTH_TOKEN) or x-api-key (Anthropic's
// ANTHROPIC_API_KEY).
func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	return strings.TrimSpace(r.Header.Get("X-Api-Key"))
}

func tokenEqual(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// admin reports whether r carries the admin token.
func (g *Gateway) admin(r *http.Request) bool {
	return tokenEqual(bearer(r), g.opts.AdminToken)
}

// refuseNonAdmin answers 401 unless r carries the admin token; it reports
// whether it answered.
func (g *Gateway) refuseNonAdmin(w http.ResponseWriter, r *http.Request, what string) bool {
	if g.admin(r) {
		return false
	}
	writeOpenAIError(w, http.StatusUnauthorized, "authentication_error", what+" needs the gateway's admin token (Authorization: Bearer); a session's token only makes model calls and reads that session's traces")
	return true
}

type createRequest struct {
	SessionID      string         `json:"session_id"`
	Metadata       map[string]any `json:"metadata"`
	SamplingParams *struct {
		Temperature  *float64 `json:"temperature"`
		TopP         *float64 `json:"top_p"`
		TopK         *int     `json:"top_k"`
		MaxTokens    *int     `json:"max_tokens"`
		Stop         []string `json:"stop"`
		StopTokenIDs []int    `json:"stop_token_ids"`
		Seed         *int64   `json:"seed"`
	} `json:"sampling_params"`
	MaxCalls int `json:"max_calls"`
}

// sessionInfo is what POST /sessions and GET /sessions/{id} answer.
type sessionInfo struct {
	SessionID      string         `json:"session_id"`
	URL            string         `json:"url"`
	APIKey         string         `json:"api_key,omitempty"`
	TraceCount     int            `json:"trace_count"`
	CreatedAt      time.Time      `json:"created_at"`
	Metadata       map[string]any `json:"metadata,omitempty"`
	SamplingParams sampler.Params `json:"sampling_params"`
	MaxCalls       int            `json:"max_calls"`
}

func (s *Session) info(withKey bool) sessionInfo {
	in := sessionInfo{SessionID: s.ID, URL: "/sessions/" + s.ID + "/v1", TraceCount: len(s.Traces()),
		CreatedAt: s.created, Metadata: s.cfg.Metadata, SamplingParams: s.params, MaxCalls: s.cfg.MaxCalls}
	if withKey {
		in.APIKey = s.Token
	}
	return in
}

func (g *Gateway) createSession(w http.ResponseWriter, r *http.Request) {
	if g.refuseNonAdmin(w, r, "creating a session") {
		return
	}
	var req createRequest
	if r.ContentLength != 0 {
		body, err := readBody(w, r, g.opts.MaxBodyBytes)
		if err != nil {
			writeBodyError(w, err, writeOpenAIError)
			return
		}
		if len(body) > 0 {
			if err := json.Unmarshal(body, &req); err != nil {
				writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "the session request is not valid JSON: "+err.Error())
				return
			}
		}
	}
	p := g.opts.Params
	if sp := req.SamplingParams; sp != nil {
		if sp.Temperature != nil {
			p.Temperature = *sp.Temperature
		}
		if sp.TopP != nil {
			p.TopP = *sp.TopP
		}
		if sp.TopK != nil {
			p.TopK = *sp.TopK
		}
		if sp.MaxTokens != nil {
			p.MaxTokens = *sp.MaxTokens
		}
		if sp.Stop != nil {
			p.Stop = sp.Stop
		}
		if sp.StopTokenIDs != nil {
			p.StopTokenIDs = sp.StopTokenIDs
		}
		if sp.Seed != nil {
			p.Seed = sp.Seed
		}
		if p.Temperature < 0 || p.TopP <= 0 || p.TopP > 1 || p.MaxTokens < 0 {
			writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "sampling_params: temperature must be >= 0, top_p in (0, 1] and max_tokens >= 0")
			return
		}
	}
	if req.MaxCalls < 0 {
		writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "max_calls must be >= 0")
		return
	}
	s, err := g.Open(SessionConfig{ID: req.SessionID, Params: &p, Metadata: req.Metadata, MaxCalls: req.MaxCalls})
	switch {
	case errors.Is(err, ErrTooManySessions):
		writeOpenAIError(w, http.StatusServiceUnavailable, "overloaded_error", err.Error()+"; delete finished sessions (DELETE /sessions/{id})")
		return
	case err != nil:
		writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, s.info(true))
}

func (g *Gateway) listSessions(w http.ResponseWriter, r *http.Request) {
	if g.refuseNonAdmin(w, r, "listing sessions") {
		return
	}
	g.mu.Lock()
	out := make([]sessionInfo, 0, len(g.sessions))
	for _, s := range g.sessions {
		out = append(out, s.info(false))
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].SessionID < out[j].SessionID })
	writeJSON(w, http.StatusOK, out)
}

// lookup finds the session of r for the admin, or, with allowOwn, for
// the holder of the session's own token. Anyone else gets 401 whether
// the session exists or not, so a token tells nothing of other sessions.
func (g *Gateway) lookup(w http.ResponseWriter, r *http.Request, what string, allowOwn bool) (*Session, bool) {
	id := r.PathValue("id")
	s, ok := g.Session(id)
	if g.admin(r) {
		if !ok {
			writeOpenAIError(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("session %q does not exist (never created, or deleted)", id))
		}
		return s, ok
	}
	if allowOwn && ok && tokenEqual(bearer(r), s.Token) {
		return s, true
	}
	if allowOwn {
		writeOpenAIError(w, http.StatusUnauthorized, "authentication_error", what+" needs the gateway's admin token or this session's own token (Authorization: Bearer)")
	} else {
		g.refuseNonAdmin(w, r, what)
	}
	return nil, false
}

func (g *Gateway) getSession(w http.ResponseWriter, r *http.Request) {
	if s, ok := g.lookup(w, r, "reading a session", false); ok {
		writeJSON(w, http.StatusOK, s.info(false))
	}
}

func (g *Gateway) getTraces(w http.ResponseWriter, r *http.Request) {
	s, ok := g.lookup(w, r, "reading a session's traces", true)
	if !ok {
		return
	}
	// ?since=SEQ returns the calls after SEQ, ?limit=N at most N of them,
	// so a poller need not fetch a long session again.
	since, limit := int64(-1), -1
	q := r.URL.Query()
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "since must be a call's seq (an integer >= 0)")
			return
		}
		since = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "limit must be an integer >= 0")
			return
		}
		limit = n
	}
	out := []Trace{}
	for _, t := range s.Traces() {
		if t.Seq > since && (limit < 0 || len(out) < limit) {
			out = append(out, t)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (g *Gateway) deleteSession(w http.ResponseWriter, r *http.Request) {
	s, ok := g.lookup(w, r, "deleting a session", false)
	if !ok {
		return
	}
	n := 0
	if g.Close(s.ID) {
		n = 1
	}
	writeJSON(w, http.StatusOK, map[string]int{"deleted": n})
}

func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	s, ok := g.Session(r.PathValue("id"))
	if !ok || !tokenEqual(bearer(r), s.Token) {
		writeOpenAIError(w, http.StatusUnauthorized, "authentication_error", "unknown session or wrong token")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{"id": g.opts.Model, "object": "model", "owned_by": "rllm"}}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the response failed","type":"api_error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// errorWriter writes an error in one API's shape.
type errorWriter func(w http.ResponseWriter, status int, typ, msg string)

// writeOpenAIError answers {"error":{message,type,param,code}}. Every
// error carries x-should-retry: false, so an SDK does not repeat a call
// the gateway refused (a retried call would be traced twice).
func writeOpenAIError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("X-Should-Retry", "false")
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": status}})
}

// writeAnthropicError answers {"type":"error","error":{type,message}}.
func writeAnthropicError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("X-Should-Retry", "false")
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

// AdminToken is the token session management over HTTP needs: the one
// of Options, or the random one New made. Whoever starts the gateway
// keeps it; a program never sees it.
func (g *Gateway) AdminToken() string { return g.opts.AdminToken }
