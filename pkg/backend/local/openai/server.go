// Package openai serves the embedded policy over HTTP as a drop-in for a
// vLLM or SGLang server: vLLM's OpenAI-compatible API with its field names
// and chunk shapes (/v1/completions and /v1/chat/completions, streamed or
// not, /tokenize, /detokenize, /v1/models, /health, /metrics) and SGLang's
// weight-update API (/update_weights_from_disk, /get_weight_version,
// /pause_generation, /continue_generation). Requests run on a
// continuous-batching local.Engine. See docs/serve.md.
package openai

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	wire "github.com/rllm-org/rllm-go/pkg/openaiwire"
)

// Defaults of the limits in Options.
const (
	DefaultMaxBodyBytes = 8 << 20
	DefaultMaxN         = 64
	DefaultMaxLogprobs  = 20 // vLLM's --max-logprobs
	DefaultWriteTimeout = 30 * time.Second
	bodyTimeout         = time.Minute
)

// Options configure the server.
type Options struct {
	// ModelName is the id in /v1/models, the "model" of every response
	// and the only "model" accepted (an empty one is accepted too).
	ModelName string
	// TruncateLongPrompts keeps the last context−1 tokens of a prompt
	// that does not fit instead of answering 400.
	TruncateLongPrompts bool
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64
	// MaxN bounds n (choices per prompt).
	MaxN int
	// MaxLogprobs bounds logprobs, top_logprobs and prompt_logprobs.
	MaxLogprobs int
	// RequestTimeout ends a request that runs longer (0: no limit).
	RequestTimeout time.Duration
	// WriteTimeout bounds each write to a streaming client, so a stalled
	// client is dropped instead of holding its request open.
	WriteTimeout time.Duration
	// Workers is how many goroutines a loaded snapshot may use.
	Workers int
	// Logf, when set, receives one line per weight update.
	Logf func(format string, args ...any)
	// APIKey, when set, is required as "Authorization: Bearer KEY" on
	// every endpoint but GET /health and GET /metrics (vLLM's --api-key
	// protects /v1; here the weight-update and pause endpoints, /tokenize
	// and /detokenize are protected too, so a server reachable from other
	// machines cannot be re-weighted or paused by them).
	APIKey string
}

// Server answers HTTP requests from an engine.
type Server struct {
	opts    Options
	eng     *local.Engine
	seq     atomic.Int64
	mux     *http.ServeMux
	metrics *metrics
	// updateMu serialises weight updates.
	updateMu sync.Mutex
	inFlight atomic.Int64
}

// InFlight is the number of requests being handled.
func (s *Server) InFlight() int { return int(s.inFlight.Load()) }

// New returns a server for eng. The engine's current snapshot fixes the
// model's shape for the server's life.
func New(eng *local.Engine, opts Options) *Server {
	snap, _ := eng.Weights()
	if opts.ModelName == "" {
		opts.ModelName = snap.Name()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxN <= 0 {
		opts.MaxN = DefaultMaxN
	}
	if opts.MaxLogprobs <= 0 {
		opts.MaxLogprobs = DefaultMaxLogprobs
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	s := &Server{opts: opts, eng: eng, mux: http.NewServeMux()}
	s.metrics = newMetrics(eng, opts.ModelName)
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("POST /tokenize", s.tokenize)
	s.mux.HandleFunc("POST /detokenize", s.detokenize)
	s.mux.HandleFunc("POST /v1/completions", s.completions)
	s.mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	s.mux.Handle("GET /metrics", s.metrics.handler())
	s.mux.HandleFunc("POST /update_weights_from_disk", s.updateWeightsFromDisk)
	s.mux.HandleFunc("GET /get_weight_version", s.getWeightVersion)
	s.mux.HandleFunc("GET /weight_version", s.getWeightVersion)
	s.mux.HandleFunc("POST /pause_generation", s.pauseGeneration)
	s.mux.HandleFunc("POST /continue_generation", s.continueGeneration)
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	if s.opts.APIKey != "" && !openEndpoint(r) && !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeError(w, http.StatusUnauthorized, "", "Unauthorized: this server requires Authorization: Bearer with its --api-key")
		return
	}
	s.mux.ServeHTTP(w, r)
}

// openEndpoint reports the endpoints --api-key leaves open: health checks
// and Prometheus scrapes, which change nothing and show no text.
func openEndpoint(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Path == "/health" || r.URL.Path == "/metrics")
}

func (s *Server) authorized(r *http.Request) bool {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), []byte(s.opts.APIKey)) == 1
}

// errorTypes is the error type vLLM names for a status; any other status
// is a BadRequestError.
var errorTypes = map[int]string{
	http.StatusUnauthorized:          "AuthenticationError",
	http.StatusNotFound:              "NotFoundError",
	http.StatusTooManyRequests:       "RateLimitError",
	http.StatusRequestEntityTooLarge: "RequestTooLargeError",
	http.StatusServiceUnavailable:    "ServiceUnavailableError",
	http.StatusGatewayTimeout:        "TimeoutError",
	http.StatusInternalServerError:   "InternalServerError",
}

func writeError(w http.ResponseWriter, status int, param, format string, args ...any) {
	e := wire.Error{Message: fmt.Sprintf(format, args...), Type: "BadRequestError", Code: status}
	if t, ok := errorTypes[status]; ok {
		e.Type = t
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	if param != "" {
		e.Param = param
	}
	writeJSON(w, status, wire.ErrorResponse{Error: e})
}

// paramError is a request mistake naming its parameter.
type paramError struct {
	status int
	param  string
	msg    string
}

func (e *paramError) Error() string { return e.msg }

func badParam(param, format string, args ...any) *paramError {
	return &paramError{status: http.StatusBadRequest, param: param, msg: fmt.Sprintf(format, args...)}
}

func writeParamError(w http.ResponseWriter, e *paramError) {
	writeError(w, e.status, e.param, "%s", e.msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// readBody reads a JSON object body within the size limit and checks that
// it names only allowed keys; nil means an error was written.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, allowed map[string]bool) []byte {
	// The body must arrive within the body timeout; the deadline is lifted
	// once it has (a generation may take longer).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "", "the request body exceeds %d bytes; send a shorter request", s.opts.MaxBodyBytes)
		} else {
			writeError(w, http.StatusBadRequest, "", "reading the request body: %v", err)
		}
		return nil
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		writeError(w, http.StatusBadRequest, "", "the request body is not valid JSON for this endpoint: %v", err)
		return nil
	}
	if allowed != nil {
		for k := range keys {
			if !allowed[k] {
				writeError(w, http.StatusBadRequest, k, "parameter %q is not supported by rllm serve (the embedded policy); remove it", k)
				return nil
			}
		}
	}
	return raw
}

// decodeBody is readBody then json.Unmarshal into v; false means an error
// was written.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, allowed map[string]bool, v any) bool {
	raw := s.readBody(w, r, allowed)
	if raw == nil {
		return false
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			field := requestField(te.Field)
			writeError(w, http.StatusBadRequest, field, "parameter %s has the wrong type: %s given where %s is expected", field, te.Value, jsonType(te.Type.Kind()))
			return false
		}
		writeError(w, http.StatusBadRequest, "", "the request body is not valid JSON for this endpoint: %v", err)
		return false
	}
	return true
}

// requestField turns encoding/json's field path, which names embedded Go
// structs (SamplingFields.n), into the request's own (n).
func requestField(path string) string {
	parts := strings.Split(path, ".")
	out := parts[:0]
	for _, p := range parts {
		if strings.ContainsFunc(p, unicode.IsUpper) {
			continue // a Go struct name, not a JSON key (keys are snake_case)
		}
		out = append(out, p)
	}
	return strings.Join(out, ".")
}

// jsonType names a Go kind the way a JSON client thinks of it.
func jsonType(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another type"
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	snap, _ := s.eng.Weights()
	writeJSON(w, http.StatusOK, wire.ModelList{Object: "list", Data: []wire.Model{{
		ID: s.opts.ModelName, Object: "model", Created: time.Now().Unix(), OwnedBy: "rllm",
		Root: snap.Name(), MaxModelLen: snap.Config().Context, Permission: []any{},
	}}})
}

var tokenizeKeys = keySet("model", "prompt", "messages", "add_generation_prompt", "add_special_tokens", "chat_template_kwargs", "continue_final_message", "return_token_strs")

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req wire.TokenizeRequest[wire.InputMessage]
	if !s.decodeBody(w, r, tokenizeKeys, &req) {
		return
	}
	var ids []int
	switch {
	case req.Prompt != nil && req.Messages != nil:
		writeError(w, http.StatusBadRequest, "prompt", "give either prompt or messages, not both")
		return
	case req.Prompt != nil:
		ids = local.Tokenizer{}.Encode(*req.Prompt, true)
	case req.Messages != nil:
		var perr *paramError
		ids, perr = renderChat(req.Messages, nil, req.AddGenerationPrompt, req.ContinueFinalMessage)
		if perr != nil {
			writeParamError(w, perr)
			return
		}
	default:
		writeError(w, http.StatusBadRequest, "prompt", "give prompt (a string) or messages")
		return
	}
	if req.Prompt != nil && req.ContinueFinalMessage {
		writeError(w, http.StatusBadRequest, "continue_final_message", "continue_final_message applies to messages, not to a prompt")
		return
	}
	snap, _ := s.eng.Weights()
	out := map[string]any{"count": len(ids), "max_model_len": snap.Config().Context, "tokens": nonNil(ids)}
	if req.ReturnTokenStrs {
		// vLLM's token_strs: each token as the tokenizer spells it.
		strs := make([]string, len(ids))
		for i, id := range ids {
			strs[i] = tokenString(id, false)
		}
		out["token_strs"] = strs
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tokens []int `json:"tokens"`
	}
	if !s.decodeBody(w, r, keySet("model", "tokens"), &req) {
		return
	}
	text, err := local.Tokenizer{}.Decode(req.Tokens, false)
	if err != nil {
		writeError(w, http.StatusBadRequest, "tokens", "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"prompt": text})
}

// checkModel answers 404 for a model this server does not serve.
func (s *Server) checkModel(w http.ResponseWriter, model string) bool {
	if model != "" && model != s.opts.ModelName {
		writeError(w, http.StatusNotFound, "model", "The model `%s` does not exist; this server serves `%s`.", model, s.opts.ModelName)
		return false
	}
	return true
}

// fitPrompt checks the prompt's tokens and applies truncation, or reports
// a prompt that does not fit with max_tokens in the context.
func (s *Server) fitPrompt(prompt []int, ctxLen int, truncate *int, maxTokens *int, param string) ([]int, *paramError) {
	for i, t := range prompt {
		if t < 0 || t >= local.TokenizerVocab {
			return nil, badParam(param, "prompt token %d is %d, outside the vocabulary [0, %d)", i, t, local.TokenizerVocab)
		}
	}
	if truncate != nil && *truncate > 0 && len(prompt) > *truncate {
		prompt = prompt[len(prompt)-*truncate:]
	}
	if len(prompt) >= ctxLen {
		if !s.opts.TruncateLongPrompts {
			return nil, badParam(param, "This model's maximum context length is %d tokens. However, your prompt has %d tokens (prompt and completion must fit together); shorten the prompt or set truncate_prompt_tokens.", ctxLen, len(prompt))
		}
		prompt = prompt[len(prompt)-(ctxLen-1):]
	}
	if len(prompt) == 0 {
		return nil, badParam(param, "the prompt is empty")
	}
	// Compared as max_tokens > context − prompt: the sum overflows for a
	// max_tokens near the largest int.
	if maxTokens != nil && *maxTokens > ctxLen-len(prompt) {
		// The total as vLLM prints it, in uint64 where it cannot overflow.
		total := uint64(len(prompt)) + uint64(*maxTokens)
		return nil, badParam("max_tokens", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d in the completion). Please reduce the length of the prompt or completion.", ctxLen, total, len(prompt), *maxTokens)
	}
	return prompt, nil
}

func (s *Server) nextID(prefix string) string {
	return prefix + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(s.seq.Add(1), 10)
}

func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

func keySet(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

func union(sets ...map[string]bool) map[string]bool {
	m := map[string]bool{}
	for _, s := range sets {
		for k := range s {
			m[k] = true
		}
	}
	return m
}

// parsePrompts accepts a string, a list of token ids, a list of strings
// or a list of token-id lists.
func parsePrompts(raw json.RawMessage) ([][]int, *paramError) {
	tok := local.Tokenizer{}
	raw = bytes.TrimSpace(raw)
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return [][]int{tok.Encode(one, true)}, nil
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err == nil && len(ids) > 0 {
		return [][]int{ids}, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil && len(strs) > 0 {
		var out [][]int
		for _, s := range strs {
			out = append(out, tok.Encode(s, true))
		}
		return out, nil
	}
	var lists [][]int
	if err := json.Unmarshal(raw, &lists); err == nil && len(lists) > 0 {
		return lists, nil
	}
	return nil, badParam("prompt", "prompt must be a string, a list of token ids, a list of strings or a list of token-id lists, and not empty")
}

// submit queues the requests on the engine and maps its refusals to HTTP
// errors; nil means an error was written.
func (s *Server) submit(w http.ResponseWriter, ctx context.Context, reqs []local.GenRequest) []*local.GenStream {
	streams, err := s.eng.Submit(ctx, reqs...)
	if err == nil {
		return streams
	}
	var ie *backend.InputError
	switch {
	case errors.As(err, &ie):
		writeError(w, http.StatusBadRequest, "", "%s", ie.Msg)
	case errors.Is(err, local.ErrQueueFull):
		s.metrics.rejected.Inc()
		writeError(w, http.StatusTooManyRequests, "", "%v", err)
	case errors.Is(err, local.ErrEngineClosed):
		writeError(w, http.StatusServiceUnavailable, "", "the server is shutting down")
	default:
		writeError(w, http.StatusInternalServerError, "", "queueing the request: %v", err)
	}
	return nil
}

// requestContext applies the per-request timeout.
func (s *Server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	if s.opts.RequestTimeout > 0 {
		return context.WithTimeout(r.Context(), s.opts.RequestTimeout)
	}
	return context.WithCancel(r.Context())
}
