package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
	wire "github.com/rllm-org/rllm-go/pkg/openaiwire"
	"github.com/rllm-org/rllm-go/pkg/toolcall"
)

// choice accumulates one output sequence as its events arrive.
type choice struct {
	index   int
	prompt  []int
	ids     []int
	lps     []float64
	tops    [][]local.TokenLogprob
	offsets []int // text offset of each token
	text    []byte
	lastLen int // bytes the last token added to text

	finish, matched string
	stopToken       bool

	sentText, sentTok int // streamed so far
	started           bool
}

func (c *choice) apply(ev local.GenEvent, skipSpecial bool) {
	if ev.HasToken {
		c.offsets = append(c.offsets, len(c.text))
		c.ids = append(c.ids, ev.Token)
		c.lps = append(c.lps, ev.Logprob)
		c.tops = append(c.tops, ev.Top)
		n := len(c.text)
		switch {
		case ev.Token < 256:
			c.text = append(c.text, byte(ev.Token))
		case !skipSpecial:
			c.text = append(c.text, local.Tokenizer{}.TokenText(ev.Token)...)
		}
		c.lastLen = len(c.text) - n
	}
	if ev.Finish != "" {
		c.finish, c.matched, c.stopToken = ev.Finish, ev.MatchedStop, ev.StopToken
	}
}

// visible is the text a client may see: once finished, without the stop
// string or stop token that ended it (unless include_stop_str_in_output,
// as vLLM); while running, without a tail that may still turn into a stop
// string or is an incomplete UTF-8 character.
func (c *choice) visible(o *genOptions) []byte {
	t := c.text
	if c.finish != "" {
		if c.finish == "stop" && !o.includeStop {
			switch {
			case c.stopToken:
				t = t[:len(t)-c.lastLen]
			case c.matched != "":
				t = t[:len(t)-min(len(t), len(c.matched))]
			}
		}
		return t
	}
	stops := o.stops
	if o.parseTools {
		// A tool call is sent whole when the reply ends (the chat
		// handler's toolReply): the text stops before it, and a partial
		// "<tool_call>" at the end waits like a partial stop string.
		if i := bytes.Index(t, []byte(toolcall.Open)); i >= 0 {
			t = t[:i]
		}
		stops = append(stops[:len(stops):len(stops)], toolcall.Open)
	}
	hold := 0
	for _, st := range stops {
		for k := min(len(st)-1, len(t)); k > hold; k-- {
			if string(t[len(t)-k:]) == st[:k] {
				hold = k
				break
			}
		}
	}
	// An incomplete UTF-8 character at the end waits for its other bytes.
	for k := 1; k <= min(3, len(t)); k++ {
		b := t[len(t)-k]
		if utf8.RuneStart(b) {
			if !utf8.FullRune(t[len(t)-k:]) {
				hold = max(hold, k)
			}
			break
		}
	}
	return t[:len(t)-hold]
}

// pending is what a stream chunk for c would carry now: the text made
// visible since the last chunk, the visible length to mark sent, and
// whether there is anything to send (text, tokens or the finish).
func (c *choice) pending(o *genOptions) (string, int, bool) {
	vis := c.visible(o)
	delta := ""
	if len(vis) > c.sentText {
		delta = string(vis[c.sentText:])
	}
	return delta, len(vis), delta != "" || c.sentTok < len(c.ids) || c.finish != ""
}

// markSent records a chunk sent up to visible length vis.
func (c *choice) markSent(vis int) {
	c.started, c.sentText, c.sentTok = true, max(c.sentText, vis), len(c.ids)
}

// stopReason is vLLM's stop_reason: the matched stop string, the matched
// stop token id as a number, or null for end of sequence and length.
func (c *choice) stopReason() any {
	if c.matched == "" {
		return nil
	}
	if c.stopToken {
		if id, err := strconv.Atoi(c.matched); err == nil {
			return id
		}
	}
	return c.matched
}

func (c *choice) finishReason() any {
	if c.finish == "" {
		return nil
	}
	return c.finish
}

// tokenString is how a token is named in logprobs: its text, or, for a
// byte that is not UTF-8 by itself, "bytes:\xNN" as OpenAI writes it (two
// such bytes would otherwise both read "\ufffd" and collide as keys of
// completions' top_logprobs); "token_id:N" with return_tokens_as_token_ids.
func tokenString(id int, asIDs bool) string {
	if asIDs {
		return wire.TokenIDString(id)
	}
	if id >= 0x80 && id < 256 {
		return fmt.Sprintf("bytes:\\x%02x", id)
	}
	return local.Tokenizer{}.TokenText(id)
}

func tokenBytes(id int) []int {
	t := local.Tokenizer{}.TokenText(id)
	b := make([]int, len(t))
	for i := range len(t) {
		b[i] = int(t[i])
	}
	return b
}

// chunkHead starts every response and chunk. Metadata carries the weight
// version as SGLang's responses do.
type chunkHead struct {
	ID       string       `json:"id"`
	Object   string       `json:"object"`
	Created  int64        `json:"created"`
	Model    string       `json:"model"`
	Metadata responseMeta `json:"metadata"`
}

type responseMeta struct {
	WeightVersion string `json:"weight_version"`
}

func (s *Server) head(prefix, object, version string) chunkHead {
	return chunkHead{ID: s.nextID(prefix), Object: object, Created: time.Now().Unix(), Model: s.opts.ModelName,
		Metadata: responseMeta{WeightVersion: version}}
}

// run is one request in the engine: its streams (one per prompt) and
// choices (prompt p's sequence j is choice p·n+j).
type run struct {
	s       *Server
	o       *genOptions
	prompts [][]int
	streams []*local.GenStream
	choices []*choice
	start   time.Time
	lastTok time.Time
	first   bool
	version string
}

func (s *Server) newRun(o *genOptions, prompts [][]int, start time.Time) *run {
	r := &run{s: s, o: o, prompts: prompts, start: start}
	n := o.req.N
	for p, prompt := range prompts {
		for j := range n {
			r.choices = append(r.choices, &choice{index: p*n + j, prompt: prompt})
		}
	}
	return r
}

// begin submits the run; false means an error was written.
func (r *run) begin(w http.ResponseWriter, ctx context.Context) bool {
	reqs := make([]local.GenRequest, len(r.prompts))
	for i, p := range r.prompts {
		reqs[i] = r.o.req
		reqs[i].Prompt = p
	}
	r.streams = r.s.submit(w, ctx, reqs)
	if r.streams == nil {
		return false
	}
	// A request takes the weights current when it leaves the queue (a
	// weight update while it waits, e.g. during /pause_generation, applies
	// to it): its version is known once it has started.
	for _, st := range r.streams {
		select {
		case <-st.Started():
		case <-ctx.Done():
			r.failed(w, ctx.Err())
			return false
		}
	}
	r.version = r.streams[0].Version
	return true
}

func (r *run) close() {
	for _, st := range r.streams {
		st.Close()
	}
}

// consume applies a batch of events of prompt p and records latencies.
func (r *run) consume(p int, evs []local.GenEvent) {
	now := time.Now()
	perSeq := map[int]int{}
	for _, ev := range evs {
		r.choices[p*r.o.req.N+ev.Seq].apply(ev, r.o.skipSpecial)
		if ev.HasToken {
			perSeq[ev.Seq]++
		}
	}
	most := 0
	for _, k := range perSeq {
		most = max(most, k)
	}
	if most == 0 {
		return
	}
	m := r.s.metrics
	if !r.first {
		// The first token is TTFT; tokens that came with it follow it by 0.
		r.first, r.lastTok = true, now
		m.ttft.Observe(now.Sub(r.start).Seconds())
		most--
	}
	if most > 0 {
		dt := now.Sub(r.lastTok).Seconds() / float64(most)
		for range most {
			m.itl.Observe(dt)
		}
	}
	r.lastTok = now
}

// wait collects every event of every prompt (non-streaming requests),
// waking once per prompt rather than once per decoding step, and records
// the latencies from the engine's token times.
func (r *run) wait(ctx context.Context) error {
	m := r.s.metrics
	for p, st := range r.streams {
		evs, err := st.Wait(ctx)
		if err == nil {
			err = st.Err()
		}
		if err != nil {
			return err
		}
		most := 0
		for _, ev := range evs {
			r.choices[p*r.o.req.N+ev.Seq].apply(ev, r.o.skipSpecial)
		}
		for _, c := range r.choices[p*r.o.req.N : (p+1)*r.o.req.N] {
			most = max(most, len(c.ids))
		}
		first, last := st.TokenTimes()
		if first.IsZero() {
			continue
		}
		if p == 0 {
			m.ttft.Observe(first.Sub(r.start).Seconds())
		}
		if most > 1 {
			dt := last.Sub(first).Seconds() / float64(most-1)
			for range most - 1 {
				m.itl.Observe(dt)
			}
		}
	}
	return nil
}

// answers waits for every choice of r (see wait) and turns each into the
// route's wire choice with one; when the wait ends early it answers the
// failure (see failed) and returns false.
func answers[C any](ctx context.Context, w http.ResponseWriter, r *run, one func(i int, c *choice) C) ([]C, bool) {
	if err := r.wait(ctx); err != nil {
		r.failed(w, err)
		return nil, false
	}
	out := make([]C, len(r.choices))
	for i, c := range r.choices {
		out[i] = one(i, c)
	}
	return out, true
}

// finish records the request's end in the metrics.
func (r *run) finish() {
	m := r.s.metrics
	m.e2e.Observe(time.Since(r.start).Seconds())
	reason := "abort"
	if len(r.choices) > 0 && r.choices[0].finish != "" {
		reason = r.choices[0].finish
	}
	m.success.WithLabelValues(reason).Inc()
}

// runningUsage is the usage every chunk carries with
// continuous_usage_stats, nil otherwise.
func (r *run) runningUsage() *wire.Usage {
	if !r.o.continuousUsage {
		return nil
	}
	u := r.usage()
	return &u
}

func (r *run) usage() wire.Usage {
	var u wire.Usage
	for _, p := range r.prompts {
		u.PromptTokens += len(p)
	}
	for _, c := range r.choices {
		u.CompletionTokens += len(c.ids)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// failed answers a request whose wait ended early.
func (r *run) failed(w http.ResponseWriter, err error) {
	r.close()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, "", "the request did not finish within the server's request timeout of %s; ask for fewer tokens or raise --request-timeout", r.s.opts.RequestTimeout)
	case errors.Is(err, local.ErrEngineFailed):
		writeError(w, http.StatusInternalServerError, "", "%v; the server goes on serving other requests", err)
	}
	// A cancelled request has no client left to answer.
}

// stream drives a streaming response: for every batch of events it calls
// emit with the choices that changed, which writes chunks through sse.
func (r *run) stream(ctx context.Context, sse *sseWriter, usageChunk func(wire.Usage) any, emit func(changed []*choice) bool) {
	defer r.close()
	for p, st := range r.streams {
		for {
			evs, err := st.Next(ctx)
			if err == io.EOF {
				if ferr := st.Err(); ferr != nil {
					sse.error(http.StatusInternalServerError, ferr.Error())
					sse.done()
					return
				}
				break
			}
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					sse.error(http.StatusGatewayTimeout, "the request did not finish within the server's request timeout")
					sse.done()
				}
				return
			}
			r.consume(p, evs)
			var changed []*choice
			seen := map[int]bool{}
			for _, ev := range evs {
				if !seen[ev.Seq] {
					seen[ev.Seq] = true
					changed = append(changed, r.choices[p*r.o.req.N+ev.Seq])
				}
			}
			if !emit(changed) || !sse.flush() {
				return
			}
		}
	}
	if r.o.includeUsage {
		sse.send(usageChunk(r.usage()))
	}
	sse.done()
}

// writeResult writes a whole response within the write timeout, so a
// client that stops reading cannot hold the handler.
func (s *Server) writeResult(w http.ResponseWriter, version string, v any) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
	w.Header().Set("X-Weight-Version", version)
	writeJSON(w, http.StatusOK, v)
}

// streamChoices streams each changed choice as one chunk, built by chunk
// from the choice (before it is marked sent) and its new text.
func (r *run) streamChoices(ctx context.Context, sse *sseWriter, usageChunk func(wire.Usage) any, chunk func(c *choice, delta string) any) {
	r.stream(ctx, sse, usageChunk, func(changed []*choice) bool {
		for _, c := range changed {
			delta, vis, ok := c.pending(r.o)
			if !ok {
				continue
			}
			v := chunk(c, delta)
			c.markSent(vis)
			if !sse.send(v) {
				return false
			}
		}
		return true
	})
}

// sseWriter writes server-sent events: chunks are buffered and written
// with one flush per batch of engine events, each write with a deadline,
// so a stalled client fails its request instead of holding it.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     []byte
	err     error
}

func newSSE(w http.ResponseWriter, timeout time.Duration, version string) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Weight-Version", version)
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
}

// flush writes the buffered events; false once the client is gone.
func (e *sseWriter) flush() bool {
	if e.err != nil {
		return false
	}
	if len(e.buf) == 0 {
		return true
	}
	_ = e.rc.SetWriteDeadline(time.Now().Add(e.timeout))
	_, err := e.w.Write(e.buf)
	e.buf = e.buf[:0]
	if err == nil {
		if err = e.rc.Flush(); errors.Is(err, http.ErrNotSupported) {
			err = nil
		}
	}
	e.err = err
	return err == nil
}

// send buffers one event; it fails only if the client is already gone.
func (e *sseWriter) send(v any) bool {
	if e.err != nil {
		return false
	}
	b, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return false
	}
	e.buf = append(e.buf, "data: "...)
	e.buf = append(e.buf, b...)
	e.buf = append(e.buf, "\n\n"...)
	return true
}

func (e *sseWriter) error(status int, msg string) {
	typ := "TimeoutError"
	if status == http.StatusInternalServerError {
		typ = "InternalServerError"
	}
	e.send(wire.ErrorResponse{Error: wire.Error{Message: msg, Type: typ, Code: status}})
}

func (e *sseWriter) done() {
	e.buf = append(e.buf, "data: [DONE]\n\n"...)
	e.flush()
}
