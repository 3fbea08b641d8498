package tinker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rllm-org/rllm-go/internal/ctxsleep"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// ClientOptions configure the HTTP side of a Tinker client.
type ClientOptions struct {
	// BaseURL is the service URL without /api/v1 (backend.tinker.base_url).
	BaseURL string
	// APIKey is sent as X-API-Key (or exchanged for a JWT, when the
	// service signs in that way). It never appears in logs or errors.
	APIKey string
	// CredentialCmd is TINKER_CREDENTIAL_CMD: a shell command printing a
	// credential to exchange for a JWT (auth.go). Its output is never
	// shown.
	CredentialCmd string
	// KeySource names where the key came from, for the 401 message
	// (e.g. "the environment variable TINKER_API_KEY named by
	// backend.tinker.api_key_env").
	KeySource string
	// HTTPClient is the transport; nil means a client with no overall
	// timeout (RequestTimeout bounds each request instead).
	HTTPClient *http.Client
	// RequestTimeout bounds one HTTP request (backend.tinker.
	// request_timeout_s): a submit that takes longer is sent again, a
	// retrieve_future poll is polled again; 0 means 120 s.
	RequestTimeout time.Duration
	// MaxRetries bounds the retries of one call after 5xx answers, 429s,
	// dropped connections and expired futures (410); 0 means 8.
	MaxRetries int
	// RetryAfterCap caps how long a 429's Retry-After is honoured; 0
	// means 30 s.
	RetryAfterCap time.Duration
	// MinBackoff is the first back-off delay (doubling, with jitter, up
	// to MaxBackoff); 0 means 100 ms.
	MinBackoff time.Duration
	// MaxBackoff caps the back-off; 0 means 5 s.
	MaxBackoff time.Duration
	// Log receives progress and warning lines; nil discards them.
	Log io.Writer
}

// Client speaks the Tinker API over HTTP: JSON bodies, X-API-Key
// authentication, bounded retries and futures through retrieve_future.
// It is safe for concurrent use.
type Client struct {
	base   *url.URL
	api    string
	cred   *credentials
	source string
	http   *http.Client
	opts   ClientOptions
	logMu  sync.Mutex

	jwtMu        sync.Mutex // one JWT exchange at a time
	jwtExchanges atomic.Int64
	// configFields counts the fields of client/config's answer (SkyRL's
	// stub has one).
	configFields int
	signMu       sync.Mutex
	signedIn     atomic.Bool
}

// NewClient checks the base URL and builds a client.
func NewClient(opts ClientOptions) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(opts.BaseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usererr.Errorf("backend.tinker.base_url: %q is not an http:// or https:// URL; set it to the Tinker service, e.g. http://localhost:8000 for SkyRL", opts.BaseURL)
	}
	if opts.MaxRetries <= 0 {
		opts.MaxRetries = 8
	}
	if opts.RetryAfterCap <= 0 {
		opts.RetryAfterCap = 30 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 120 * time.Second
	}
	if opts.KeySource == "" {
		opts.KeySource = "backend.tinker.api_key_env"
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: u, api: u.String() + wire.APIPrefix, cred: newCredentials(opts.APIKey, opts.CredentialCmd), source: opts.KeySource, http: hc, opts: opts}, nil
}

// BaseURL is the service URL (it holds no secret).
func (c *Client) BaseURL() string { return c.base.String() }

func (c *Client) logf(format string, args ...any) {
	if c.opts.Log == nil {
		return
	}
	c.logMu.Lock()
	defer c.logMu.Unlock()
	fmt.Fprintln(c.opts.Log, "tinker: "+c.redact(fmt.Sprintf(format, args...)))
}

// redact removes the API key, JWTs and credentials from text a server or
// transport produced, in case one echoes request headers back.
func (c *Client) redact(s string) string { return c.cred.redact(s) }

// JWTExchanges counts the JWTs taken so far (0 when the service takes
// raw keys).
func (c *Client) JWTExchanges() int { return int(c.jwtExchanges.Load()) }

// maxResponse bounds what is read of one answer (a forward result of a
// large batch is tens of MB of JSON).
const maxResponse = 1 << 30

// HTTPError is an answer with a status that is not 2xx.
type HTTPError struct {
	Path       string
	Status     int
	Msg        string
	RetryAfter time.Duration
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.Path, e.Status, e.Msg)
}

// retryable statuses: the server may succeed if asked again.
func (e *HTTPError) retryable() bool {
	return e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// transportError is a connection that failed or dropped, or a request
// that got no answer within RequestTimeout: retryable.
type transportError struct {
	err     error
	timeout bool
}

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// once sends one request and reads the whole answer. A non-2xx status is
// an *HTTPError (with the server's message); a failed connection a
// *transportError.
//
// With JWT sign-in a 401 takes a new JWT and sends the request once more
// (the SDK does not retry 401s, but refreshes before expiry; a JWT the
// service revoked early is refreshed here instead of failing the run).
func (c *Client) once(ctx context.Context, method, path string, body ...[]byte) ([]byte, error) {
	key, err := c.header(ctx)
	if err != nil {
		return nil, err
	}
	data, err := c.onceAs(ctx, method, path, key, body...)
	var he *HTTPError
	if errors.As(err, &he) && he.Status == http.StatusUnauthorized && c.cred.jwtInUse() {
		if key, err = c.refreshJWT(ctx, key); err != nil {
			return nil, err
		}
		return c.onceAs(ctx, method, path, key, body...)
	}
	return data, err
}

// onceAs is once with an explicit X-API-Key value.
func (c *Client) onceAs(ctx context.Context, method, path, key string, body ...[]byte) ([]byte, error) {
	// Every request has a deadline: a server that accepts and never
	// answers costs at most RequestTimeout per attempt.
	rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	data, err := c.send(rctx, method, path, key, body...)
	if err != nil && ctx.Err() == nil && rctx.Err() != nil {
		return nil, &transportError{err: fmt.Errorf("no answer within %s (backend.tinker.request_timeout_s)", c.opts.RequestTimeout), timeout: true}
	}
	return data, err
}

func (c *Client) send(ctx context.Context, method, path, key string, body ...[]byte) ([]byte, error) {
	var rd io.Reader
	size := 0
	if len(body) > 0 {
		readers := make([]io.Reader, len(body))
		for i, b := range body {
			readers[i] = bytes.NewReader(b)
			size += len(b)
		}
		rd = io.MultiReader(readers...)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.api+path, rd)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		req.ContentLength = int64(size)
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &transportError{err: errors.New(c.redact(err.Error()))}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &transportError{err: fmt.Errorf("reading the answer of %s: %s", path, c.redact(err.Error()))}
	}
	if len(data) > maxResponse {
		return nil, fmt.Errorf("%s: the answer is larger than %d bytes", path, maxResponse)
	}
	if resp.StatusCode/100 != 2 {
		return nil, &HTTPError{Path: path, Status: resp.StatusCode, Msg: c.serverMessage(data), RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	}
	return data, nil
}

// serverMessage extracts the readable part of an error body: FastAPI's
// detail, Tinker's error, or the start of the text.
func (c *Client) serverMessage(body []byte) string {
	var m struct {
		Detail  any    `json:"detail"`
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	msg := ""
	if json.Unmarshal(body, &m) == nil {
		switch {
		case m.Error != "":
			msg = m.Error
		case m.Message != "":
			msg = m.Message
		case m.Detail != nil:
			if s, ok := m.Detail.(string); ok {
				msg = s
			} else if b, err := json.Marshal(m.Detail); err == nil {
				msg = string(b)
			}
		}
	}
	if msg == "" {
		msg = strings.TrimSpace(string(body))
	}
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	if msg == "" {
		msg = "(empty body)"
	}
	return c.redact(msg)
}

// retryAfter reads a Retry-After header in seconds or as an HTTP date.
func retryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(h, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(h); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// backoff is the delay before retry number n (from 1).
func (c *Client) backoff(n int, err error) time.Duration {
	var he *HTTPError
	if errors.As(err, &he) && he.RetryAfter > 0 {
		return min(he.RetryAfter, c.opts.RetryAfterCap)
	}
	d := c.opts.MinBackoff << min(n-1, 20)
	d = min(d, c.opts.MaxBackoff)
	// ±25% jitter so many clients do not retry in lockstep.
	return d*3/4 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// call sends a request, retrying 408, 429, 5xx and dropped connections
// up to MaxRetries times, and maps the final failure to a readable error.
//
// When an attempt may have reached the server without its answer reaching
// us (a dropped connection, a timeout, a 5xx), the final error, whatever
// it is, is a *LostError: the server may hold the request.
func (c *Client) call(ctx context.Context, method, path string, body ...[]byte) ([]byte, error) {
	return c.callWith(ctx, method, path, c.once, body...)
}

// retried is call with an explicit X-API-Key value (the sign-in calls).
func (c *Client) retried(ctx context.Context, method, path, key string, body ...[]byte) ([]byte, error) {
	return c.callWith(ctx, method, path, func(ctx context.Context, method, path string, body ...[]byte) ([]byte, error) {
		return c.onceAs(ctx, method, path, key, body...)
	}, body...)
}

func (c *Client) callWith(ctx context.Context, method, path string, once func(context.Context, string, string, ...[]byte) ([]byte, error), body ...[]byte) ([]byte, error) {
	lost := false
	fail := func(err error) ([]byte, error) {
		if lost {
			return nil, &LostError{Err: err}
		}
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		data, err := once(ctx, method, path, body...)
		if err == nil {
			return data, nil
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		if !isRetryable(err) {
			return fail(c.classify(err))
		}
		var he *HTTPError
		if !errors.As(err, &he) || he.Status >= 500 {
			lost = true
		}
		if attempt >= c.opts.MaxRetries {
			return fail(fmt.Errorf("%s at %s failed %d times, giving up: %w", path, c.BaseURL(), attempt+1, c.classify(err)))
		}
		d := c.backoff(attempt+1, err)
		c.logf("%s: %v; retrying in %s", path, err, d.Round(time.Millisecond))
		if err := ctxsleep.Sleep(ctx, d); err != nil {
			return fail(err)
		}
	}
}

// LostError is a call that failed after an attempt whose answer was lost
// (a dropped connection, a timeout, a 5xx): whether the server took the
// request is unknown.
type LostError struct{ Err error }

func (e *LostError) Error() string { return e.Err.Error() }
func (e *LostError) Unwrap() error { return e.Err }

// badRequestRetries is how many 400s from retrieve_future in a row are
// polled through before the future counts as failed.
const badRequestRetries = 3

func isTimeout(err error) bool {
	var te *transportError
	return errors.As(err, &te) && te.timeout
}

func isRetryable(err error) bool {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.retryable()
	}
	var te *transportError
	return errors.As(err, &te)
}

// classify turns authentication failures and client errors into user
// errors with the fix; other errors pass unchanged.
func (c *Client) classify(err error) error {
	var he *HTTPError
	if !errors.As(err, &he) {
		return err
	}
	switch he.Status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return &usererr.Error{
			Subject: c.BaseURL(),
			Msg:     fmt.Sprintf("the Tinker service refused the API key (HTTP %d: %s)", he.Status, he.Msg),
			Fix:     "put a valid key in " + c.source,
			Err:     ErrUnauthorized,
		}
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return &usererr.Error{Msg: fmt.Sprintf("the Tinker service at %s refused %s (HTTP %d): %s", c.BaseURL(), he.Path, he.Status, he.Msg), Err: he}
	}
	return err
}

// ErrUnauthorized is what a refused API key's error wraps.
var ErrUnauthorized = errors.New("tinker: unauthorized")

// RequestError is a queued request whose future failed: the server's
// message and its category (user, server or unknown). It is never retried.
type RequestError struct {
	Path     string
	Msg      string
	Category string
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("%s failed on the Tinker service (%s error): %s", e.Path, e.Category, e.Msg)
}

// requestError is a failed request's error: a user error (exit code 2,
// usererr's) when the service says the request itself is at fault, a
// runtime failure otherwise; errors.As finds the *RequestError in both.
func requestError(path, msg, category string) error {
	re := &RequestError{Path: path, Msg: msg, Category: category}
	if category == "user" {
		return &usererr.Error{Msg: re.Error(), Err: re}
	}
	return re
}

// submit posts a queued call and returns its request id.
func (c *Client) submit(ctx context.Context, path string, body ...[]byte) (wire.SubmitResponse, error) {
	data, err := c.call(ctx, http.MethodPost, path, body...)
	if err != nil {
		return wire.SubmitResponse{}, err
	}
	var s wire.SubmitResponse
	if err := json.Unmarshal(data, &s); err != nil || s.RequestID == "" {
		return wire.SubmitResponse{}, fmt.Errorf("%s: the answer has no request_id: %s", path, c.serverMessage(data))
	}
	return s, nil
}

// await polls retrieve_future until the request finishes. A pending
// answer (try_again or 408) polls again; 410 (the promise expired) calls
// resubmit for a new request id; 429, 5xx and dropped connections are
// retried up to MaxRetries times in a row.
func (c *Client) await(ctx context.Context, path, requestID string, resubmit func() (string, error)) (json.RawMessage, error) {
	fails, resubmits, bad := 0, 0, 0
	pending := 0
	lastState := ""
	for {
		body, _ := json.Marshal(wire.RetrieveFutureRequest{RequestID: requestID})
		data, err := c.once(ctx, http.MethodPost, wire.PathRetrieveFuture, body)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var he *HTTPError
		switch {
		case err == nil:
			fails = 0
			var probe struct {
				Type       string  `json:"type"`
				QueueState string  `json:"queue_state"`
				Error      *string `json:"error"`
				Category   string  `json:"category"`
			}
			if err := json.Unmarshal(data, &probe); err != nil {
				return nil, fmt.Errorf("%s: retrieve_future answered with invalid JSON: %s", path, c.serverMessage(data))
			}
			if probe.Type == "try_again" {
				if probe.QueueState != lastState && probe.QueueState != "" && probe.QueueState != "active" {
					c.logf("%s is queued (%s)", path, probe.QueueState)
				}
				lastState = probe.QueueState
				pending++
				if err := ctxsleep.Sleep(ctx, c.pollDelay(pending)); err != nil {
					return nil, err
				}
				continue
			}
			if probe.Error != nil {
				cat := probe.Category
				if cat == "" {
					cat = "unknown"
				}
				return nil, requestError(path, c.redact(*probe.Error), cat)
			}
			return data, nil
		case errors.As(err, &he) && he.Status == http.StatusRequestTimeout, isTimeout(err):
			// The long poll ended without a result (the server's 408, or
			// our request_timeout_s): poll again.
			pending++
			if err := ctxsleep.Sleep(ctx, c.pollDelay(pending)); err != nil {
				return nil, err
			}
		case errors.As(err, &he) && he.Status == http.StatusGone:
			resubmits++
			if resubmits > c.opts.MaxRetries {
				return nil, fmt.Errorf("%s: the result expired (HTTP 410) %d times in a row; giving up", path, resubmits)
			}
			c.logf("%s: the result expired (HTTP 410); resubmitting the same request", path)
			id, err := resubmit()
			if err != nil {
				return nil, err
			}
			requestID = id
		case isRetryable(err):
			fails++
			if fails > c.opts.MaxRetries {
				return nil, fmt.Errorf("waiting for %s at %s failed %d times in a row, giving up: %w", path, c.BaseURL(), fails, c.classify(err))
			}
			d := c.backoff(fails, err)
			c.logf("waiting for %s: %v; retrying in %s", path, err, d.Round(time.Millisecond))
			if err := ctxsleep.Sleep(ctx, d); err != nil {
				return nil, err
			}
		case errors.As(err, &he) && he.Status == http.StatusBadRequest && bad < badRequestRetries:
			// The Tinker SDK polls again after a 400 from retrieve_future
			// a few times before failing the future (a load balancer or a
			// server restarting can answer one); a real failure repeats.
			bad++
			d := c.backoff(bad, err)
			c.logf("waiting for %s: %v; asking again in %s", path, err, d.Round(time.Millisecond))
			if err := ctxsleep.Sleep(ctx, d); err != nil {
				return nil, err
			}
		default:
			var he *HTTPError
			if errors.As(err, &he) && he.Status == http.StatusBadRequest {
				// SkyRL reports a failed request as 400 {detail}.
				return nil, requestError(path, he.Msg, "user")
			}
			return nil, c.classify(err)
		}
	}
}

// pollDelay spaces out polls of a pending future: servers long-poll, so
// this only matters for ones that answer try_again at once.
func (c *Client) pollDelay(n int) time.Duration {
	d := time.Millisecond << min(n, 10)
	return min(d, time.Second)
}

// invoke is submit then await, resubmitting the same body on 410.
func (c *Client) invoke(ctx context.Context, path string, body []byte) (json.RawMessage, error) {
	s, err := c.submit(ctx, path, body)
	if err != nil {
		return nil, err
	}
	return c.await(ctx, path, s.RequestID, func() (string, error) {
		s, err := c.submit(ctx, path, body)
		return s.RequestID, err
	})
}

// Capabilities asks the server which base models and losses it serves.
func (c *Client) Capabilities(ctx context.Context) (wire.Capabilities, error) {
	data, err := c.call(ctx, http.MethodGet, wire.PathCapabilities)
	if err != nil {
		return wire.Capabilities{}, err
	}
	var caps wire.Capabilities
	if err := json.Unmarshal(data, &caps); err != nil {
		return wire.Capabilities{}, fmt.Errorf("%s at %s: the answer is not {supported_models: [...]}: %v", wire.PathCapabilities, c.BaseURL(), err)
	}
	return caps, nil
}
