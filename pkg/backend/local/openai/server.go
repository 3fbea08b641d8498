// Package openai serves an embedded-policy snapshot over HTTP with vLLM's
// OpenAI-compatible API and field names (/v1/completions,
// /v1/chat/completions, /tokenize, /detokenize, /v1/models, /health), so a
// rollout takes the same HTTP path against it as against vLLM.
package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// maxBody bounds a request body.
const maxBody = 8 << 20

// Options configure the server.
type Options struct {
	// ModelName is the id in /v1/models and the only "model" accepted
	// (an empty "model" in a request is accepted too).
	ModelName string
	// TruncateLongPrompts keeps the last context−1 tokens of a prompt
	// that does not fit instead of answering 400.
	TruncateLongPrompts bool
}

// Server answers OpenAI-compatible requests from one snapshot, which
// SetSnapshot may replace while serving.
type Server struct {
	opts Options
	mu   sync.RWMutex
	snap *local.Snapshot
	seq  atomic.Int64
	mux  *http.ServeMux
}

// New returns a server for snap.
func New(snap *local.Snapshot, opts Options) *Server {
	if opts.ModelName == "" {
		opts.ModelName = snap.Name()
	}
	s := &Server{opts: opts, snap: snap, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("POST /tokenize", s.tokenize)
	s.mux.HandleFunc("POST /detokenize", s.detokenize)
	s.mux.HandleFunc("POST /v1/completions", s.completions)
	s.mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	return s
}

// SetSnapshot makes later requests use snap.
func (s *Server) SetSnapshot(snap *local.Snapshot) {
	s.mu.Lock()
	s.snap = snap
	s.mu.Unlock()
}

func (s *Server) snapshot() *local.Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.snap
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// apiError is vLLM's error body: {"error": {message, type, param, code}}.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func writeError(w http.ResponseWriter, status int, param, format string, args ...any) {
	e := apiError{Message: fmt.Sprintf(format, args...), Type: "BadRequestError", Code: status}
	switch status {
	case http.StatusNotFound:
		e.Type = "NotFoundError"
	case http.StatusInternalServerError:
		e.Type = "InternalServerError"
	}
	if param != "" {
		e.Param = &param
	}
	writeJSON(w, status, map[string]apiError{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// decode reads a JSON body; false means an error was written.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body := http.MaxBytesReader(w, r.Body, maxBody)
	if err := json.NewDecoder(body).Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "", "the request body exceeds %d bytes", maxBody)
			return false
		}
		writeError(w, http.StatusBadRequest, "", "the request body is not valid JSON for this endpoint: %v", err)
		return false
	}
	return true
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	snap := s.snapshot()
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.opts.ModelName, "object": "model", "created": time.Now().Unix(), "owned_by": "rllm",
			"root": snap.Name(), "max_model_len": snap.Config().Context,
		}},
	})
}

type tokenizeRequest struct {
	Prompt              *string           `json:"prompt"`
	Messages            []episode.Message `json:"messages"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt"`
	AddSpecialTokens    *bool             `json:"add_special_tokens"`
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if !decode(w, r, &req) {
		return
	}
	tok := local.Tokenizer{}
	var ids []int
	switch {
	case req.Prompt != nil && req.Messages != nil:
		writeError(w, http.StatusBadRequest, "prompt", "give either prompt or messages, not both")
		return
	case req.Prompt != nil:
		ids = tok.Encode(*req.Prompt, true)
	case req.Messages != nil:
		ids = tok.ChatTemplate(req.Messages, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
	default:
		writeError(w, http.StatusBadRequest, "prompt", "give prompt (a string) or messages")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(ids), "max_model_len": s.snapshot().Config().Context, "tokens": nonNil(ids)})
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tokens []int `json:"tokens"`
	}
	if !decode(w, r, &req) {
		return
	}
	text, err := local.Tokenizer{}.Decode(req.Tokens, false)
	if err != nil {
		writeError(w, http.StatusBadRequest, "tokens", "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"prompt": text})
}

// samplingFields are the sampling settings both completion endpoints take.
type samplingFields struct {
	Model                string          `json:"model"`
	MaxTokens            *int            `json:"max_tokens"`
	Temperature          *float64        `json:"temperature"`
	TopP                 *float64        `json:"top_p"`
	TopK                 *int            `json:"top_k"`
	N                    *int            `json:"n"`
	Seed                 *int64          `json:"seed"`
	Stop                 json.RawMessage `json:"stop"`
	StopTokenIDs         []int           `json:"stop_token_ids"`
	ReturnTokenIDs       bool            `json:"return_token_ids"`
	TruncatePromptTokens *int            `json:"truncate_prompt_tokens"`
	Stream               bool            `json:"stream"`
}

// params converts the fields; a non-empty string is the error message and
// its parameter name.
func (f *samplingFields) params(defaultMax int) (backend.SamplingParams, int, string, string) {
	p := backend.SamplingParams{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: defaultMax, Seed: f.Seed, StopTokenIDs: f.StopTokenIDs}
	if f.Temperature != nil {
		p.Temperature = *f.Temperature
	}
	if f.TopP != nil {
		p.TopP = *f.TopP
	}
	if f.TopK != nil {
		p.TopK = *f.TopK
	}
	if f.MaxTokens != nil {
		if *f.MaxTokens < 1 {
			return p, 0, "max_tokens", fmt.Sprintf("max_tokens is %d; it must be at least 1", *f.MaxTokens)
		}
		p.MaxTokens = *f.MaxTokens
	}
	n := 1
	if f.N != nil {
		n = *f.N
		if n < 1 || n > local.MaxSamples {
			return p, 0, "n", fmt.Sprintf("n is %d; use 1 to %d", n, local.MaxSamples)
		}
	}
	if len(f.Stop) > 0 && string(f.Stop) != "null" {
		var one string
		if err := json.Unmarshal(f.Stop, &one); err == nil {
			p.Stop = []string{one}
		} else if err := json.Unmarshal(f.Stop, &p.Stop); err != nil {
			return p, 0, "stop", "stop must be a string or a list of strings"
		}
	}
	if f.Stream {
		return p, 0, "stream", "streaming is not supported by the embedded policy server; send stream: false"
	}
	return p, n, "", ""
}

// checkModel answers 404 for a model this server does not serve.
func (s *Server) checkModel(w http.ResponseWriter, model string) bool {
	if model != "" && model != s.opts.ModelName {
		writeError(w, http.StatusNotFound, "model", "The model `%s` does not exist; this server serves `%s`.", model, s.opts.ModelName)
		return false
	}
	return true
}

// fitPrompt applies truncation or reports a prompt that does not fit.
func (s *Server) fitPrompt(prompt []int, ctxLen int, truncate *int) ([]int, string) {
	for i, t := range prompt {
		if t < 0 || t >= local.TokenizerVocab {
			return nil, fmt.Sprintf("prompt token %d is %d, outside the vocabulary [0, %d)", i, t, local.TokenizerVocab)
		}
	}
	if truncate != nil && *truncate > 0 && len(prompt) > *truncate {
		prompt = prompt[len(prompt)-*truncate:]
	}
	if len(prompt) >= ctxLen {
		if !s.opts.TruncateLongPrompts {
			return nil, fmt.Sprintf("This model's maximum context length is %d tokens. However, your prompt has %d tokens (prompt and completion must fit together); shorten the prompt or set truncate_prompt_tokens.", ctxLen, len(prompt))
		}
		prompt = prompt[len(prompt)-(ctxLen-1):]
	}
	if len(prompt) == 0 {
		return nil, "the prompt is empty"
	}
	return prompt, ""
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

// stopReason is vLLM's stop_reason: the matched stop string, the matched
// stop token id as a number, or null for end of sequence and length.
func stopReason(seq backend.SampledSequence) any {
	if seq.MatchedStop == "" {
		return nil
	}
	for _, id := range seq.Tokens[len(seq.Tokens)-1:] {
		if strconv.Itoa(id) == seq.MatchedStop {
			return id
		}
	}
	return seq.MatchedStop
}

// parsePrompts accepts a string, a list of token ids, a list of strings
// or a list of token-id lists.
func parsePrompts(raw json.RawMessage) ([][]int, bool, string) {
	tok := local.Tokenizer{}
	raw = bytes.TrimSpace(raw)
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return [][]int{tok.Encode(one, true)}, false, ""
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err == nil && len(ids) > 0 {
		return [][]int{ids}, true, ""
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil && len(strs) > 0 {
		var out [][]int
		for _, s := range strs {
			out = append(out, tok.Encode(s, true))
		}
		return out, false, ""
	}
	var lists [][]int
	if err := json.Unmarshal(raw, &lists); err == nil && len(lists) > 0 {
		return lists, true, ""
	}
	return nil, false, "prompt must be a string, a list of token ids, a list of strings or a list of token-id lists, and not empty"
}
