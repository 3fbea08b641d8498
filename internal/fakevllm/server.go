// Package fakevllm is an in-process stand-in for a vLLM (or SGLang)
// OpenAI-compatible server, for tests. It speaks the wire format of the
// real servers field for field (see the inference-servers reference), over
// a tiny vocabulary, with deterministic replies, configurable latency and
// fault injection per request or at a rate.
package fakevllm

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rllm-org/rllm-go/internal/ctxsleep"
	"github.com/rllm-org/rllm-go/pkg/episode"
	wire "github.com/rllm-org/rllm-go/pkg/openaiwire"
)

// Fault is something that can go wrong with one generation request.
type Fault int

// The faults the fake injects.
const (
	NoFault            Fault = iota
	FaultServerError         // 500 with a vLLM error body
	FaultUnavailable         // 503 with a vLLM error body
	FaultRateLimit           // 429 with Retry-After
	FaultTimeout             // the server never answers (until the client gives up)
	FaultDrop                // the connection is closed without a response
	FaultMalformed           // 200 with a truncated JSON body
	FaultWrongModel          // 404, as vLLM answers a request for a model it does not serve
	FaultBadRequest          // 400
	FaultUnauthorized        // 401
	FaultShortLogprobs       // 200, one logprob fewer than token ids
	FaultBadTokenID          // 200, a token id at or above the vocabulary size
	FaultMissingFields       // 200, a choice without finish_reason and token ids
	FaultErrorOK             // 200 with an OpenAI error object and no choices, as some proxies answer
	FaultRedirect            // 302 to Config.RedirectTo plus the path (or to the same URL: a loop)
	FaultHugeBody            // 200 with a body of Config.HugeBody bytes (a JSON string that never ends in time)
	FaultGzipBomb            // 200, gzip-encoded, inflating to Config.HugeBody bytes
)

var faultNames = map[Fault]string{
	NoFault: "none", FaultServerError: "server_error", FaultUnavailable: "unavailable",
	FaultRateLimit: "rate_limit", FaultTimeout: "timeout", FaultDrop: "drop",
	FaultMalformed: "malformed_json", FaultWrongModel: "wrong_model",
	FaultBadRequest: "bad_request", FaultUnauthorized: "unauthorized",
	FaultShortLogprobs: "short_logprobs", FaultBadTokenID: "bad_token_id",
	FaultMissingFields: "missing_fields", FaultErrorOK: "error_with_200", FaultRedirect: "redirect",
	FaultHugeBody: "huge_body", FaultGzipBomb: "gzip_bomb",
}

// errorFaults are the faults answered with a vLLM error body.
var errorFaults = map[Fault]struct {
	status   int
	typ, msg string
}{
	FaultServerError:  {500, "InternalServerError", "fake: injected internal error"},
	FaultUnavailable:  {503, "ServiceUnavailableError", "fake: injected overload"},
	FaultRateLimit:    {429, "RateLimitError", "fake: injected rate limit"}, // with Retry-After
	FaultBadRequest:   {400, "BadRequestError", "fake: injected bad request"},
	FaultUnauthorized: {401, "AuthenticationError", "fake: injected unauthorized"},
	FaultWrongModel:   {404, "NotFoundError", "The model `fake-injected-other-model` does not exist."},
}

func (f Fault) String() string {
	if n, ok := faultNames[f]; ok {
		return n
	}
	return "fault(" + strconv.Itoa(int(f)) + ")"
}

// RetryableFaults are the faults a client should retry; the others end
// the request.
var RetryableFaults = []Fault{FaultServerError, FaultUnavailable, FaultRateLimit, FaultTimeout, FaultDrop, FaultMalformed}

// FatalFaults are answered in a way a client must not retry.
var FatalFaults = []Fault{FaultWrongModel, FaultBadRequest, FaultUnauthorized, FaultShortLogprobs, FaultBadTokenID, FaultMissingFields}

// Flavor selects which server's field names the fake uses.
type Flavor string

// Flavors.
const (
	VLLM   Flavor = "vllm"   // reasoning, stop_reason
	SGLang Flavor = "sglang" // reasoning_content, matched_stop
)

// Reply is a scripted answer for one choice.
type Reply struct {
	Content   string
	Reasoning string
	ToolCalls []episode.ToolCall
	// FinishReason overrides the computed one when set.
	FinishReason string
	// Logprobs, when set, replace the seeded ones (one per token of the
	// rendered reply, end-of-turn token included).
	Logprobs []float64
}

// ReplyInput is what a Reply hook sees of a request.
type ReplyInput struct {
	Path      string
	Messages  []Message
	PromptIDs []int
	Index     int // choice index
}

// Config configures a fake server. The zero value serves "fake-model"
// with a 4096-token context, seeded replies and no faults.
type Config struct {
	Model       string
	MaxModelLen int
	Flavor      Flavor
	// LegacyReasoningField makes vLLM name the reasoning field
	// reasoning_content (vLLM before 2026).
	LegacyReasoningField bool
	// FlatErrors answers errors in the older flat form
	// {"object":"error","message":...} instead of {"error":{...}}.
	FlatErrors bool
	// ReturnTokensAsTokenIDs is the server flag
	// --return-tokens-as-token-ids: every logprob token is "token_id:N".
	ReturnTokensAsTokenIDs bool
	// Reasoning makes seeded replies think first (<think>...</think>).
	Reasoning bool
	// ReplyTokens bounds the length of seeded replies (default 12).
	ReplyTokens int
	Seed        int64
	Latency     time.Duration
	// RedirectTo is the base URL FaultRedirect sends requests to; empty
	// redirects to the same URL (a loop).
	RedirectTo string
	// HugeBody is the size of FaultHugeBody's and FaultGzipBomb's bodies
	// (default 100 MB).
	HugeBody int64
	// RetryAfter is the Retry-After header of FaultRateLimit, in seconds.
	RetryAfter int
	// FaultRate is the probability that a generation request gets one of
	// Faults (chosen uniformly), drawn from a generator seeded with Seed.
	FaultRate float64
	Faults    []Fault
	// FaultFor, when set, decides the fault of every generation request
	// (n counts requests from 1); it overrides FaultRate.
	FaultFor func(path string, n int64) Fault
	// Reply, when set, scripts replies; returning nil falls back to a
	// seeded reply.
	Reply func(in ReplyInput) *Reply
	// Record keeps every generation request body for Requests.
	Record bool
	// RuntimeLoRA serves vLLM's /v1/load_lora_adapter and
	// /v1/unload_lora_adapter (vllm serve --enable-lora with
	// VLLM_ALLOW_RUNTIME_LORA_UPDATING=True); without it they are 404, as
	// on a server started without them. A loaded adapter's name is then
	// a model requests may name.
	RuntimeLoRA bool
	// LoadLatency delays each adapter load (a large adapter, a busy GPU).
	LoadLatency time.Duration
}

// Recorded is one request the fake received.
type Recorded struct {
	Path string
	Body map[string]any
}

// Stats counts what the fake did.
type Stats struct {
	Requests int64           // generation requests received
	Faults   map[Fault]int64 // faults injected
	Served   int64           // generation requests answered 200 without a fault
}

// Server is a running fake. Close it when done.
type Server struct {
	*httptest.Server
	cfg   Config
	vocab *Vocab
	// life is done when the server closes: it releases requests that hang.
	life context.Context
	stop context.CancelFunc

	requests    atomic.Int64
	served      atomic.Int64
	running     atomic.Int64
	genTokens   atomic.Int64
	unhealthy   atomic.Bool
	mu          sync.Mutex
	queue       []Fault
	faultRNG    uint64
	faultCounts map[Fault]int64
	recorded    []Recorded
	adapters    map[string]string // loaded LoRA name → path
	adapterLog  []string          // "load NAME" / "unload NAME", in order
}

// New starts a fake server.
func New(cfg Config) *Server {
	if cfg.Model == "" {
		cfg.Model = "fake-model"
	}
	if cfg.MaxModelLen == 0 {
		cfg.MaxModelLen = 4096
	}
	if cfg.Flavor == "" {
		cfg.Flavor = VLLM
	}
	if cfg.ReplyTokens <= 0 {
		cfg.ReplyTokens = 12
	}
	s := &Server{cfg: cfg, vocab: DefaultVocab(),
		faultRNG: uint64(cfg.Seed)*0x9E3779B97F4A7C15 + 1, faultCounts: map[Fault]int64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.generate)
	mux.HandleFunc("POST /v1/completions", s.generate)
	mux.HandleFunc("POST /tokenize", s.tokenize)
	mux.HandleFunc("POST /detokenize", s.detokenize)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /metrics", s.metrics)
	if cfg.RuntimeLoRA {
		mux.HandleFunc("POST /v1/load_lora_adapter", s.loadAdapter)
		mux.HandleFunc("POST /v1/unload_lora_adapter", s.unloadAdapter)
	}
	s.life, s.stop = context.WithCancel(context.Background())
	s.Server = httptest.NewUnstartedServer(mux)
	s.Server.Config.ErrorLog = nil
	s.Server.Start()
	return s
}

// Close stops the server, releasing requests that hang.
func (s *Server) Close() {
	s.stop()
	s.Server.CloseClientConnections()
	s.Server.Close()
}

// Vocab is the fake's tokenizer.
func (s *Server) Vocab() *Vocab { return s.vocab }

// Model is the served model name.
func (s *Server) Model() string { return s.cfg.Model }

// SetHealthy makes /health answer 200 (true) or 503 (false).
func (s *Server) SetHealthy(ok bool) { s.unhealthy.Store(!ok) }

// InjectNext queues faults for the next generation requests, in order,
// ahead of any rate.
func (s *Server) InjectNext(faults ...Fault) {
	s.mu.Lock()
	s.queue = append(s.queue, faults...)
	s.mu.Unlock()
}

// Stats returns the counters so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Requests: s.requests.Load(), Served: s.served.Load(), Faults: map[Fault]int64{}}
	for f, n := range s.faultCounts {
		st.Faults[f] = n
	}
	return st
}

// Requests returns the recorded request bodies (Config.Record).
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.recorded...)
}

func (s *Server) pickFault(path string, n int64) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := NoFault
	switch {
	case len(s.queue) > 0:
		f, s.queue = s.queue[0], s.queue[1:]
	case s.cfg.FaultFor != nil:
		f = s.cfg.FaultFor(path, n)
	case s.cfg.FaultRate > 0 && len(s.cfg.Faults) > 0:
		r := splitmix(&s.faultRNG)
		if float64(r>>11)/(1<<53) < s.cfg.FaultRate {
			f = s.cfg.Faults[splitmix(&s.faultRNG)%uint64(len(s.cfg.Faults))]
		}
	}
	if f != NoFault {
		s.faultCounts[f]++
	}
	return f
}

// requestContext is r's context, also done when the server closes.
func (s *Server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.life, cancel)
	return ctx, func() { stop(); cancel() }
}

// writeError answers in vLLM's error format.
func (s *Server) writeError(w http.ResponseWriter, status int, typ, msg string) {
	e := wire.Error{Message: msg, Type: typ, Code: status}
	var body any = wire.ErrorResponse{Error: e}
	if s.cfg.FlatErrors {
		body = wire.FlatErrorResponse{Object: "error", Error: e}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// genRequest holds the fields of both generation endpoints the fake reads:
// the sampling fields as rllm serve decodes them (pointers: a field left
// out takes vLLM's default), and the fields of either route. The client
// side of the same wire is openaiwire.ChatRequest and CompletionRequest.
type genRequest struct {
	wire.SamplingFields
	Messages            []Message       `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            json.RawMessage `json:"logprobs"` // chat: bool, completions: int
	TopLogprobs         int             `json:"top_logprobs"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	ChatTemplateKwargs  map[string]any  `json:"chat_template_kwargs"`
	Tools               []any           `json:"tools"`
	ToolChoice          any             `json:"tool_choice"`
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	n := s.requests.Add(1)
	s.running.Add(1)
	defer s.running.Add(-1)
	chat := r.URL.Path == "/v1/chat/completions"
	fault := s.pickFault(r.URL.Path, n)

	body, err := readAll(r)
	if err != nil {
		return
	}
	if s.cfg.Record {
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		s.mu.Lock()
		s.recorded = append(s.recorded, Recorded{Path: r.URL.Path, Body: m})
		s.mu.Unlock()
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if fault == FaultTimeout {
		<-ctx.Done()
		panic(http.ErrAbortHandler) // never answer, not even an empty 200
	}
	if ctxsleep.Sleep(ctx, s.cfg.Latency) != nil {
		panic(http.ErrAbortHandler)
	}
	if e, ok := errorFaults[fault]; ok {
		if fault == FaultRateLimit {
			w.Header().Set("Retry-After", strconv.Itoa(s.cfg.RetryAfter))
		}
		s.writeError(w, e.status, e.typ, e.msg)
		return
	}
	switch fault {
	case FaultDrop:
		panic(http.ErrAbortHandler)
	case FaultErrorOK:
		writeJSON(w, wire.ErrorResponse{Error: wire.Error{Message: "fake: model overloaded", Type: "overloaded_error", Code: 529}})
		return
	case FaultRedirect:
		to := s.cfg.RedirectTo
		if to == "" {
			to = "http://" + r.Host
		}
		http.Redirect(w, r, to+r.URL.Path, http.StatusFound)
		return
	case FaultHugeBody, FaultGzipBomb:
		s.writeHuge(w, fault == FaultGzipBomb)
		return
	}

	var req genRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeError(w, 400, "BadRequestError", "invalid JSON: "+err.Error())
		return
	}
	if req.Model != s.cfg.Model && !s.hasAdapter(req.Model) {
		s.writeError(w, 404, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	if msg := validateSampling(&req); msg != "" {
		s.writeError(w, 400, "BadRequestError", msg)
		return
	}
	if req.Stream != nil && *req.Stream {
		s.writeError(w, 400, "BadRequestError", "fake: streaming is not supported")
		return
	}
	var resp any
	var status int
	var msg string
	if chat {
		resp, status, msg = s.chat(&req)
	} else {
		resp, status, msg = s.completion(&req)
	}
	if status != 0 {
		s.writeError(w, status, "BadRequestError", msg)
		return
	}
	switch fault {
	case FaultShortLogprobs, FaultBadTokenID, FaultMissingFields:
		corrupt(resp, fault, s.vocab.Size())
	case FaultMalformed:
		b, _ := json.Marshal(resp)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b[:len(b)/2])
		return
	default:
		s.served.Add(1)
	}
	writeJSON(w, resp)
}

func readAll(r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	_, err := buf.ReadFrom(r.Body)
	return buf.Bytes(), err
}

func validateSampling(req *genRequest) string {
	switch {
	case req.Temperature != nil && *req.Temperature < 0:
		return fmt.Sprintf("temperature must be non-negative, got %v.", *req.Temperature)
	case req.TopP != nil && (*req.TopP <= 0 || *req.TopP > 1):
		return fmt.Sprintf("top_p must be in (0, 1], got %v.", *req.TopP)
	case req.TopK != nil && *req.TopK < -1:
		return fmt.Sprintf("top_k must be -1 (disable), or at least 1, got %d.", *req.TopK)
	case req.N != nil && *req.N < 1:
		return fmt.Sprintf("n must be at least 1, got %d.", *req.N)
	case req.MaxTokens != nil && *req.MaxTokens < 1:
		return fmt.Sprintf("max_tokens must be at least 1, got %d.", *req.MaxTokens)
	}
	return ""
}

func (req *genRequest) stops() []string {
	if len(req.Stop) == 0 || string(req.Stop) == "null" {
		return nil
	}
	var one string
	if json.Unmarshal(req.Stop, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(req.Stop, &many)
	return many
}

func (req *genRequest) choices() int {
	if req.N == nil {
		return 1
	}
	return *req.N
}

// choice is one generated reply before it is put in either wire form.
type choice struct {
	ids          []int
	logprobs     []float64
	text         string // all of the reply, specials removed
	reasoning    string
	content      string
	toolCalls    []episode.ToolCall
	finishReason string
	stopReason   any // string, int or nil
}

// completionDefaultMaxTokens is vLLM's default max_tokens on /v1/completions.
const completionDefaultMaxTokens = 16

// asked is the reply length the request names: max_completion_tokens
// before max_tokens, as vLLM's chat request reads them; nil when neither
// is sent.
func (req *genRequest) asked() *int {
	if req.MaxCompletionTokens != nil {
		return req.MaxCompletionTokens
	}
	return req.MaxTokens
}

// checkContext refuses what vLLM's input validation refuses
// (serving_engine's _validate_input): a prompt of the context or more,
// and a prompt plus the asked reply over the context. It never shortens
// the reply behind the client's back.
func (s *Server) checkContext(req *genRequest, promptLen int) string {
	ctx := s.cfg.MaxModelLen
	if promptLen >= ctx {
		return fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", ctx, promptLen)
	}
	if m := req.asked(); m != nil && promptLen+*m > ctx {
		return fmt.Sprintf("'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).", *m, ctx, promptLen, *m, ctx, promptLen)
	}
	return ""
}

// maxTokens is the reply's bound once checkContext passed: the asked
// length, else what the context leaves.
func (s *Server) maxTokens(req *genRequest, promptLen int) int {
	if m := req.asked(); m != nil {
		return *m
	}
	return s.cfg.MaxModelLen - promptLen
}

// seedFor derives the reply generator's seed from the request, so that
// the same request always gets the same reply whatever the concurrency.
func (s *Server) seedFor(req *genRequest, prompt []int, index int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	put := func(v uint64) {
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		h.Write(b[:])
	}
	put(uint64(s.cfg.Seed))
	if req.Seed != nil {
		put(uint64(*req.Seed))
	}
	put(uint64(index))
	for _, id := range prompt {
		put(uint64(id))
	}
	return h.Sum64()
}

func splitmix(state *uint64) uint64 {
	*state += 0x9E3779B97F4A7C15
	z := *state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func (s *Server) gen(req *genRequest, path string, msgs []Message, prompt []int, index int) choice {
	rng := s.seedFor(req, prompt, index)
	var ids []int
	var lps []float64
	if s.cfg.Reply != nil {
		if rep := s.cfg.Reply(ReplyInput{Path: path, Messages: msgs, PromptIDs: prompt, Index: index}); rep != nil {
			text := rep.Content
			if rep.Reasoning != "" {
				text = "<think>" + rep.Reasoning + "</think>" + text
			}
			for _, tc := range rep.ToolCalls {
				text += `<tool_call>{"name": "` + tc.Function.Name + `", "arguments": ` + tc.Function.Arguments + `}</tool_call>`
			}
			ids = append(s.vocab.Encode(text), TokenImEnd)
			lps = rep.Logprobs
			c := s.finish(req, ids, lps, &rng, s.maxTokens(req, len(prompt)))
			if len(rep.ToolCalls) > 0 && c.finishReason == "stop" {
				c.toolCalls = rep.ToolCalls
				c.finishReason = "tool_calls"
				c.content = rep.Content
			}
			if rep.FinishReason != "" {
				c.finishReason = rep.FinishReason
			}
			return c
		}
	}
	n := 1 + int(splitmix(&rng)%uint64(s.cfg.ReplyTokens))
	if s.cfg.Reasoning {
		ids = append(ids, TokenThink)
		for i := 0; i < 1+int(splitmix(&rng)%4); i++ {
			ids = append(ids, s.vocab.sampleWord(splitmix(&rng)))
		}
		ids = append(ids, TokenEndThink)
	}
	for i := 0; i < n; i++ {
		ids = append(ids, s.vocab.sampleWord(splitmix(&rng)))
	}
	ids = append(ids, TokenImEnd)
	return s.finish(req, ids, nil, &rng, s.maxTokens(req, len(prompt)))
}

// finish applies max_tokens, stop token ids and stop strings to a full
// reply, then splits reasoning from content.
func (s *Server) finish(req *genRequest, full []int, lps []float64, rng *uint64, limit int) choice {
	c := choice{finishReason: "stop"}
	stops := req.stops()
	var text strings.Builder
	for i, id := range full {
		if i >= limit {
			c.finishReason = "length"
			break
		}
		c.ids = append(c.ids, id)
		if i < len(lps) {
			c.logprobs = append(c.logprobs, lps[i])
		} else {
			c.logprobs = append(c.logprobs, -float64(splitmix(rng)%3000)/1000-0.001)
		}
		if id == TokenImEnd {
			// End of turn: vLLM's stop_reason is null; SGLang's
			// matched_stop is the end-of-sequence token's id.
			if s.cfg.Flavor == SGLang {
				c.stopReason = id
			}
			break
		}
		if containsInt(req.StopTokenIDs, id) {
			c.stopReason = id
			break
		}
		text.WriteString(s.vocab.Token(id))
		if st := firstStop(text.String(), stops); st != "" {
			c.stopReason = st
			t := text.String()
			text.Reset()
			text.WriteString(t[:strings.Index(t, st)])
			break
		}
	}
	c.text = stripSpecials(text.String())
	c.content = c.text
	if i := strings.Index(c.text, "</think>"); i >= 0 && strings.HasPrefix(c.text, "<think>") {
		c.reasoning = c.text[len("<think>"):i]
		c.content = c.text[i+len("</think>"):]
	}
	return c
}

func firstStop(text string, stops []string) string {
	for _, st := range stops {
		if st != "" && strings.Contains(text, st) {
			return st
		}
	}
	return ""
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func stripSpecials(t string) string {
	for _, sp := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		t = strings.ReplaceAll(t, sp, "")
	}
	return t
}

// The responses are built from the shared wire shapes (pkg/openaiwire)
// except at the level of a choice and of the response around it, which
// stay maps: the flavour renames keys (stop_reason or matched_stop,
// reasoning or reasoning_content), stop_reason is a string, a token id or
// null, and vLLM leaves out token_ids and prompt_token_ids unless asked.
type chatChoice map[string]any
type completionChoice map[string]any

func (s *Server) tokenString(id int, asIDs bool) string {
	if asIDs || s.cfg.ReturnTokensAsTokenIDs {
		return wire.TokenIDString(id)
	}
	return s.vocab.Token(id)
}

func bytesOf(t string) []int {
	b := make([]int, len(t))
	for i := range t {
		b[i] = int(t[i])
	}
	return b
}

func (s *Server) stopKey() string {
	if s.cfg.Flavor == SGLang {
		return "matched_stop"
	}
	return "stop_reason"
}

func (s *Server) reasoningKey() string {
	if s.cfg.Flavor == SGLang || s.cfg.LegacyReasoningField {
		return "reasoning_content"
	}
	return "reasoning"
}

func (s *Server) chat(req *genRequest) (any, int, string) {
	if len(req.Messages) == 0 {
		return nil, 400, "messages must not be empty."
	}
	add := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	prompt := s.vocab.Encode(RenderChat(req.Messages, add))
	if msg := s.checkContext(req, len(prompt)); msg != "" {
		return nil, 400, msg
	}
	wantLP := string(req.Logprobs) == "true"
	u := wire.Usage{PromptTokens: len(prompt)}
	choices := make([]chatChoice, 0, req.choices())
	for i := 0; i < req.choices(); i++ {
		c := s.gen(req, "/v1/chat/completions", req.Messages, prompt, i)
		u.CompletionTokens += len(c.ids)
		msg := map[string]any{"role": "assistant", "content": nilIfEmpty(c.content, len(c.toolCalls) > 0)}
		if c.reasoning != "" {
			msg[s.reasoningKey()] = c.reasoning
		} else {
			msg[s.reasoningKey()] = nil
		}
		if len(c.toolCalls) > 0 {
			msg["tool_calls"] = c.toolCalls
		} else {
			msg["tool_calls"] = []episode.ToolCall{}
		}
		ch := chatChoice{"index": i, "message": msg, "logprobs": nil,
			"finish_reason": c.finishReason, s.stopKey(): c.stopReason}
		if wantLP {
			lp := wire.ChatLogprobs{Content: make([]wire.TokenLogprob, len(c.ids))}
			for j, id := range c.ids {
				t := s.tokenString(id, req.ReturnTokensAsTokenIDs)
				lp.Content[j] = wire.TokenLogprob{Token: t, Logprob: wire.EncodeLogprob(c.logprobs[j]), Bytes: bytesOf(s.vocab.Token(id)), TopLogprobs: []wire.TopLogprob{}}
				if req.TopLogprobs > 0 {
					lp.Content[j].TopLogprobs = []wire.TopLogprob{{Token: t, Logprob: wire.EncodeLogprob(c.logprobs[j]), Bytes: bytesOf(s.vocab.Token(id))}}
				}
			}
			ch["logprobs"] = lp
		}
		if req.ReturnTokenIDs {
			ch["token_ids"] = c.ids
		}
		choices = append(choices, ch)
		s.genTokens.Add(int64(len(c.ids)))
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	resp := map[string]any{"id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000,
		"model": s.cfg.Model, "choices": choices, "usage": u, "prompt_logprobs": nil}
	if req.ReturnTokenIDs {
		resp["prompt_token_ids"] = prompt
	}
	return resp, 0, ""
}

func nilIfEmpty(s string, toolCall bool) any {
	if s == "" && toolCall {
		return nil
	}
	return s
}

// prompts decodes a completions prompt: a string, a list of token ids, or
// a list of either.
func (s *Server) prompts(raw json.RawMessage) ([][]int, string) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return [][]int{s.vocab.Encode(text)}, ""
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return nil, "prompt must not be empty."
		}
		return [][]int{ids}, ""
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil && len(texts) > 0 {
		out := make([][]int, len(texts))
		for i, t := range texts {
			out[i] = s.vocab.Encode(t)
		}
		return out, ""
	}
	var lists [][]int
	if json.Unmarshal(raw, &lists) == nil && len(lists) > 0 {
		return lists, ""
	}
	return nil, "prompt must be a string, a list of token ids, or a list of either."
}

func (s *Server) completion(req *genRequest) (any, int, string) {
	// vLLM's CompletionRequest has no max_completion_tokens (an unknown
	// field, ignored) and defaults max_tokens to 16, unlike chat's "what
	// the context leaves" (vllm/entrypoints/openai/protocol.py).
	req.MaxCompletionTokens = nil
	if req.MaxTokens == nil {
		d := completionDefaultMaxTokens
		req.MaxTokens = &d
	}
	prompts, msg := s.prompts(req.Prompt)
	if msg != "" {
		return nil, 400, msg
	}
	var lpCount *int
	if len(req.Logprobs) > 0 && string(req.Logprobs) != "null" {
		var k int
		if err := json.Unmarshal(req.Logprobs, &k); err != nil {
			return nil, 400, "logprobs must be an integer on /v1/completions."
		}
		lpCount = &k
	}
	u := wire.Usage{}
	var choices []completionChoice
	for p, prompt := range prompts {
		for _, id := range prompt {
			if id < 0 || id >= s.vocab.Size() {
				return nil, 400, fmt.Sprintf("Token id %d is out of vocabulary", id)
			}
		}
		if msg := s.checkContext(req, len(prompt)); msg != "" {
			return nil, 400, msg
		}
		u.PromptTokens += len(prompt)
		for i := 0; i < req.choices(); i++ {
			c := s.gen(req, "/v1/completions", nil, prompt, i)
			u.CompletionTokens += len(c.ids)
			ch := completionChoice{"index": p*req.choices() + i, "text": c.text, "logprobs": nil,
				"finish_reason": c.finishReason, s.stopKey(): c.stopReason, "prompt_logprobs": nil}
			if lpCount != nil {
				toks := make([]string, len(c.ids))
				tlps := make([]float64, len(c.ids))
				tops := make([]map[string]float64, len(c.ids))
				offs := make([]int, len(c.ids))
				off := 0
				for j, id := range c.ids {
					toks[j] = s.tokenString(id, req.ReturnTokensAsTokenIDs)
					tlps[j] = wire.EncodeLogprob(c.logprobs[j])
					tops[j] = map[string]float64{toks[j]: tlps[j]}
					offs[j] = off
					off += len(s.vocab.Token(id))
				}
				ch["logprobs"] = wire.CompletionLogprobs{Tokens: toks, TokenLogprobs: tlps, TopLogprobs: tops, TextOffset: offs}
			}
			if req.ReturnTokenIDs {
				ch["token_ids"] = c.ids
				ch["prompt_token_ids"] = prompt
			}
			choices = append(choices, ch)
			s.genTokens.Add(int64(len(c.ids)))
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return map[string]any{"id": "cmpl-fake", "object": "text_completion", "created": 1700000000,
		"model": s.cfg.Model, "choices": choices, "usage": u}, 0, ""
}

// corrupt breaks a well-formed response the way a buggy server would.
func corrupt(resp any, f Fault, vocabSize int) {
	m, ok := resp.(map[string]any)
	if !ok {
		return
	}
	each := func(fn func(map[string]any)) {
		switch cs := m["choices"].(type) {
		case []chatChoice:
			for _, c := range cs {
				fn(c)
			}
		case []completionChoice:
			for _, c := range cs {
				fn(c)
			}
		}
	}
	each(func(c map[string]any) {
		switch f {
		case FaultMissingFields:
			delete(c, "finish_reason")
			delete(c, "token_ids")
			delete(c, "message")
			delete(c, "text")
		case FaultBadTokenID:
			if ids, ok := c["token_ids"].([]int); ok && len(ids) > 0 {
				ids[0] = vocabSize + 7
			}
		case FaultShortLogprobs:
			switch lp := c["logprobs"].(type) {
			case wire.ChatLogprobs:
				if len(lp.Content) > 0 {
					lp.Content = lp.Content[:len(lp.Content)-1]
				}
				c["logprobs"] = lp
			case wire.CompletionLogprobs:
				if len(lp.TokenLogprobs) > 0 {
					lp.TokenLogprobs = lp.TokenLogprobs[:len(lp.TokenLogprobs)-1]
				}
				c["logprobs"] = lp
			}
		}
	})
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req wire.TokenizeRequest[Message]
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.writeError(w, 400, "BadRequestError", "invalid JSON: "+err.Error())
		return
	}
	var ids []int
	switch {
	case req.Prompt != nil:
		ids = s.vocab.Encode(*req.Prompt)
	case req.Messages != nil:
		ids = s.vocab.Encode(RenderChat(req.Messages, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt))
	default:
		s.writeError(w, 400, "BadRequestError", "either prompt or messages is required.")
		return
	}
	writeJSON(w, map[string]any{"count": len(ids), "max_model_len": s.cfg.MaxModelLen, "tokens": ids, "token_strs": nil})
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tokens []int `json:"tokens"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.writeError(w, 400, "BadRequestError", "invalid JSON: "+err.Error())
		return
	}
	for _, id := range req.Tokens {
		if id < 0 || id >= s.vocab.Size() {
			s.writeError(w, 400, "BadRequestError", fmt.Sprintf("Token id %d is out of vocabulary", id))
			return
		}
	}
	writeJSON(w, map[string]any{"prompt": s.vocab.Decode(req.Tokens)})
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	data := []wire.Model{{ID: s.cfg.Model, Object: "model", Created: 1700000000, OwnedBy: "vllm",
		Root: s.cfg.Model, MaxModelLen: s.cfg.MaxModelLen, Permission: []any{}}}
	// vLLM lists each loaded adapter with the base model as its parent.
	for _, name := range s.Adapters() {
		s.mu.Lock()
		path := s.adapters[name]
		s.mu.Unlock()
		data = append(data, wire.Model{ID: name, Object: "model", Created: 1700000000, OwnedBy: "vllm",
			Root: path, Parent: &s.cfg.Model, MaxModelLen: s.cfg.MaxModelLen, Permission: []any{}})
	}
	writeJSON(w, wire.ModelList{Object: "list", Data: data})
}

// loraRequest is the body of vLLM's load and unload adapter routes.
type loraRequest struct {
	LoRAName string `json:"lora_name"`
	LoRAPath string `json:"lora_path"`
}

// loadAdapter is vLLM's POST /v1/load_lora_adapter: both fields needed, a
// name already loaded refused with 400, success a plain-text 200.
func (s *Server) loadAdapter(w http.ResponseWriter, r *http.Request) {
	var req loraRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.writeError(w, 400, "BadRequestError", "invalid JSON: "+err.Error())
		return
	}
	if req.LoRAName == "" || req.LoRAPath == "" {
		s.writeError(w, 400, "InvalidUserInput", "Both 'lora_name' and 'lora_path' must be provided.")
		return
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if ctxsleep.Sleep(ctx, s.cfg.LoadLatency) != nil {
		return
	}
	s.mu.Lock()
	_, dup := s.adapters[req.LoRAName]
	if !dup {
		if s.adapters == nil {
			s.adapters = map[string]string{}
		}
		s.adapters[req.LoRAName] = req.LoRAPath
		s.adapterLog = append(s.adapterLog, "load "+req.LoRAName)
	}
	s.mu.Unlock()
	if dup {
		s.writeError(w, 400, "InvalidUserInput", fmt.Sprintf("The lora adapter '%s' has already been loaded.", req.LoRAName))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.LoRAName)
}

// unloadAdapter is vLLM's POST /v1/unload_lora_adapter: an unknown name
// is 404.
func (s *Server) unloadAdapter(w http.ResponseWriter, r *http.Request) {
	var req loraRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.writeError(w, 400, "BadRequestError", "invalid JSON: "+err.Error())
		return
	}
	if req.LoRAName == "" {
		s.writeError(w, 400, "InvalidUserInput", "'lora_name' needs to be provided to unload a LoRA adapter.")
		return
	}
	s.mu.Lock()
	_, ok := s.adapters[req.LoRAName]
	if ok {
		delete(s.adapters, req.LoRAName)
		s.adapterLog = append(s.adapterLog, "unload "+req.LoRAName)
	}
	s.mu.Unlock()
	if !ok {
		s.writeError(w, 404, "NotFoundError", fmt.Sprintf("The lora adapter '%s' cannot be found.", req.LoRAName))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.LoRAName)
}

func (s *Server) hasAdapter(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.adapters[name]
	return ok
}

// Adapters lists the LoRA adapters loaded, by name, sorted.
func (s *Server) Adapters() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.adapters))
}

// AdapterLog lists the adapter loads and unloads, in order ("load NAME",
// "unload NAME").
func (s *Server) AdapterLog() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.adapterLog...)
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if s.unhealthy.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	m := s.cfg.Model
	fmt.Fprintf(w, "# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=%q} %d\n", m, s.running.Load())
	fmt.Fprintf(w, "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=%q} 0\n", m)
	fmt.Fprintf(w, "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=%q} 0.0\n", m)
	fmt.Fprintf(w, "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{model_name=%q} %d\n", m, s.genTokens.Load())
}

// writeHuge streams a 200 answer whose one string never closes before
// HugeBody bytes, gzip-encoded for a bomb (zeros compress ~1000:1).
func (s *Server) writeHuge(w http.ResponseWriter, gz bool) {
	size := s.cfg.HugeBody
	if size <= 0 {
		size = 100 << 20
	}
	w.Header().Set("Content-Type", "application/json")
	var out io.Writer = w
	if gz {
		w.Header().Set("Content-Encoding", "gzip")
		zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		defer zw.Close()
		out = zw
	}
	_, _ = io.WriteString(out, `{"choices":[{"text":"`)
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	for n := int64(0); n < size; n += int64(len(chunk)) {
		if _, err := out.Write(chunk); err != nil {
			return
		}
	}
	_, _ = io.WriteString(out, `"}]}`)
}
