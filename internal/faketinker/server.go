// Package faketinker is an in-process Tinker API server for tests. It
// answers as one of two services (Options.Flavour): hosted Tinker, as the
// Tinker Python SDK 0.25.0 (d595dc2b) expects it, or SkyRL's Tinker server
// at a9564572 (skyrl/tinker/api.py, engine.py), each refusing what that
// service refuses (see flavour.go). It is backed by the embedded policy
// (pkg/backend/local), so
// forward_backward and optim_step really change weights and asample
// really samples from them. It serves one base model, "rllm/embedded-tiny",
// whose tokenizer is the embedded byte-level one (261 ids).
//
// Training requests run per model in seq_id order; a request repeated
// with the same (model_id, seq_id) and body is de-duplicated (answered
// from the first run), one with a different body is a 409. Faults can be
// injected per endpoint (statuses, Retry-After, dropped connections
// before or after the request is processed, pending futures, failed
// results with a category), and every request is logged for tests to
// assert on (seq_id order, each optimizer step applied exactly once).
package faketinker

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
)

// BaseModel is the name the fake serves the embedded policy under.
const BaseModel = "rllm/embedded-tiny" // tinker.EmbeddedModel

// Options configure a fake server.
type Options struct {
	// Flavour is the service answered as: FlavourTinker (the default) or
	// FlavourSkyRL.
	Flavour Flavour
	// APIKey, when set, is the only X-API-Key accepted (else 401).
	APIKey string
	// JWT has hosted Tinker sign in with JWTs (client/config's
	// pjwt_auth_enabled): auth/token exchanges the key for a JWT living
	// JWTLife (0 means an hour), and every other call takes only a live
	// one. CredentialCmd sets credential_default_source "credential_cmd".
	JWT           bool
	JWTLife       time.Duration
	CredentialCmd bool
	// Now is the clock JWTs are issued and checked by (nil: time.Now).
	Now func() time.Time
	// Model sizes the embedded policy; the zero value is a tiny model
	// (1 layer, d_model 32, context 64).
	Model local.Config
	// Losses, when set, restricts the losses served and lists them as
	// supported_loss_fns (neither real service lists losses; nil means
	// the embedded policy's built-ins, unlisted).
	Losses []string
	// OmitContext leaves max_context_length out of the capabilities.
	OmitContext bool
	// ExtraModels are further names listed in the capabilities.
	ExtraModels []string
	// PollWait is how long retrieve_future holds a pending request before
	// answering try_again; 0 means 2 s.
	PollWait time.Duration
	// Dir holds saved checkpoints; empty means a temporary directory
	// removed by Close.
	Dir string
	// TrainingLatency is how long each training request (forward,
	// forward_backward, optim_step, save and load) takes to run once its
	// turn comes, as on a real accelerator; requests keep running after
	// the client stops waiting, as on the real service.
	TrainingLatency time.Duration
	// OnRequest, when set, is called with the endpoint name of every
	// request as it arrives, before it is handled (a test's Ctrl-C at an
	// exact point).
	OnRequest func(name string)
	// Delays inject training and sampling latency (delays.go).
	Delays Delays
}

// The Tinker SDK's limits on one forward or forward_backward request; the
// fake refuses a request over them, so a client must chunk as the SDK
// does.
const (
	MaxChunkDatums  = 128
	MaxChunkNumbers = 500_000
)

// FaultKind is what goes wrong.
type FaultKind int

// The faults the fake injects.
const (
	// FaultStatus answers Status (with RetryAfter, if set) without
	// processing the request. On retrieve_future, 410 also forgets the
	// future, as an expired promise.
	FaultStatus FaultKind = iota + 1
	// FaultDropBefore closes the connection without processing.
	FaultDropBefore
	// FaultDropAfter processes the request, then closes the connection
	// instead of answering (the client cannot know it was received).
	FaultDropAfter
	// FaultFail makes the request's future fail with {error, category}
	// (a training request still takes its seq_id).
	FaultFail
	// FaultPending makes the request's future answer try_again for
	// Polls polls before its result.
	FaultPending
	// FaultArchive makes a checkpoint download (Path "download") serve
	// Body instead of the real archive.
	FaultArchive
	// FaultHang accepts the request and never answers it (until the
	// client gives up or the server closes).
	FaultHang
)

// Fault is one injected failure; it hits the next Times requests to Path
// (an endpoint name such as "optim_step" or "retrieve_future"; for
// retrieve_future, ForPath narrows it to futures of one endpoint).
type Fault struct {
	Path       string
	ForPath    string
	Kind       FaultKind
	Status     int
	RetryAfter string
	Category   string
	Message    string
	Polls      int
	Times      int
	// Body is what FaultArchive serves.
	Body []byte
}

// Entry is one logged request.
type Entry struct {
	Path      string
	ModelID   string
	SeqID     int
	RequestID string
	// Status is the HTTP status answered (0 for a dropped connection).
	Status int
	// Dup marks a training request answered from an earlier run of the
	// same (model_id, seq_id).
	Dup bool
	// APIKey is the X-API-Key the request carried.
	APIKey string
}

// Execution is a training request the fake actually ran.
type Execution struct {
	ModelID string
	SeqID   int
	Path    string
	Failed  bool
}

// Server is a running fake.
type Server struct {
	*httptest.Server
	opts    Options
	tempDir bool

	mu        sync.Mutex
	faults    []*Fault
	log       []Entry
	execs     []Execution
	sessions  map[string]int // session id → heartbeats
	models    map[string]*model
	futures   map[string]*future
	samplers  map[string]backend.TokenSampler
	base      backend.TokenSampler
	nextID    int
	nextModel int
	downloads int
	ttls      []int
	jwts      map[string]time.Time // issued JWT → expiry
	exchanges int
	// finished are the checkpoints saved (long tinker:// form);
	// reserved the names SkyRL registers at submit (api.py
	// create_checkpoint), so a resend is a 409.
	finished   map[string]bool
	reserved   map[string]bool
	closing    chan struct{}
	closedOnce sync.Once
}

type model struct {
	id    string
	lb    *local.Backend
	next  int
	bySeq map[int]*entry
	queue []*entry
	wake  chan struct{}
}

type entry struct {
	path string
	hash [32]byte
	fut  *future
	run  func() (any, error)
}

type future struct {
	id      string
	path    string
	done    chan struct{}
	result  []byte
	failed  *Fault
	pending int
}

// New starts a fake server.
func New(opts Options) (*Server, error) {
	if opts.Model == (local.Config{}) {
		opts.Model = local.Config{Layers: 1, DModel: 32, Heads: 2, DFF: 64, Context: 64, Seed: 7}
	}
	if opts.PollWait <= 0 {
		opts.PollWait = 2 * time.Second
	}
	switch opts.Flavour {
	case "":
		opts.Flavour = FlavourTinker
	case FlavourTinker, FlavourSkyRL:
	default:
		return nil, fmt.Errorf("faketinker: unknown flavour %q", opts.Flavour)
	}
	if opts.JWTLife <= 0 {
		opts.JWTLife = time.Hour
	}
	s := &Server{opts: opts, sessions: map[string]int{}, models: map[string]*model{}, futures: map[string]*future{},
		samplers: map[string]backend.TokenSampler{}, closing: make(chan struct{}), jwts: map[string]time.Time{},
		finished: map[string]bool{}, reserved: map[string]bool{}}
	if s.opts.Dir == "" {
		d, err := os.MkdirTemp("", "faketinker-")
		if err != nil {
			return nil, err
		}
		s.opts.Dir, s.tempDir = d, true
	}
	base, err := local.New(local.Options{Name: BaseModel, Config: opts.Model, Workers: 1})
	if err != nil {
		return nil, err
	}
	snap, err := base.PublishSampler(context.Background(), "base").Result(context.Background())
	base.Close()
	if err != nil {
		return nil, err
	}
	s.base = snap
	mux := http.NewServeMux()
	api := func(name string, h func(w http.ResponseWriter, r *http.Request, body []byte)) {
		mux.HandleFunc("/api/v1/"+name, func(w http.ResponseWriter, r *http.Request) { s.serve(name, w, r, h) })
	}
	api("get_server_capabilities", s.capabilities)
	api("client/config", s.clientConfig)
	api("auth/token", s.authToken)
	mux.HandleFunc("GET /api/v1/training_runs/{run}/checkpoints", func(w http.ResponseWriter, r *http.Request) {
		s.serve("list_checkpoints", w, r, func(w http.ResponseWriter, r *http.Request, _ []byte) {
			s.listCheckpoints(w, r.PathValue("run"))
		})
	})
	api("healthz", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeJSON(w, 200, map[string]string{"status": "ok"})
	})
	api("create_session", decoded("create_session", s.createSession))
	api("session_heartbeat", decoded("session_heartbeat", s.heartbeat))
	api("create_model", decoded("create_model", s.createModel))
	api("get_info", decoded("get_info", s.getInfo))
	api("unload_model", decoded("unload_model", s.unloadModel))
	for _, p := range []string{"forward_backward", "forward", "optim_step", "save_weights", "load_weights", "save_weights_for_sampler"} {
		api(p, func(w http.ResponseWriter, r *http.Request, body []byte) { s.training(p, w, r, body) })
	}
	api("asample", s.sample)
	api("retrieve_future", decoded("retrieve_future", s.retrieve))
	// Hosted Tinker's archive route takes the checkpoint as KIND/NAME
	// (SDK 0.25 resources/weights.py); SkyRL's one segment, sampler
	// weights only, with its download under the API (api.py
	// get_checkpoint_archive_url, download_checkpoint_archive). Each
	// flavour answers the other's route 404, as FastAPI does for a path
	// it has no route for.
	mux.HandleFunc("GET /api/v1/training_runs/{run}/checkpoints/{kind}/{name}/archive", func(w http.ResponseWriter, r *http.Request) {
		s.serve("archive", w, r, func(w http.ResponseWriter, r *http.Request, _ []byte) {
			if s.skyrl() {
				notFound(w)
				return
			}
			s.archive(w, r, r.PathValue("run"), r.PathValue("kind"), r.PathValue("name"))
		})
	})
	mux.HandleFunc("GET /api/v1/training_runs/{run}/checkpoints/{name}/archive", func(w http.ResponseWriter, r *http.Request) {
		s.serve("archive", w, r, func(w http.ResponseWriter, r *http.Request, _ []byte) {
			if !s.skyrl() {
				notFound(w)
				return
			}
			s.archive(w, r, r.PathValue("run"), "sampler_weights", r.PathValue("name"))
		})
	})
	mux.HandleFunc("GET /download/{run}/{kind}/{name}", s.download)
	mux.HandleFunc("GET /api/v1/training_runs/{run}/checkpoints/{name}/download", func(w http.ResponseWriter, r *http.Request) {
		r.SetPathValue("kind", "sampler_weights")
		s.download(w, r)
	})
	mux.HandleFunc("DELETE /api/v1/training_runs/{run}/checkpoints/{kind}/{name}", func(w http.ResponseWriter, r *http.Request) {
		s.serve("delete_checkpoint", w, r, func(w http.ResponseWriter, r *http.Request, _ []byte) {
			s.deleteCheckpoint(w, r.PathValue("run"), r.PathValue("kind"), r.PathValue("name"))
		})
	})
	s.Server = httptest.NewServer(mux)
	return s, nil
}

// Close stops the server and releases the models.
func (s *Server) Close() {
	s.closedOnce.Do(func() { close(s.closing) })
	s.Server.Close()
	s.mu.Lock()
	models := s.models
	s.models = map[string]*model{}
	s.mu.Unlock()
	for _, m := range models {
		m.lb.Close()
	}
	if s.tempDir {
		os.RemoveAll(s.opts.Dir)
	}
}

// Inject adds a fault (Times 0 means once).
func (s *Server) Inject(f Fault) {
	if f.Times == 0 {
		f.Times = 1
	}
	s.mu.Lock()
	s.faults = append(s.faults, &f)
	s.mu.Unlock()
}

// ClearFaults removes the faults not yet consumed (a hang meant for one
// run, before the next).
func (s *Server) ClearFaults() {
	s.mu.Lock()
	s.faults = nil
	s.mu.Unlock()
}

// takeFault consumes the first fault matching the endpoint (and, for
// retrieve_future, the future's endpoint).
func (s *Server) takeFault(path, forPath string, kinds ...FaultKind) *Fault {
	for i, f := range s.faults {
		if f.Path != path || (f.ForPath != "" && f.ForPath != forPath) || (len(kinds) > 0 && !slices.Contains(kinds, f.Kind)) {
			continue
		}
		f.Times--
		if f.Times <= 0 {
			s.faults = slices.Delete(s.faults, i, i+1)
		}
		c := *f
		return &c
	}
	return nil
}

// Log is every request so far, in arrival order.
func (s *Server) Log() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// Executions are the training requests that ran, in order.
func (s *Server) Executions() []Execution {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.execs)
}

// Heartbeats counts the heartbeats of a session.
func (s *Server) Heartbeats(sessionID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[sessionID]
}

// Model is the embedded policy behind a model id (nil if unknown).
func (s *Server) Model(id string) *local.Backend {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.models[id]; m != nil {
		return m.lb
	}
	return nil
}

// ModelIDs lists the models created so far.
func (s *Server) ModelIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.models))
}

type logCtx struct {
	entry  *Entry
	status int
	dropAf bool
}

// serve authenticates, applies status and drop faults, reads the body and
// logs the request.
func (s *Server) serve(name string, w http.ResponseWriter, r *http.Request, h func(http.ResponseWriter, *http.Request, []byte)) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<30))
	if err != nil {
		return
	}
	if s.opts.OnRequest != nil {
		s.opts.OnRequest(name)
	}
	e := Entry{Path: name, APIKey: r.Header.Get("X-API-Key")}
	var probe struct {
		ModelID   string `json:"model_id"`
		SeqID     int    `json:"seq_id"`
		RequestID string `json:"request_id"`
	}
	_ = json.Unmarshal(body, &probe)
	e.ModelID, e.SeqID, e.RequestID = probe.ModelID, probe.SeqID, probe.RequestID
	forPath := ""
	s.mu.Lock()
	if f := s.futures[probe.RequestID]; f != nil {
		forPath = f.path
	}
	fault := s.takeFault(name, forPath, FaultStatus, FaultDropBefore, FaultDropAfter, FaultHang)
	s.mu.Unlock()
	rec := &recorder{ResponseWriter: w}
	defer func() {
		s.mu.Lock()
		e.Status = rec.status
		if rec.dup {
			e.Dup = true
		}
		s.log = append(s.log, e)
		s.mu.Unlock()
	}()
	if msg := s.authenticate(name, r.Header.Get("X-API-Key")); msg != "" {
		writeJSON(rec, http.StatusUnauthorized, map[string]string{"detail": msg})
		return
	}
	if fault != nil {
		switch fault.Kind {
		case FaultStatus:
			if fault.RetryAfter != "" {
				w.Header().Set("Retry-After", fault.RetryAfter)
			}
			if name == "retrieve_future" && fault.Status == http.StatusGone {
				s.mu.Lock()
				delete(s.futures, probe.RequestID)
				s.mu.Unlock()
			}
			msg := fault.Message
			if msg == "" {
				msg = http.StatusText(fault.Status)
			}
			writeJSON(rec, fault.Status, map[string]string{"detail": msg})
			return
		case FaultDropBefore:
			drop(w)
			return
		case FaultHang:
			select {
			case <-r.Context().Done():
			case <-s.closing:
			}
			return
		case FaultDropAfter:
			h(&discardWriter{header: http.Header{}, rec: rec}, r, body)
			rec.status = 0
			drop(w)
			return
		}
	}
	h(rec, r, body)
}

type recorder struct {
	http.ResponseWriter
	status int
	dup    bool
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// discardWriter runs a handler whose answer is then dropped.
type discardWriter struct {
	header http.Header
	rec    *recorder
}

func (d *discardWriter) Header() http.Header         { return d.header }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(code int)        { d.rec.status = code }

// markDup flags the logged entry of a de-duplicated request.
func markDup(w http.ResponseWriter) {
	switch x := w.(type) {
	case *recorder:
		x.dup = true
	case *discardWriter:
		x.rec.dup = true
	}
}

func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		conn.Close()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func badRequest(w http.ResponseWriter, format string, args ...any) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"detail": fmt.Sprintf(format, args...)})
}

// decodeStrict reads a body, refusing unknown fields so tests catch a
// misspelt wire name.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// decodeCall reads the body of call name strictly into its wire type T,
// after checking it carries the fields required lists for the call.
func decodeCall[T any](name string, body []byte) (*T, error) {
	if err := requireFields(body, required[name]...); err != nil {
		return nil, err
	}
	var v T
	if err := decodeStrict(body, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// decoded is the handler of call name, whose body decodes into T (see
// decodeCall): a body that does not is a 400 naming the call.
func decoded[T any](name string, h func(http.ResponseWriter, *http.Request, *T)) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, r *http.Request, body []byte) {
		req, err := decodeCall[T](name, body)
		if err != nil {
			badRequest(w, "%s: %v", name, err)
			return
		}
		h(w, r, req)
	}
}

func (s *Server) capabilities(w http.ResponseWriter, r *http.Request, _ []byte) {
	if r.Method != http.MethodGet {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"detail": "GET only"})
		return
	}
	// SkyRL's SupportedModel is model_name only (api.py at a9564572);
	// hosted Tinker gives max_context_length (SDK 0.25
	// GetServerCapabilitiesResponse).
	m := map[string]any{"model_name": BaseModel}
	if !s.opts.OmitContext && !s.skyrl() {
		m["max_context_length"] = s.opts.Model.Context
	}
	models := []any{m}
	for _, x := range s.opts.ExtraModels {
		e := map[string]any{"model_name": x}
		if !s.skyrl() {
			e["max_context_length"] = 32768
		}
		models = append(models, e)
	}
	out := map[string]any{"supported_models": models}
	if s.opts.Losses != nil {
		out["supported_loss_fns"] = s.opts.Losses
	}
	writeJSON(w, 200, out)
}

func (s *Server) createSession(w http.ResponseWriter, _ *http.Request, _ *wire.CreateSessionRequest) {
	s.mu.Lock()
	s.nextID++
	id := "session-" + strconv.Itoa(s.nextID)
	s.sessions[id] = 0
	s.mu.Unlock()
	writeJSON(w, 200, wire.CreateSessionResponse{SessionID: id})
}

func (s *Server) heartbeat(w http.ResponseWriter, _ *http.Request, req *wire.SessionRequest) {
	s.mu.Lock()
	_, ok := s.sessions[req.SessionID]
	if ok {
		s.sessions[req.SessionID]++
	}
	s.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "unknown session"})
		return
	}
	writeJSON(w, 200, map[string]string{"type": "session_heartbeat"})
}

// newFuture registers a future; the caller resolves it.
func (s *Server) newFuture(path string) *future {
	s.nextID++
	f := &future{id: "req-" + strconv.Itoa(s.nextID), path: path, done: make(chan struct{})}
	if pf := s.takeFault(path, "", FaultPending); pf != nil {
		f.pending = pf.Polls
	}
	if ff := s.takeFault(path, "", FaultFail); ff != nil {
		f.failed = ff
	}
	s.futures[f.id] = f
	return f
}

func resolve(f *future, v any, err error) {
	if f.failed == nil {
		if err != nil {
			f.failed = &Fault{Category: "user", Message: err.Error()}
		} else {
			b, merr := json.Marshal(v)
			if merr != nil {
				f.failed = &Fault{Category: "server", Message: merr.Error()}
			} else {
				f.result = b
			}
		}
	}
	close(f.done)
}

// createModelBody is create_model's body with lora_config kept raw, to
// be read as the flavour reads it.
type createModelBody struct {
	Type       string          `json:"type"`
	SessionID  string          `json:"session_id"`
	ModelSeqID int             `json:"model_seq_id"`
	BaseModel  string          `json:"base_model"`
	LoRAConfig json.RawMessage `json:"lora_config"`
}

func (s *Server) createModel(w http.ResponseWriter, _ *http.Request, req *createModelBody) {
	var rank int
	var seed *int64
	if s.skyrl() {
		// SkyRL's LoRAConfig is rank and seed (api.py at a9564572); the
		// targets an SDK sends would be dropped, so the fake refuses them.
		var lc wire.SkyRLLoRAConfig
		if err := decodeStrict(req.LoRAConfig, &lc); err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "lora_config: SkyRL reads only rank and seed (its LoRA targets are fixed, alpha 32): " + err.Error()})
			return
		}
		rank, seed = lc.Rank, lc.Seed
	} else {
		var lc wire.LoRAConfig
		if err := decodeStrict(req.LoRAConfig, &lc); err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "lora_config: " + err.Error()})
			return
		}
		rank, seed = lc.Rank, lc.Seed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[req.SessionID]; !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Session not found"})
		return
	}
	if rank < 1 {
		badRequest(w, "lora_config.rank is required")
		return
	}
	if req.BaseModel != BaseModel {
		badRequest(w, "base model %q is not supported", req.BaseModel)
		return
	}
	s.nextModel++
	id := fmt.Sprintf("model-%d", s.nextModel)
	cfg := s.opts.Model
	if seed != nil {
		cfg.Seed = *seed
	}
	lb, err := local.New(local.Options{Name: id, Config: cfg, Workers: 1})
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	m := &model{id: id, lb: lb, next: 1, bySeq: map[int]*entry{}, wake: make(chan struct{}, 1)}
	s.models[id] = m
	go s.work(m)
	f := s.newFuture("create_model")
	resolve(f, wire.ModelIDResult{ModelID: id}, nil)
	if s.skyrl() {
		// api.py CreateModelResponse.
		writeJSON(w, 200, map[string]any{"model_id": id, "base_model": req.BaseModel, "lora_config": map[string]any{"rank": rank, "seed": seed},
			"status": "created", "request_id": f.id})
		return
	}
	writeJSON(w, 200, wire.SubmitResponse{RequestID: f.id, ModelID: id})
}

func (s *Server) getInfo(w http.ResponseWriter, _ *http.Request, req *wire.ModelRequest) {
	s.mu.Lock()
	_, ok := s.models[req.ModelID]
	s.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "model not found"})
		return
	}
	writeJSON(w, 200, map[string]any{"model_id": req.ModelID, "model_data": map[string]string{
		"arch": "rllm-embedded", "model_name": BaseModel, "tokenizer_id": local.TokenizerID}, "is_lora": true, "lora_rank": 1, "model_name": BaseModel})
}

func (s *Server) unloadModel(w http.ResponseWriter, _ *http.Request, req *wire.ModelRequest) {
	s.mu.Lock()
	m, ok := s.models[req.ModelID]
	f := s.newFuture("unload_model")
	s.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "model not found"})
		return
	}
	// The weights stay for tests to inspect; the model just stops
	// accepting work once its queue drains.
	_ = m
	resolve(f, map[string]string{"type": "unload_model"}, nil)
	writeJSON(w, 200, wire.SubmitResponse{RequestID: f.id})
}

func (s *Server) retrieve(w http.ResponseWriter, r *http.Request, req *wire.RetrieveFutureRequest) {
	s.mu.Lock()
	f := s.futures[req.RequestID]
	if f != nil && f.pending > 0 {
		f.pending--
		s.mu.Unlock()
		writeJSON(w, 200, wire.TryAgain{Type: "try_again", RequestID: f.id, QueueState: "paused_capacity"})
		return
	}
	s.mu.Unlock()
	if f == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "unknown request " + req.RequestID})
		return
	}
	t := time.NewTimer(s.opts.PollWait)
	defer t.Stop()
	select {
	case <-f.done:
	case <-t.C:
		writeJSON(w, 200, map[string]string{"type": "try_again", "request_id": f.id, "queue_state": "active"})
		return
	case <-r.Context().Done():
		return
	case <-s.closing:
		return
	}
	if f.failed != nil {
		cat := f.failed.Category
		if cat == "" {
			cat = "user"
		}
		msg := f.failed.Message
		if msg == "" {
			msg = "injected failure"
		}
		if s.skyrl() {
			// SkyRL: a failed request is HTTP 400 {detail} (api.py
			// retrieve_future), with no category.
			badRequest(w, "%s", msg)
			return
		}
		writeJSON(w, 200, map[string]string{"error": msg, "category": cat})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	w.Write(f.result)
}

// archiveDir is where a checkpoint of a model is kept.
func (s *Server) checkpointDir(run, kind, name string) string {
	return filepath.Join(s.opts.Dir, run, kind, name)
}

// parseTinkerPath parses tinker://RUN/KIND/NAME and, for SkyRL,
// tinker://MODEL_ID/CHECKPOINT_ID (a sampler checkpoint: skyrl/tinker/
// types.py TinkerPath.parse, accepted by api.py asample).
func parseTinkerPath(p string, skyrl bool) (run, kind, name string, ok bool) {
	rest, found := strings.CutPrefix(p, "tinker://")
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(rest, "/")
	if skyrl && len(parts) == 2 && parts[0] != "" && parts[1] != "" {
		return parts[0], "sampler_weights", parts[1], true
	}
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" || (parts[1] != "weights" && parts[1] != "sampler_weights") {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

func (s *Server) archive(w http.ResponseWriter, r *http.Request, run, kind, name string) {
	if kind != "sampler_weights" && kind != "weights" {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "unknown checkpoint kind " + kind})
		return
	}
	if _, err := os.Stat(s.checkpointDir(run, kind, name)); err != nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": fmt.Sprintf("checkpoint %s/%s of %s not found", kind, name, run)})
		return
	}
	w.Header().Set("Expires", time.Now().Add(2*time.Hour).UTC().Format(http.TimeFormat))
	if s.skyrl() {
		// api.py: a 302 to its own download route.
		http.Redirect(w, r, "/api/v1/training_runs/"+run+"/checkpoints/"+name+"/download", http.StatusFound)
		return
	}
	// Hosted: a 302 to a signed URL elsewhere.
	http.Redirect(w, r, "/download/"+run+"/"+kind+"/"+name, http.StatusFound)
}

// download serves a checkpoint as a PEFT adapter tarball:
// adapter_config.json and adapter_model.safetensors.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.downloads++
	f := s.takeFault("download", "", FaultStatus, FaultDropBefore)
	body := s.takeFault("download", "", FaultArchive)
	s.mu.Unlock()
	if f != nil {
		if f.Kind == FaultDropBefore {
			drop(w)
			return
		}
		writeJSON(w, f.Status, map[string]string{"detail": "injected"})
		return
	}
	if body != nil {
		w.Header().Set("Content-Type", "application/gzip")
		w.Write(body.Body)
		return
	}
	dir := s.checkpointDir(r.PathValue("run"), r.PathValue("kind"), r.PathValue("name"))
	weights, err := os.ReadFile(filepath.Join(dir, local.WeightsFile))
	if err != nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "checkpoint not found"})
		return
	}
	cfg, _ := json.Marshal(map[string]any{
		"peft_type": "LORA", "base_model_name_or_path": BaseModel, "r": 1, "lora_alpha": 32,
		"target_modules": []string{"attn.wqkv", "attn.wo", "mlp.w1", "mlp.w2"}, "task_type": "CAUSAL_LM",
	})
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name string
		data []byte
	}{{"adapter_config.json", cfg}, {"adapter_model.safetensors", weights}} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg})
		tw.Write(f.data)
	}
	tw.Close()
	gz.Close()
	w.Header().Set("Content-Type", "application/gzip")
	w.Write(buf.Bytes())
}

// Downloads counts archive downloads.
func (s *Server) Downloads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downloads
}

func hashBody(b []byte) [32]byte { return sha256.Sum256(b) }

// deleteCheckpoint is the SDK's RestClient.delete_checkpoint: DELETE
// training_runs/{run}/checkpoints/{kind}/{name}; an unknown one is 404.
func (s *Server) deleteCheckpoint(w http.ResponseWriter, run, kind, name string) {
	if kind != "weights" && kind != "sampler_weights" {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "no checkpoint kind " + kind})
		return
	}
	dir := s.checkpointDir(run, kind, name)
	if _, err := os.Stat(dir); err != nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "checkpoint tinker://" + run + "/" + kind + "/" + name + " not found"})
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"detail": err.Error()})
		return
	}
	s.mu.Lock()
	delete(s.samplers, "tinker://"+run+"/"+kind+"/"+name)
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// Checkpoints lists the saved checkpoints still on the server, as
// tinker:// paths, sorted.
func (s *Server) Checkpoints() []string {
	var out []string
	runs, _ := os.ReadDir(s.opts.Dir)
	for _, r := range runs {
		for _, kind := range []string{"weights", "sampler_weights"} {
			names, _ := os.ReadDir(filepath.Join(s.opts.Dir, r.Name(), kind))
			for _, n := range names {
				out = append(out, "tinker://"+r.Name()+"/"+kind+"/"+n.Name())
			}
		}
	}
	slices.Sort(out)
	return out
}

// SamplerTTLs are the ttl_seconds of every save_weights_for_sampler, in
// order (0 when none was sent).
func (s *Server) SamplerTTLs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ttls)
}

// PendingFaults counts the injected faults not yet used up.
func (s *Server) PendingFaults() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.faults)
}
