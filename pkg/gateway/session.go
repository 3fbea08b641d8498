package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Session is one agent run's calls. Its methods are safe for concurrent
// use: a program may call the model from many threads at once.
type Session struct {
	ID string
	// Token is the bearer token (or x-api-key) its calls must carry.
	Token   string
	cfg     SessionConfig
	params  sampler.Params
	created time.Time

	seq       atomic.Int64             // calls started
	stored    atomic.Int64             // bytes the session's traces hold
	counted   atomic.Int64             // bytes of its count_tokens calls
	limited   atomic.Pointer[limitHit] // the first call refused past max_calls or the byte budget
	limitOnce sync.Once
	mu        sync.Mutex
	traces    []Trace
	store     store
	stats     SessionStats
	closed    bool
	// responses maps the id of each Responses call's reply to its call
	// (previous_response_id); custom the call id of each custom tool call
	// it returned to the arguments the model wrote.
	responses map[string]responseRef
	custom    map[string]string
}

// responseRef finds a Responses call's trace: its seq, and how many of
// its leading messages its instructions were.
type responseRef struct {
	seq  int64
	skip int
}

// SessionStats count a session's calls that left no trace.
type SessionStats struct {
	// Refused counts calls refused before sampling (bad body, auth
	// failures are not counted: they never reach the session).
	Refused int `json:"refused"`
	// Failed counts calls the sampler failed.
	Failed int `json:"failed"`
	// PromptTooLong counts calls whose prompt did not fit the model.
	PromptTooLong int `json:"prompt_too_long"`
	// OverLimit counts calls refused past max_calls.
	OverLimit int `json:"over_limit"`
	// CountTokens counts the count_tokens calls answered (they sample
	// nothing, leave no trace and do not count against max_calls; their
	// bodies count against the byte budget, and once a limit fired they
	// are refused like every call).
	CountTokens int `json:"count_tokens"`
	// LastError is the message of the last failed or refused call.
	LastError string `json:"last_error,omitempty"`
}

// Trace is one recorded model call: what was asked and exactly what was
// sampled.
type Trace struct {
	TraceID   string `json:"trace_id"`
	SessionID string `json:"session_id"`
	// Seq orders calls by arrival (from 0).
	Seq int64 `json:"seq"`
	// Endpoint is chat.completions, completions, messages or responses.
	Endpoint string            `json:"endpoint"`
	Model    string            `json:"model"`
	Messages []episode.Message `json:"messages,omitempty"`
	Tools    []sampler.Tool    `json:"tools,omitempty"`
	// Response is the assistant message the call returned.
	Response      episode.Message `json:"response_message"`
	PromptIDs     []int           `json:"prompt_token_ids"`
	CompletionIDs []int           `json:"completion_token_ids"`
	Logprobs      []float64       `json:"logprobs"`
	FinishReason  string          `json:"finish_reason"`
	StopReason    string          `json:"stop_reason,omitempty"`
	WeightVersion string          `json:"weight_version,omitempty"`
	LatencyMS     float64         `json:"latency_ms"`
	Timestamp     time.Time       `json:"timestamp"`
}

// Traces returns the session's recorded calls in arrival order.
func (s *Session) Traces() []Trace {
	s.mu.Lock()
	out := append([]Trace(nil), s.traces...)
	s.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// Stats returns the counts of calls that left no trace.
func (s *Session) Stats() SessionStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Calls is how many calls the session received (answered or not).
func (s *Session) Calls() int { return int(s.seq.Load()) }

// MaxCalls is the session's call budget.
func (s *Session) MaxCalls() int { return s.cfg.MaxCalls }

// StoredBytes is what the session's traces hold (Options.MaxSessionBytes
// bounds it): messages, tools, token ids and logprobs, each stored once
// however many later calls repeat them.
func (s *Session) StoredBytes() int64 { return s.stored.Load() }

func (s *Session) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

func (s *Session) record(t Trace, c call) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	// The call t continues: the response it names, or the last one.
	var prev *Trace
	if rc := c.responses; rc != nil && rc.prevID != "" {
		if ref, ok := s.responses[rc.prevID]; ok {
			for i := range s.traces {
				if s.traces[i].Seq == ref.seq {
					prev = &s.traces[i]
					break
				}
			}
		}
	} else if n := len(s.traces); n > 0 {
		prev = &s.traces[n-1]
	}
	s.stored.Add(s.store.keep(&t, prev))
	s.traces = append(s.traces, t)
	if rc := c.responses; rc != nil {
		if s.responses == nil {
			s.responses, s.custom = map[string]responseRef{}, map[string]string{}
		}
		s.responses["resp_"+t.TraceID] = responseRef{seq: t.Seq, skip: rc.skip}
		for _, tc := range t.Response.ToolCalls {
			if rc.custom[tc.Function.Name] {
				s.custom[tc.ID] = tc.Function.Arguments
			}
		}
	}
	return true
}

// previous is the conversation of response id of this session, its
// reply included and its instructions left out (previous_response_id).
func (s *Session) previous(id string) ([]episode.Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, ok := s.responses[id]
	if !ok {
		return nil, false
	}
	for _, t := range s.traces {
		if t.Seq == ref.seq {
			msgs := append([]episode.Message(nil), t.Messages[min(ref.skip, len(t.Messages)):]...)
			return append(msgs, t.Response), true
		}
	}
	return nil, false
}

// customArgs are the arguments the model wrote for custom tool call id.
func (s *Session) customArgs(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.custom[id]
	return a, ok
}

func (s *Session) fail(f func(*SessionStats), msg string) {
	s.mu.Lock()
	f(&s.stats)
	s.stats.LastError = msg
	s.mu.Unlock()
}

// The endpoints a session serves.
type endpoint int

const (
	endpointChat endpoint = iota
	endpointCompletions
	endpointMessages
	endpointResponses
)

func (e endpoint) String() string {
	return [...]string{"chat.completions", "completions", "messages", "responses"}[e]
}

// call is one proxied request after it is decoded: what to sample and
// how to answer.
type call struct {
	req     sampler.Request
	stream  bool
	asked   askedFor
	reqMsgs []episode.Message
	// responses is set on a Responses call.
	responses *responsesCall
}

// askedFor is what the client asked to get back beyond the reply.
type askedFor struct {
	logprobs     bool
	tokenIDs     bool
	includeUsage bool
}

// call handles one model call on a session.
func (g *Gateway) call(ep endpoint) http.HandlerFunc {
	errw := writeOpenAIError
	if ep == endpointMessages {
		errw = writeAnthropicError
	}
	return func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		status := g.serveCall(w, r, ep, errw)
		g.metrics.observe(ep.String(), status, time.Since(began))
	}
}

// callSession is the session a call names, when the call carries its
// token; else it answers the error and returns its status.
func (g *Gateway) callSession(w http.ResponseWriter, r *http.Request, errw errorWriter) (*Session, int) {
	id := r.PathValue("id")
	s, ok := g.Session(id)
	if !ok {
		errw(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("session %q does not exist (never created, or deleted)", id))
		return nil, http.StatusNotFound
	}
	if !tokenEqual(bearer(r), s.Token) {
		errw(w, http.StatusUnauthorized, "authentication_error", "missing or wrong API key for this session: send the session's token as Authorization: Bearer or x-api-key")
		return nil, http.StatusUnauthorized
	}
	return s, http.StatusOK
}

func (g *Gateway) serveCall(w http.ResponseWriter, r *http.Request, ep endpoint, errw errorWriter) int {
	s, status := g.callSession(w, r, errw)
	if s == nil {
		return status
	}
	n := s.seq.Add(1) - 1
	if int(n) >= s.cfg.MaxCalls {
		return s.overCalls(w, errw)
	}
	body, status := g.sessionBody(w, r, s, errw)
	if body == nil {
		return status
	}
	var c call
	var err error
	switch ep {
	case endpointChat:
		c, err = decodeChat(body)
	case endpointCompletions:
		c, err = decodeCompletion(body)
	case endpointMessages:
		c, err = decodeMessages(body)
	case endpointResponses:
		c, err = decodeResponses(body, s)
	}
	if err != nil {
		s.fail(func(st *SessionStats) { st.Refused++ }, err.Error())
		errw(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return http.StatusBadRequest
	}
	// The session's model and sampling parameters, whatever the client sent.
	c.req.Params = s.params
	if c.req.Messages != nil {
		c.req.ChatTemplateKwargs = s.cfg.ChatTemplateKwargs
	}
	traceID := randomHex(8)
	if c.responses != nil && c.stream {
		c.responses.stream = beginResponseStream(w, g.opts.Model, "resp_"+traceID, g.opts.Now().Unix(), c.responses, g.opts.StreamKeepAlive)
		defer c.responses.stream.quiet()
	}
	began := time.Now()
	ctx := r.Context()
	if s.cfg.Stream != "" {
		ctx = sampler.WithStream(ctx, s.cfg.Stream)
	}
	resp, err := s.cfg.Sampler.Sample(ctx, c.req)
	latency := time.Since(began)
	g.metrics.upstream.Observe(latency.Seconds())
	if err != nil {
		status, typ := http.StatusBadGateway, "api_error"
		var ue *usererr.Error
		switch {
		case errors.Is(err, sampler.ErrPromptTooLong):
			status, typ = http.StatusBadRequest, "invalid_request_error"
			s.fail(func(st *SessionStats) { st.PromptTooLong++ }, err.Error())
		case r.Context().Err() != nil:
			status = 499 // the client went away; nobody reads this answer
			s.fail(func(st *SessionStats) { st.Failed++ }, "the client closed the request")
		case errors.As(err, &ue):
			status, typ = http.StatusBadRequest, "invalid_request_error"
			s.fail(func(st *SessionStats) { st.Failed++ }, err.Error())
		default:
			s.fail(func(st *SessionStats) { st.Failed++ }, err.Error())
		}
		if ep == endpointResponses {
			return writeResponsesFailure(w, c, status, typ, failureCode(err, status), "sampling failed: "+err.Error())
		}
		errw(w, status, typ, "sampling failed: "+err.Error())
		return status
	}
	if len(resp.ToolCalls) > 0 && (resp.FinishReason == "stop" || resp.FinishReason == "") {
		resp.FinishReason = "tool_calls"
	}
	for i := range resp.ToolCalls {
		// Clients match tool results to calls by id; a sampler that parses
		// calls out of text may leave it empty.
		if resp.ToolCalls[i].ID == "" {
			resp.ToolCalls[i].ID = "call_" + traceID + "_" + strconv.Itoa(i)
		}
		if resp.ToolCalls[i].Type == "" {
			resp.ToolCalls[i].Type = "function"
		}
	}
	t := Trace{
		TraceID: traceID, SessionID: s.ID, Seq: n, Endpoint: ep.String(), Model: g.opts.Model,
		Messages: c.reqMsgs, Tools: c.req.Tools,
		Response:  episode.Message{Role: "assistant", Content: resp.Text, Reasoning: resp.Reasoning, ToolCalls: resp.ToolCalls},
		PromptIDs: resp.PromptIDs, CompletionIDs: resp.CompletionIDs, Logprobs: resp.Logprobs,
		FinishReason: resp.FinishReason, StopReason: resp.StopReason, WeightVersion: resp.WeightVersion,
		LatencyMS: float64(latency.Microseconds()) / 1000, Timestamp: g.opts.Now(),
	}
	if t.WeightVersion == "" {
		t.WeightVersion = resp.Model
	}
	if !s.record(t, c) {
		msg := fmt.Sprintf("session %q was deleted during the call", s.ID)
		if ep == endpointResponses {
			return writeResponsesFailure(w, c, http.StatusNotFound, "not_found_error", "not_found", msg)
		}
		errw(w, http.StatusNotFound, "not_found_error", msg)
		return http.StatusNotFound
	}
	g.metrics.tokens.WithLabelValues("prompt").Add(float64(len(t.PromptIDs)))
	g.metrics.tokens.WithLabelValues("completion").Add(float64(len(t.CompletionIDs)))
	switch ep {
	case endpointChat:
		writeChat(w, g.opts.Model, &t, c)
	case endpointCompletions:
		writeCompletion(w, g.opts.Model, &t, c)
	case endpointMessages:
		writeMessages(w, g.opts.Model, &t, c)
	case endpointResponses:
		writeResponses(w, g.opts.Model, &t, c)
	}
	return http.StatusOK
}

// limitHit is how a session's limit refused its first call.
type limitHit struct {
	status   int
	typ, msg string
}

// overCalls refuses a call past max_calls (and calls OnLimit once).
func (s *Session) overCalls(w http.ResponseWriter, errw errorWriter) int {
	msg := fmt.Sprintf("session %s made more than its max_calls=%d model calls", s.ID, s.cfg.MaxCalls)
	s.limited.CompareAndSwap(nil, &limitHit{http.StatusTooManyRequests, "rate_limit_error", msg})
	s.fail(func(st *SessionStats) { st.OverLimit++ }, msg)
	s.limitOnce.Do(func() {
		if s.cfg.OnLimit != nil {
			s.cfg.OnLimit()
		}
	})
	errw(w, http.StatusTooManyRequests, "rate_limit_error", msg)
	return http.StatusTooManyRequests
}

// sessionBody reads a call's body within the session's byte budget: what
// the session's traces hold, the bodies of its count_tokens calls and
// this body together stay within MaxSessionBytes. A nil body means the call was answered (refused).
func (g *Gateway) sessionBody(w http.ResponseWriter, r *http.Request, s *Session, errw errorWriter) ([]byte, int) {
	body, err := readBody(w, r, g.opts.MaxBodyBytes)
	if err != nil {
		s.fail(func(st *SessionStats) { st.Refused++ }, err.Error())
		return nil, writeBodyError(w, err, errw)
	}
	if held := s.stored.Load() + s.counted.Load(); held+int64(len(body)) > g.opts.MaxSessionBytes {
		msg := fmt.Sprintf("session %s holds %s of traces, and this request's %s would take it past its %s (the gateway's MaxSessionBytes)",
			s.ID, boundedio.Size(held), boundedio.Size(int64(len(body))), boundedio.Size(g.opts.MaxSessionBytes))
		s.limited.CompareAndSwap(nil, &limitHit{http.StatusRequestEntityTooLarge, "request_too_large", msg})
		s.fail(func(st *SessionStats) { st.Refused++ }, msg)
		errw(w, http.StatusRequestEntityTooLarge, "request_too_large", msg)
		return nil, http.StatusRequestEntityTooLarge
	}
	return body, http.StatusOK
}

var errBodyTooLarge = errors.New("body too large")

// readBody reads at most limit bytes; a larger body (by Content-Length or
// as it streams) is errBodyTooLarge and the connection is not read further.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, fmt.Errorf("%w: %d bytes, more than the gateway's %s", errBodyTooLarge, r.ContentLength, boundedio.Size(limit))
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, fmt.Errorf("%w: more than the gateway's %s", errBodyTooLarge, boundedio.Size(limit))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	return b, nil
}

func writeBodyError(w http.ResponseWriter, err error, errw errorWriter) int {
	if errors.Is(err, errBodyTooLarge) {
		w.Header().Set("Connection", "close")
		errw(w, http.StatusRequestEntityTooLarge, "request_too_large", "request "+err.Error())
		return http.StatusRequestEntityTooLarge
	}
	errw(w, http.StatusBadRequest, "invalid_request_error", err.Error())
	return http.StatusBadRequest
}
