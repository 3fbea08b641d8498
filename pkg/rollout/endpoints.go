package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// endpoint is one server and what the client knows of its state.
type endpoint struct {
	url       string
	inflight  atomic.Int64
	requests  atomic.Int64
	failures  atomic.Int64
	ejections atomic.Int64
	streak    atomic.Int64 // consecutive retryable failures
	ejected   atomic.Bool
	nextProbe atomic.Int64 // unix nanoseconds
	probing   atomic.Bool
	maxLen    atomic.Int64 // max_model_len from /v1/models (0: unknown)
	// noContext says why maxLen is unknown after Check.
	noContext atomic.Pointer[string]
	// retired endpoints are never picked again: their weights are stale
	// (the trainer could not publish to them), whatever their health.
	retired atomic.Bool
}

func (e *endpoint) succeeded() { e.streak.Store(0) }

// failed records a retryable failure and reports whether it ejected the
// endpoint.
func (e *endpoint) failed(ejectAfter int) bool {
	e.failures.Add(1)
	if e.streak.Add(1) >= int64(ejectAfter) && e.ejected.CompareAndSwap(false, true) {
		e.ejections.Add(1)
		return true
	}
	return false
}

// pick returns the endpoint with the fewest requests in flight among those
// in rotation, avoiding the one that just failed when there is a choice.
// Ties go round-robin so that idle endpoints share the load. When every
// endpoint is ejected it still picks one: a request has a better chance
// on a struggling server than none.
func (c *Client) pick(avoid *endpoint) *endpoint {
	eps := c.endpoints
	if len(eps) == 1 {
		c.maybeProbe(eps[0])
		return eps[0]
	}
	start := int(c.rr.Add(1))
	var best, fallback *endpoint
	for i := range eps {
		ep := eps[(start+i)%len(eps)]
		if ep.retired.Load() {
			continue
		}
		if ep.ejected.Load() {
			c.maybeProbe(ep)
			if fallback == nil || ep.inflight.Load() < fallback.inflight.Load() {
				fallback = ep
			}
			continue
		}
		if ep == avoid {
			continue
		}
		if best == nil || ep.inflight.Load() < best.inflight.Load() {
			best = ep
		}
	}
	switch {
	case best != nil:
		return best
	case avoid != nil && !avoid.ejected.Load() && !avoid.retired.Load():
		return avoid
	case fallback == nil:
		// Only retired endpoints are left; a request to one fails
		// visibly rather than not being sent.
		return eps[start%len(eps)]
	}
	return fallback
}

// Retire stops sending requests to the endpoint at url for good (the
// trainer could not publish new weights to it). It reports whether url is
// one of the client's endpoints.
func (c *Client) Retire(url string) bool {
	if n, err := NormalizeEndpoint(url); err == nil {
		url = n
	}
	for _, ep := range c.endpoints {
		if ep.url == url {
			ep.retired.Store(true)
			return true
		}
	}
	return false
}

// maybeProbe starts one /health probe of an ejected endpoint when its
// probe is due.
func (c *Client) maybeProbe(ep *endpoint) {
	if !ep.ejected.Load() || time.Now().UnixNano() < ep.nextProbe.Load() || !ep.probing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer ep.probing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), min(c.opts.RequestTimeout, 10*time.Second))
		defer cancel()
		if c.healthy(ctx, ep) == nil {
			ep.streak.Store(0)
			ep.ejected.Store(false)
			return
		}
		ep.nextProbe.Store(time.Now().Add(c.opts.ProbeInterval).UnixNano())
	}()
}

func (c *Client) healthLoop() {
	t := time.NewTicker(c.opts.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		for _, ep := range c.endpoints {
			if ep.ejected.Load() {
				continue // probed on its own schedule
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), min(c.opts.HealthInterval, 10*time.Second))
				defer cancel()
				if c.healthy(ctx, ep) != nil && ep.ejected.CompareAndSwap(false, true) {
					ep.ejections.Add(1)
					ep.nextProbe.Store(time.Now().Add(c.opts.ProbeInterval).UnixNano())
				}
			}()
		}
		wg.Wait()
	}
}

func (c *Client) get(ctx context.Context, ep *endpoint, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.url+path, nil)
	if err != nil {
		return nil, err
	}
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, stripURL(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(ep, path, resp)
	}
	// Health and model lists are small: cap them small.
	return readBody(resp, maxSmallBody)
}

// healthy asks /health. A 404 counts as healthy: the server answered and
// simply has no /health, as plain OpenAI-compatible APIs do (vLLM and
// SGLang have one); Check still asks /v1/models.
func (c *Client) healthy(ctx context.Context, ep *endpoint) error {
	_, err := c.get(ctx, ep, "/health")
	var se *StatusError
	if errors.As(err, &se) && se.Status == http.StatusNotFound {
		return nil
	}
	return err
}

// CheckError lists every endpoint that failed the start-up check.
type CheckError struct {
	Problems []string // one sentence per endpoint
}

func (e *CheckError) Error() string {
	return "inference endpoints not ready: " + strings.Join(e.Problems, "; ")
}

// Check asks every endpoint for /health and /v1/models, concurrently, and
// fails with one error naming each endpoint that is down or does not
// serve the configured model. It records max_model_len for MaxModelLen.
func (c *Client) Check(ctx context.Context) error {
	problems := make([]string, len(c.endpoints))
	var wg sync.WaitGroup
	for i, ep := range c.endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			problems[i] = c.checkOne(ctx, ep)
		}()
	}
	wg.Wait()
	var out []string
	for _, p := range problems {
		if p != "" {
			out = append(out, p)
		}
	}
	if len(out) > 0 {
		return &CheckError{Problems: out}
	}
	return nil
}

func (c *Client) checkOne(ctx context.Context, ep *endpoint) string {
	ctx, cancel := context.WithTimeout(ctx, min(c.opts.RequestTimeout, 30*time.Second))
	defer cancel()
	if err := c.healthy(ctx, ep); err != nil {
		var se *StatusError
		if errors.As(err, &se) {
			return fmt.Sprintf("%s/health answered %d (the server is up but not ready; wait for it to load the model)", ep.url, se.Status)
		}
		return fmt.Sprintf("%s is down (%v); start the server or fix rollout.endpoints", ep.url, err)
	}
	body, err := c.get(ctx, ep, "/v1/models")
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.Status == http.StatusNotFound {
			// A plain OpenAI-compatible API may have no model list: the
			// model name and the context go unchecked.
			ep.unknownContext("it has no /v1/models")
			return ""
		}
		return fmt.Sprintf("%s/v1/models failed: %v", ep.url, err)
	}
	l, why, ids := readModels(body, c.model())
	switch {
	case why != "":
		ep.unknownContext(why)
		return ""
	case l > 0:
		ep.maxLen.Store(l)
		ep.noContext.Store(nil)
		return ""
	}
	return fmt.Sprintf("%s serves %s, not %q; set rollout.model to the served name or point rollout.endpoints at the right server", ep.url, quoteList(ids), c.model())
}

// readModels reads a /v1/models body for model: its context (max_model_len)
// when listed with one; else why the context is unknown (a body that is
// not a model list, the model listed without a context); else, the model
// not listed, the ids that are (sorted).
func readModels(body []byte, model string) (ctxLen int64, unknown string, ids []string) {
	var models struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &models); err != nil || models.Data == nil {
		return 0, "its /v1/models is not the list of models vLLM and SGLang send", nil
	}
	for _, raw := range models.Data {
		var m struct {
			ID          string          `json:"id"`
			MaxModelLen json.RawMessage `json:"max_model_len"`
		}
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		if m.ID == model {
			n, ok := contextLength(m.MaxModelLen)
			if !ok {
				return 0, fmt.Sprintf("its /v1/models gives no max_model_len for %q", m.ID), nil
			}
			return n, "", nil
		}
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return 0, "", ids
}

// contextLength reads max_model_len: a positive whole number.
func contextLength(raw json.RawMessage) (int64, bool) {
	var n json.Number
	if len(raw) == 0 || json.Unmarshal(raw, &n) != nil {
		return 0, false
	}
	v, err := n.Int64()
	if err != nil || v <= 0 || v > 1<<40 {
		return 0, false
	}
	return v, true
}

func (e *endpoint) unknownContext(why string) {
	e.maxLen.Store(0)
	e.noContext.Store(&why)
}

func quoteList(ids []string) string {
	if len(ids) == 0 {
		return "no model"
	}
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = fmt.Sprintf("%q", id)
	}
	return strings.Join(q, ", ")
}

// MaxModelLen is the smallest context length the endpoints reported in
// Check (0 before Check or when none reported one).
func (c *Client) MaxModelLen() int {
	var m int64
	for _, ep := range c.endpoints {
		if l := ep.maxLen.Load(); l > 0 && (m == 0 || l < m) {
			m = l
		}
	}
	return int(m)
}

// EndpointContext is what an endpoint said of its context in Check.
type EndpointContext struct {
	URL         string
	MaxModelLen int    // 0: unknown
	Unknown     string // why it is unknown, when it is
}

// Contexts lists the endpoints' contexts as Check found them.
func (c *Client) Contexts() []EndpointContext {
	out := make([]EndpointContext, len(c.endpoints))
	for i, ep := range c.endpoints {
		out[i] = EndpointContext{URL: ep.url, MaxModelLen: int(ep.maxLen.Load())}
		if why := ep.noContext.Load(); why != nil {
			out[i].Unknown = *why
		}
	}
	return out
}

// ContextBudget is what a run may ask of one request: a prompt of up to
// MaxPrompt tokens and a reply of up to MaxResponse, each named by the
// key that sets it.
type ContextBudget struct {
	MaxPrompt, MaxResponse int
	PromptKey, ResponseKey string
}

// ContextNotes are the lines a run prints at start about its endpoints'
// contexts: one for the endpoints whose context is unknown, one per
// context smaller than the budget's prompt + reply. None when every
// context fits.
func ContextNotes(ctxs []EndpointContext, b ContextBudget) []string {
	var unknown []string
	small := map[int][]string{}
	var sizes []int
	for _, e := range ctxs {
		switch {
		case e.MaxModelLen <= 0 && e.Unknown != "":
			unknown = append(unknown, e.URL+" ("+e.Unknown+")")
		case e.MaxModelLen > 0 && e.MaxModelLen < b.MaxPrompt+b.MaxResponse:
			if small[e.MaxModelLen] == nil {
				sizes = append(sizes, e.MaxModelLen)
			}
			small[e.MaxModelLen] = append(small[e.MaxModelLen], e.URL)
		}
	}
	var out []string
	slices.Sort(sizes)
	for _, n := range sizes {
		verb := "serves"
		if len(small[n]) > 1 {
			verb = "serve"
		}
		out = append(out, fmt.Sprintf("%s %s a context of %d tokens, less than %s (%d) + %s (%d): each reply is capped to what its prompt leaves (ending max_response_length_exceeded) and a prompt of %d tokens or more ends max_prompt_length_exceeded; "+
			"lower the keys or start the server with a larger context (vLLM --max-model-len, rllm serve backend.local.context)",
			strings.Join(small[n], ", "), verb, n, b.PromptKey, b.MaxPrompt, b.ResponseKey, b.MaxResponse, n))
	}
	if len(unknown) > 0 {
		out = append(out, fmt.Sprintf("the context of %s is unknown, so max_tokens is sent as %s (%d) uncapped; a server that refuses prompt + max_tokens ends the episode max_prompt_length_exceeded",
			strings.Join(unknown, ", "), b.ResponseKey, b.MaxResponse))
	}
	return out
}
