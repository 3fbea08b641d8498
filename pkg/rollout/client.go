// Package rollout talks to inference servers and runs episodes at scale:
// an OpenAI-compatible client for vLLM and SGLang (several endpoints,
// balancing, retries, strict response checks), the concurrent episode
// engine, and the token bookkeeping that turns episodes into training
// sequences.
package rollout

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rllm-org/rllm-go/internal/ctxsleep"
	"github.com/rllm-org/rllm-go/pkg/openaiwire"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Options configure a Client. Zero durations and counts take the defaults
// noted on each field.
type Options struct {
	// Endpoints are server base URLs such as http://gpu1:8000 (a trailing
	// /v1 is accepted and dropped).
	Endpoints []string
	// Model is the served model name sent with every request.
	Model string
	// APIKey is sent as a bearer token when set. The CLI resolves it from
	// an environment variable; it is never logged.
	APIKey string
	// RequestTimeout bounds one attempt (default 5 minutes).
	RequestTimeout time.Duration
	Retry          RetryPolicy
	// VocabSize, when positive, is the model's vocabulary size; token ids
	// at or above it make a response invalid.
	VocabSize int
	// TextOnly accepts replies without token ids or logprobs (evaluation
	// against servers that cannot return them). Training needs them, so it
	// is off by default.
	TextOnly bool
	// ReturnTokensAsTokenIDs asks for logprob tokens in "token_id:N" form.
	ReturnTokensAsTokenIDs bool
	// EjectAfter consecutive failures take an endpoint out of rotation
	// (default 3); it is probed on /health every ProbeInterval (default
	// 2s) and put back when healthy.
	EjectAfter    int
	ProbeInterval time.Duration
	// HealthInterval, when positive, checks /health of every endpoint at
	// that period and ejects those that fail. Close stops it.
	HealthInterval time.Duration
	// MaxResponseBytes bounds a generation answer after decompression
	// (default 32 MiB, far above any real one); small answers (/health,
	// /v1/models, error bodies) have smaller bounds of their own.
	MaxResponseBytes int64
	// HTTPClient replaces the client's own (tuned for many requests in
	// flight to few hosts). Its redirect policy is replaced by the
	// client's: redirects that leave an endpoint's host are refused.
	HTTPClient *http.Client
}

// Bounds of the answers that are small by nature.
const (
	defaultMaxResponse = 32 << 20
	maxSmallBody       = 1 << 20  // /health, /v1/models
	maxErrorBody       = 64 << 10 // the body of a non-200 answer
	maxRedirects       = 5
)

// RetryPolicy bounds retries of retryable failures: connection errors,
// malformed bodies and HTTP 408, 429 and 5xx.
type RetryPolicy struct {
	MaxAttempts int           // attempts in all, first included (default 5)
	BaseBackoff time.Duration // first wait (default 200ms), doubled each retry
	MaxBackoff  time.Duration // cap of one wait (default 10s)
	Deadline    time.Duration // bound of all attempts of one call (0: none)
}

// OptionError is a client option a user must fix (exit code 2).
type OptionError = usererr.Error

func optionErrorf(format string, args ...any) error {
	return &OptionError{Msg: fmt.Sprintf(format, args...)}
}

// StatusError is a non-success HTTP answer.
type StatusError struct {
	Endpoint   string
	Path       string
	Status     int
	Message    string // the server's own message
	Type       string // the server's error type, if any
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s%s answered %d %s: %s", e.Endpoint, e.Path, e.Status, http.StatusText(e.Status), e.Message)
}

// Is lets errors.Is(err, sampler.ErrPromptTooLong) recognise a server's
// refusal of a prompt longer than its context: vLLM's "maximum context
// length is N tokens", "too long to fit into the model", SGLang's "longer
// than the model's context length".
func (e *StatusError) Is(target error) bool {
	if target != sampler.ErrPromptTooLong || e.Status != http.StatusBadRequest {
		return false
	}
	m := strings.ToLower(e.Message)
	return strings.Contains(m, "maximum context length") || strings.Contains(m, "too long to fit into the model") ||
		strings.Contains(m, "longer than the model's context length")
}

// Retryable reports whether the status is worth another attempt.
func (e *StatusError) Retryable() bool {
	return e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// ResponseError is a successful answer the client cannot use (missing
// fields, arrays of different lengths, ids outside the vocabulary).
type ResponseError struct {
	Endpoint string
	Path     string
	Reason   string
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("%s%s sent an unusable response: %s", e.Endpoint, e.Path, e.Reason)
}

// RetriesExhaustedError wraps the last error of a call that ran out of
// attempts or time, or that sent more than one request before an error
// the server will give again.
type RetriesExhaustedError struct {
	// Attempts is how many requests this client sent for the call; a
	// caller that re-runs whole episodes multiplies it.
	Attempts, MaxAttempts int
	Err                   error
	// AskedToWait, when set, is a Retry-After longer than MaxBackoff, the
	// most the client waits between attempts.
	AskedToWait, MaxBackoff time.Duration
	// Final marks an end by an error that is not retried (a 4xx answer
	// other than 408 and 429), before MaxAttempts.
	Final bool
}

func (e *RetriesExhaustedError) Error() string {
	s := fmt.Sprintf("gave up on the request after %d attempts", e.Attempts)
	switch {
	case e.Final:
		s = fmt.Sprintf("gave up on the request after %d requests: the last answer is one the server will give again, so it was not retried", e.Attempts)
	case e.MaxAttempts > e.Attempts:
		s += fmt.Sprintf(" (of rollout.retry.max_attempts=%d, cut short by the retry deadline)", e.MaxAttempts)
	case e.MaxAttempts > 0:
		s += fmt.Sprintf(" (rollout.retry.max_attempts=%d)", e.MaxAttempts)
	}
	if e.AskedToWait > 0 {
		s += fmt.Sprintf("; the server asked to wait %v before retrying, more than rollout.retry.backoff_max_s (%v), so rllm waited %v", e.AskedToWait, e.MaxBackoff, e.MaxBackoff)
	}
	return s + ": " + e.Err.Error()
}

// Requests is how many requests to a server the error chain of err
// records: the attempts of a call that retried, 1 for a server's answer,
// 0 when err says nothing of requests (a transport error is counted by
// the retries that wrap it).
func Requests(err error) int {
	var re *RetriesExhaustedError
	if errors.As(err, &re) {
		return re.Attempts
	}
	var se *StatusError
	var rs *ResponseError
	if errors.As(err, &se) || errors.As(err, &rs) {
		return 1
	}
	return 0
}

// Permanent reports whether err is an answer the server will give again
// to the same request: a 4xx status other than 408 and 429 (a prompt too
// long for the context is an ending, not an error, and is not one).
// Neither the client nor the episode engine retries it.
func Permanent(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status >= 400 && se.Status < 500 && !se.Retryable() && !errors.Is(err, sampler.ErrPromptTooLong)
}

func (e *RetriesExhaustedError) Unwrap() error { return e.Err }

// Client is an OpenAI-compatible inference client. It is safe for
// concurrent use and implements sampler.Sampler.
type Client struct {
	modelMu   sync.RWMutex // guards opts.Model (SetModel)
	opts      Options
	http      *http.Client
	endpoints []*endpoint
	rr        atomic.Uint64
	sleep     func(ctx context.Context, d time.Duration) error
	stop      chan struct{}
	stopOnce  sync.Once

	requests, attempts, retries, failures atomic.Int64
	refused                               atomic.Int64
	promptTokens, completionTokens        atomic.Int64
}

var _ sampler.Sampler = (*Client)(nil)

// NewClient checks the options and builds a client. It does not contact
// the servers; call Check for that.
func NewClient(opts Options) (*Client, error) {
	if len(opts.Endpoints) == 0 {
		return nil, optionErrorf("rollout.endpoints is empty; give at least one server URL such as http://localhost:8000")
	}
	if strings.TrimSpace(opts.Model) == "" {
		return nil, optionErrorf("rollout.model is empty; set it to the model name the server serves (see its /v1/models)")
	}
	if strings.ContainsFunc(opts.APIKey, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return nil, optionErrorf("the API key holds a line break or a control character, which no HTTP header may carry; keep only the key, on one line")
	}
	c := &Client{opts: opts, sleep: ctxsleep.Sleep, stop: make(chan struct{})}
	seen := map[string]bool{}
	for _, raw := range opts.Endpoints {
		base, err := NormalizeEndpoint(raw)
		if err != nil {
			return nil, err
		}
		if seen[base] {
			return nil, optionErrorf("rollout.endpoints lists %s twice; list each server once", base)
		}
		seen[base] = true
		c.endpoints = append(c.endpoints, &endpoint{url: base})
	}
	o := &c.opts
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 5 * time.Minute
	}
	if o.Retry.MaxAttempts <= 0 {
		o.Retry.MaxAttempts = 5
	}
	if o.Retry.BaseBackoff <= 0 {
		o.Retry.BaseBackoff = 200 * time.Millisecond
	}
	if o.Retry.MaxBackoff <= 0 {
		o.Retry.MaxBackoff = 10 * time.Second
	}
	if o.EjectAfter <= 0 {
		o.EjectAfter = 3
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 2 * time.Second
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = defaultMaxResponse
	}
	if opts.HTTPClient != nil {
		hc := *opts.HTTPClient
		c.http = &hc
	} else {
		// Many requests in flight to a few hosts: keep that many
		// connections alive instead of the default two per host.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 0
		t.MaxIdleConnsPerHost = 4096
		t.ForceAttemptHTTP2 = false
		c.http = &http.Client{Transport: t}
	}
	c.http.CheckRedirect = checkRedirect
	if o.HealthInterval > 0 {
		go c.healthLoop()
	}
	return c, nil
}

// NormalizeEndpoint is the one spelling of an inference endpoint: scheme,
// host and path, without a trailing slash or /v1 (http://h:8000/v1/ and
// http://h:8000 are the same server). The rollout client, the weight
// publisher and the trainer's plan all use it.
func NormalizeEndpoint(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", optionErrorf("rollout.endpoints: %q is not an http(s) URL; write it like http://localhost:8000", raw)
	}
	p := strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	return u.Scheme + "://" + u.Host + p, nil
}

// Close stops background health checks.
func (c *Client) Close() { c.stopOnce.Do(func() { close(c.stop) }) }

// Model is the model name the client requests.
func (c *Client) Model() string { return c.model() }

// Sample implements sampler.Sampler: a chat request, or a completions
// request with a token-id prompt when req.PromptIDs is set. It always asks
// for token ids and logprobs.
//
// When an endpoint reported its context (max_model_len in /v1/models),
// max_tokens is capped so that prompt and reply fit it, as the embedded
// sampler does; the reply may then end at "length". A token-id prompt
// that leaves no room is refused before it is sent; a chat prompt, whose
// length only the server knows, is sent without max_tokens when
// params.MaxTokens alone fills the context, or re-sent once without it
// when the server refuses prompt + max_tokens: the server then caps the
// reply at what its context leaves. Either way a prompt that cannot fit
// ends in an error that wraps sampler.ErrPromptTooLong.
func (c *Client) Sample(ctx context.Context, req sampler.Request) (sampler.Response, error) {
	if err := checkParams(req); err != nil {
		return sampler.Response{}, err
	}
	p := req.Params
	rules := responseRules{vocabSize: c.opts.VocabSize, textOnly: c.opts.TextOnly}
	var out sampler.Response
	var path string
	var setMax func(int)
	var body any
	sampling := openaiwire.Sampling{Temperature: p.Temperature, TopP: p.TopP, TopK: p.TopK, MaxTokens: p.MaxTokens,
		Stop: p.Stop, StopTokenIDs: p.StopTokenIDs, Seed: p.Seed, N: 1}
	if req.PromptIDs != nil {
		zero := 0
		path = "/v1/completions"
		rules.promptIDs = req.PromptIDs
		r := &openaiwire.CompletionRequest{Model: c.model(), Prompt: openaiwire.Prompt{IDs: req.PromptIDs},
			Sampling: sampling, Logprobs: &zero,
			ReturnTokenIDs: true, ReturnTokensAsTokenIDs: c.opts.ReturnTokensAsTokenIDs}
		body, setMax = r, func(n int) { r.MaxTokens = n }
	} else {
		path = "/v1/chat/completions"
		r := &openaiwire.ChatRequest{Model: c.model(), Messages: req.Messages,
			Sampling: sampling, Logprobs: true,
			ReturnTokenIDs: true, ReturnTokensAsTokenIDs: c.opts.ReturnTokensAsTokenIDs,
			ChatTemplateKwargs: req.ChatTemplateKwargs, Tools: req.Tools}
		body, setMax = r, func(n int) { r.MaxTokens = n }
	}
	fit := &fitting{maxTokens: p.MaxTokens, promptLen: len(req.PromptIDs), set: setMax}
	err := c.post(ctx, path, body, fit, func(r io.Reader) error {
		var err error
		if path == "/v1/completions" {
			out, err = decodeCompletion(r, rules)
		} else {
			out, err = decodeChat(r, rules)
		}
		return err
	})
	if err == nil {
		c.promptTokens.Add(int64(len(out.PromptIDs)))
		c.completionTokens.Add(int64(len(out.CompletionIDs)))
	}
	return out, err
}

// CountPromptTokens counts a chat's prompt tokens with the server's own
// chat template and tokenizer, through vLLM's POST /tokenize
// (sampler.Counter); a token-id prompt is its length.
func (c *Client) CountPromptTokens(ctx context.Context, req sampler.Request) (int, error) {
	if len(req.Messages) == 0 {
		return len(req.PromptIDs), nil
	}
	out, err := postRaw[openaiwire.TokenizeResponse](ctx, c, "/tokenize", &openaiwire.TokenizeChatRequest{Model: c.model(),
		Messages: req.Messages, Tools: req.Tools, AddGenerationPrompt: true, ChatTemplateKwargs: req.ChatTemplateKwargs})
	if err != nil {
		return 0, err
	}
	return out.Count, nil
}

// checkParams refuses what vLLM would refuse, before a request is sent.
func checkParams(req sampler.Request) error {
	p := req.Params
	switch {
	case (req.PromptIDs == nil) == (len(req.Messages) == 0):
		return errors.New("sampler request needs exactly one of messages and prompt_ids")
	case req.PromptIDs != nil && len(req.PromptIDs) == 0:
		return errors.New("sampler request has an empty token-id prompt")
	case req.PromptIDs != nil && len(req.Tools) > 0:
		return errors.New("sampler request has tools with a token-id prompt; tools are rendered by the chat template, so send messages")
	case p.Temperature < 0:
		return fmt.Errorf("temperature %v is negative; use 0 for greedy sampling", p.Temperature)
	case p.TopP <= 0 || p.TopP > 1:
		return fmt.Errorf("top_p %v is outside (0, 1]; use 1.0 to disable nucleus sampling", p.TopP)
	case p.TopK < -1:
		return fmt.Errorf("top_k %d is invalid; use -1 to disable top-k sampling", p.TopK)
	case p.MaxTokens < 0:
		return fmt.Errorf("max_tokens %d is negative", p.MaxTokens)
	}
	return nil
}

// Chat sends a raw chat request (the caller sets every field) and returns
// the decoded answer without checks beyond JSON.
func (c *Client) Chat(ctx context.Context, req *openaiwire.ChatRequest) (*openaiwire.ChatResponse, error) {
	req.Model = cmp.Or(req.Model, c.model())
	return postRaw[openaiwire.ChatResponse](ctx, c, "/v1/chat/completions", req)
}

// Complete sends a raw completions request.
func (c *Client) Complete(ctx context.Context, req *openaiwire.CompletionRequest) (*openaiwire.CompletionResponse, error) {
	req.Model = cmp.Or(req.Model, c.model())
	return postRaw[openaiwire.CompletionResponse](ctx, c, "/v1/completions", req)
}

// postRaw sends req to path and decodes the answer into a Resp, without
// checks beyond JSON.
func postRaw[Resp any](ctx context.Context, c *Client, path string, req any) (*Resp, error) {
	var out Resp
	err := c.post(ctx, path, req, nil, func(r io.Reader) error { return decodeJSON(r, &out) })
	return &out, err
}

// post sends body to path on the least loaded endpoint, retrying what is
// worth retrying on a possibly different endpoint. fit, when set, sizes
// max_tokens and the answer's bound for the endpoint each attempt goes
// to.
func (c *Client) post(ctx context.Context, path string, body any, fit *fitting, decode func(io.Reader) error) error {
	c.requests.Add(1)
	parent := ctx
	if c.opts.Retry.Deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Retry.Deadline)
		defer cancel()
	}
	var last, widened, again *endpoint
	var askedMore time.Duration // the longest Retry-After above the cap
	sent := 0                   // requests sent, a refused max_tokens re-sent included
	for attempt := 1; ; attempt++ {
		ep := again
		if ep == nil {
			ep = c.pick(last)
		}
		again = nil
		payload, limit, err := c.encode(ep, body, fit, ep == widened)
		if err != nil {
			c.failures.Add(1)
			if errors.As(err, new(*ContextError)) {
				c.refused.Add(1)
			}
			return err
		}
		c.attempts.Add(1)
		sent++
		err = c.attempt(ctx, ep, path, payload, limit, decode)
		if err == nil {
			ep.succeeded()
			return nil
		}
		if parent.Err() != nil {
			c.failures.Add(1)
			return parent.Err()
		}
		if fit != nil && widened != ep && fit.canWiden(ep) && errors.Is(err, sampler.ErrPromptTooLong) {
			// The server refused prompt + max_tokens: ask again without
			// max_tokens, so that it caps the reply at what its context
			// leaves. Not a retry: the request changed.
			widened, again = ep, ep
			attempt--
			continue
		}
		retry, asked := c.retryable(err)
		if retry {
			if ep.failed(c.opts.EjectAfter) {
				ep.nextProbe.Store(time.Now().Add(c.opts.ProbeInterval).UnixNano())
			}
		}
		if !retry {
			c.failures.Add(1)
			if errors.As(err, new(*StatusError)) {
				c.refused.Add(1)
			}
			if sent > 1 {
				return &RetriesExhaustedError{Attempts: sent, MaxAttempts: c.opts.Retry.MaxAttempts, Err: err, Final: true}
			}
			return err
		}
		if asked > c.opts.Retry.MaxBackoff {
			askedMore = asked
		}
		if attempt >= c.opts.Retry.MaxAttempts || ctx.Err() != nil {
			c.failures.Add(1)
			return &RetriesExhaustedError{Attempts: sent, MaxAttempts: c.opts.Retry.MaxAttempts, Err: err, AskedToWait: askedMore, MaxBackoff: c.opts.Retry.MaxBackoff}
		}
		// A server's Retry-After is honoured up to the backoff cap: a
		// server cannot stall a run for longer than the user allowed.
		wait := min(asked, c.opts.Retry.MaxBackoff)
		if backoff := c.backoff(attempt); wait < backoff {
			wait = backoff
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			c.failures.Add(1)
			return &RetriesExhaustedError{Attempts: sent, MaxAttempts: c.opts.Retry.MaxAttempts, AskedToWait: askedMore, MaxBackoff: c.opts.Retry.MaxBackoff,
				Err: fmt.Errorf("%w (the retry deadline leaves no time to wait %v)", err, wait.Round(time.Millisecond))}
		}
		c.retries.Add(1)
		if err := c.sleep(ctx, wait); err != nil {
			c.failures.Add(1)
			if parent.Err() != nil {
				return parent.Err()
			}
			return &RetriesExhaustedError{Attempts: sent, MaxAttempts: c.opts.Retry.MaxAttempts, Err: err}
		}
		last = ep
	}
}

// encode writes the request for ep: max_tokens fitted to its context and
// the bound of its answer.
func (c *Client) encode(ep *endpoint, body any, fit *fitting, widened bool) ([]byte, int64, error) {
	maxTokens := 0
	if fit != nil {
		var err error
		if maxTokens, err = fit.maxTokensFor(ep, widened); err != nil {
			return nil, 0, err
		}
		fit.set(maxTokens)
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding the request: %w", err)
	}
	limit := c.opts.MaxResponseBytes
	if fit != nil {
		limit = min(limit, answerBound(maxTokens, int(ep.maxLen.Load()), len(payload)))
	}
	return payload, limit, nil
}

// fitting is what Sample knows of a request's size.
type fitting struct {
	maxTokens int // asked for (0: up to the context)
	promptLen int // tokens of a token-id prompt; 0 for chat, which only the server tokenizes
	set       func(maxTokens int)
}

// maxTokensFor is the max_tokens to send to ep (0: none, up to the
// context), or an error wrapping sampler.ErrPromptTooLong when a token-id
// prompt leaves no room in ep's context. An endpoint whose context is
// unknown gets max_tokens as asked, but a token-id prompt must then ask
// for a number.
func (f *fitting) maxTokensFor(ep *endpoint, widened bool) (int, error) {
	ctxLen := int(ep.maxLen.Load())
	switch {
	case ctxLen <= 0 && f.promptLen > 0 && f.maxTokens == 0:
		// The completions API reads an absent max_tokens as 16 (vLLM's
		// CompletionRequest default), not as "up to the context".
		return 0, fmt.Errorf("max_tokens 0 (up to the context) with a token-id prompt needs %s's context, which its /v1/models does not report; set max_tokens", ep.url)
	case ctxLen <= 0:
		return f.maxTokens, nil
	case f.promptLen > 0:
		room := ctxLen - f.promptLen
		if room < 1 {
			return 0, &ContextError{Endpoint: ep.url, Context: ctxLen, PromptTokens: f.promptLen}
		}
		if f.maxTokens <= 0 || f.maxTokens > room {
			return room, nil
		}
		return f.maxTokens, nil
	case widened || f.maxTokens >= ctxLen:
		// Whatever the prompt, max_tokens alone would not fit: the server
		// caps an absent max_tokens at what its context leaves (vLLM's
		// get_max_tokens in entrypoints/utils.py: max_model_len minus the
		// prompt; SGLang's scheduler likewise; rllm serve's chat route).
		return 0, nil
	}
	return f.maxTokens, nil
}

// canWiden reports whether a refusal of prompt + max_tokens by ep is
// worth one more request without max_tokens: a chat prompt, a context
// known to be larger than max_tokens.
func (f *fitting) canWiden(ep *endpoint) bool {
	ctxLen := int(ep.maxLen.Load())
	return f.promptLen == 0 && f.maxTokens > 0 && ctxLen > 0 && f.maxTokens < ctxLen
}

// answerBound is the most bytes an honest answer to a request of
// maxTokens reply tokens takes: 4 KiB a token (its text escaped, its
// logprob entry with bytes, its id: ten times what vLLM sends at worst),
// 16 bytes per request byte for the prompt echoed as ids, and 1 MiB for
// the rest. With no max_tokens the context bounds the reply; with neither
// known there is no bound but rollout.max_response_mb.
func answerBound(maxTokens, ctxLen, requestBytes int) int64 {
	n := maxTokens
	if n <= 0 {
		n = ctxLen
	}
	if n <= 0 {
		return math.MaxInt64
	}
	return 1<<20 + int64(n)<<12 + 16*int64(requestBytes)
}

// ContextError is a token-id prompt that leaves no room for a reply in
// an endpoint's context; errors.Is(err, sampler.ErrPromptTooLong) holds.
type ContextError struct {
	Endpoint     string
	Context      int // the endpoint's max_model_len
	PromptTokens int
}

func (e *ContextError) Error() string {
	return fmt.Sprintf("the prompt has %d tokens and %s serves a context of %d (max_model_len): no room for a reply", e.PromptTokens, e.Endpoint, e.Context)
}

func (e *ContextError) Unwrap() error { return sampler.ErrPromptTooLong }

// backoff is exponential with equal jitter: half fixed, half random, so
// that many clients hit by one outage do not come back in step.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.opts.Retry.BaseBackoff
	for i := 1; i < attempt && d < c.opts.Retry.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.opts.Retry.MaxBackoff)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func (c *Client) retryable(err error) (bool, time.Duration) {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Retryable(), se.RetryAfter
	}
	var re *ResponseError
	if errors.As(err, &re) {
		return false, 0
	}
	// Transport failures, timeouts of one attempt and malformed bodies.
	return true, 0
}

func (c *Client) attempt(ctx context.Context, ep *endpoint, path string, payload []byte, limit int64, decode func(io.Reader) error) error {
	ep.inflight.Add(1)
	defer ep.inflight.Add(-1)
	ep.requests.Add(1)
	// The timeout bounds the whole attempt: connecting, waiting and
	// reading the body (the request's context ends the body's reads).
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.url+path, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s%s: %w", ep.url, path, stripURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusError(ep, path, resp)
	}
	if resp.ContentLength > limit {
		// Refused unread: closing the body drops the connection.
		return &ResponseError{Endpoint: ep.url, Path: path, Reason: overLimit(resp.ContentLength, limit, c.opts.MaxResponseBytes)}
	}
	body := &capReader{r: resp.Body, left: limit, limit: limit}
	if err := decode(body); err != nil {
		var inv *invalidResponse
		switch {
		case errors.As(err, &inv):
			return &ResponseError{Endpoint: ep.url, Path: path, Reason: inv.msg}
		case body.over:
			return &ResponseError{Endpoint: ep.url, Path: path, Reason: overLimit(-1, limit, c.opts.MaxResponseBytes)}
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			return fmt.Errorf("%s%s: reading the response: %w", ep.url, path, err)
		}
		return fmt.Errorf("%s%s: %w", ep.url, path, err)
	}
	return nil
}

// statusError reads the start of a non-200 answer for the server's
// message. A redirect the client did not follow says where it led.
func statusError(ep *endpoint, path string, resp *http.Response) *StatusError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	se := &StatusError{Endpoint: ep.url, Path: path, Status: resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		se.Message = redirectMessage(ep.url+path, resp)
		return se
	}
	se.Message, se.Type = openaiwire.ErrorMessage(body)
	return se
}

// overLimit says why a body was refused: size (-1: unknown, it streamed
// past the limit) against the request's bound or rollout.max_response_mb.
func overLimit(size, limit, configured int64) string {
	what := "the body"
	if size >= 0 {
		what = fmt.Sprintf("the body (%d bytes by its Content-Length)", size)
	}
	if limit < configured {
		return fmt.Sprintf("%s is larger than %d bytes, the most an answer to this request's max_tokens can honestly take (4 KiB a token); the server is broken or hostile", what, limit)
	}
	return fmt.Sprintf("%s is larger than the limit of %d bytes (rollout.max_response_mb)", what, limit)
}

// capReader ends a body at limit bytes with an error, after any
// decompression (it reads what the transport has already inflated).
type capReader struct {
	r           io.Reader
	left, limit int64
	over        bool
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var b [1]byte
		if n, _ := c.r.Read(b[:]); n > 0 {
			c.over = true
			return 0, fmt.Errorf("the body is larger than the limit of %d bytes", c.limit)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

func readBody(resp *http.Response, limit int64) ([]byte, error) {
	body := &capReader{r: resp.Body, left: limit, limit: limit}
	return io.ReadAll(body)
}

// checkRedirect follows a redirect only to the same host and only when
// it keeps the method (307, 308): a POST turned into a GET, or a request
// (and its API key) sent to another host, is never what the user meant.
// Anything else is handed back as the 3xx answer, which becomes an error
// that names both URLs.
func checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0]
	if req.URL.Host != first.URL.Host || req.URL.Scheme != first.URL.Scheme ||
		req.Method != first.Method || len(via) >= maxRedirects {
		return http.ErrUseLastResponse
	}
	for _, v := range via {
		if v.URL.String() == req.URL.String() {
			return http.ErrUseLastResponse
		}
	}
	return nil
}

// redirectMessage says why a 3xx answer was not followed.
func redirectMessage(from string, resp *http.Response) string {
	loc := resp.Header.Get("Location")
	to, err := resp.Request.URL.Parse(loc)
	if loc == "" || err != nil {
		return fmt.Sprintf("a redirect without a usable Location (%q); point rollout.endpoints at the server itself", loc)
	}
	orig := resp.Request.URL
	if resp.Request.Response != nil { // the first request of the chain
		for r := resp.Request; r != nil; {
			orig = r.URL
			if r.Response == nil {
				break
			}
			r = r.Response.Request
		}
	}
	switch {
	case to.Host != orig.Host || to.Scheme != orig.Scheme:
		return fmt.Sprintf("a redirect from %s to %s, on another host; rllm does not follow it (the request and its API key would go there); put the URL you trust in rollout.endpoints", from, to)
	case resp.Request.Method == http.MethodPost && resp.StatusCode != http.StatusTemporaryRedirect && resp.StatusCode != http.StatusPermanentRedirect:
		return fmt.Sprintf("a redirect from %s to %s that would turn the POST into a GET; put the final URL in rollout.endpoints", from, to)
	}
	return fmt.Sprintf("redirects in a loop or too many redirects (last from %s to %s); fix the server or rollout.endpoints", resp.Request.URL, to)
}

// stripURL drops url.Error's "Post \"...\":" prefix; we name the endpoint
// ourselves.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// ClientStats are the client's counters.
type ClientStats struct {
	Requests int64 // calls (a call may take several attempts)
	Attempts int64
	Retries  int64
	Failures int64 // calls that ended in an error
	// Refused counts the failed calls the server answered with an error
	// it will give again (a 4xx status other than 408 and 429: a prompt
	// longer than the context, a bad request) and the token-id prompts
	// refused unsent for leaving no room in the endpoint's context.
	Refused          int64
	PromptTokens     int64
	CompletionTokens int64
	Endpoints        []EndpointStats
}

// EndpointStats describe one endpoint.
type EndpointStats struct {
	URL       string
	InFlight  int64
	Requests  int64 // attempts sent to it
	Failures  int64 // retryable failures
	Ejections int64
	Ejected   bool
}

// Stats returns the counters so far.
func (c *Client) Stats() ClientStats {
	s := ClientStats{Requests: c.requests.Load(), Attempts: c.attempts.Load(), Retries: c.retries.Load(),
		Failures: c.failures.Load(), Refused: c.refused.Load(), PromptTokens: c.promptTokens.Load(), CompletionTokens: c.completionTokens.Load()}
	for _, ep := range c.endpoints {
		s.Endpoints = append(s.Endpoints, EndpointStats{URL: ep.url, InFlight: ep.inflight.Load(),
			Requests: ep.requests.Load(), Failures: ep.failures.Load(), Ejections: ep.ejections.Load(), Ejected: ep.ejected.Load()})
	}
	return s
}
