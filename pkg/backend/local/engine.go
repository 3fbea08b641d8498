package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// Engine serves many generation requests at once with continuous batching:
// one loop goroutine runs every running sequence through one batched
// forward per decoding step (split over the cores), and requests that
// arrive join between steps. At most MaxNumSeqs sequences run; up to
// MaxWaiting more wait in a FIFO queue and Submit refuses the rest with
// ErrQueueFull, so memory stays bounded under any load.
//
// A request runs entirely on the weights that were current when it started
// (left the waiting queue): SetWeights affects requests still waiting and
// later ones, so requests running during a weight update finish on the old
// weights and requests queued during a pause run on the new ones.
type Engine struct {
	opts EngineOptions

	mu      sync.Mutex
	snap    *Snapshot
	version string
	waiting []*genGroup
	nWait   int // sequences waiting
	paused  bool
	closed  bool
	sweep   bool // a stream was closed: drop cancelled groups
	wseq    int  // counts SetWeights, orders weight versions
	wake    chan struct{}
	control chan func([]*genSeq) []*genSeq
	done    chan struct{}

	running atomic.Int64
	waitN   atomic.Int64
	stats   engineCounters
}

// EngineOptions bound an engine.
type EngineOptions struct {
	// MaxNumSeqs is how many sequences decode together (vLLM's
	// --max-num-seqs); 256 when 0.
	MaxNumSeqs int
	// MaxWaiting is how many sequences may wait for a slot; 4·MaxNumSeqs
	// when 0.
	MaxWaiting int
	// Workers is how many goroutines split a step; GOMAXPROCS when 0.
	Workers int
}

type engineCounters struct {
	steps, forwards, promptTokens, genTokens, maxBatch atomic.Int64
}

// EngineStats are counters since the engine started.
type EngineStats struct {
	Running, Waiting int
	// Steps is the number of decoding steps; Forwards the number of
	// batched forward passes (one per step and weight version in use).
	Steps, Forwards int64
	// MaxBatch is the largest number of sequences one forward carried.
	MaxBatch                int64
	PromptTokens, GenTokens int64
}

// ErrQueueFull refuses a request when the waiting queue is full.
var ErrQueueFull = errors.New("the server is at capacity: every sequence slot is busy and the waiting queue is full; retry later")

// ErrEngineClosed refuses requests after Close.
var ErrEngineClosed = errors.New("the engine is shut down")

// GenRequest is one prompt to complete N times.
type GenRequest struct {
	Prompt []int
	N      int
	Params backend.SamplingParams
	// LogitBias is added to the logits of these token ids before sampling
	// (not to the reported logprobs).
	LogitBias map[int]float64
	// MinTokens forbids the stop tokens until this many were generated.
	MinTokens int
	// MinP drops tokens whose probability is below MinP times the most
	// likely token's (after temperature); 0 disables it.
	MinP float64
	// IgnoreEOS keeps generating past <|eos|> and <|im_end|>.
	IgnoreEOS bool
	// AllowedTokenIDs, when set, are the only tokens that may be sampled.
	AllowedTokenIDs []int
	// TopLogprobs is how many most likely alternatives to report with
	// each sampled token (0: none).
	TopLogprobs int
	// PromptLogprobs, when ≥ 0, asks for the logprob of every prompt token
	// after the first and that many alternatives.
	PromptLogprobs int
}

// TokenLogprob is a token and its logprob (at temperature 1); Rank is its
// place among all tokens by likelihood (1 = most likely), set for prompt
// logprobs and alternatives.
type TokenLogprob struct {
	Token   int
	Logprob float64
	Rank    int
}

// GenEvent is one sampled token of sequence Seq (0..N-1), or the end of
// the sequence when Finish is set ("stop", "length" or "abort"); a
// finishing event may carry a last token (HasToken).
type GenEvent struct {
	Seq      int
	HasToken bool
	Token    int
	Logprob  float64
	Top      []TokenLogprob
	// Finish and MatchedStop as in backend.SampledSequence; "abort" when
	// the request was cancelled or the engine paused with abort.
	Finish, MatchedStop string
	// StopToken is set when the sequence ended on a stop token: <|eos|>,
	// <|im_end|> or one of stop_token_ids (then MatchedStop is its id).
	StopToken bool
}

// GenStream delivers a request's events as the engine produces them. The
// engine never waits for the reader: events queue in the stream (at most
// N × max_tokens of them), so a slow client cannot hold up a step.
type GenStream struct {
	// Version is the weight version the request runs on; Snapshot the
	// weights. A request takes the weights current when it starts: both
	// may change until Started is closed, and are fixed after.
	Version  string
	Snapshot *Snapshot
	started  chan struct{}
	startMu  sync.Once

	ctx    context.Context
	eng    *Engine
	n      int
	notify chan struct{}
	done   chan struct{} // closed when every sequence has finished

	mu          sync.Mutex
	events      []GenEvent
	left        int   // sequences not finished
	err         error // why the engine failed the request (see Err)
	promptL     [][]TokenLogprob
	first, last time.Time // first and latest push with a token
	closed      atomic.Bool
	stopWatch   func() bool // stops watching ctx once finished
}

// Wait blocks until every sequence has finished (or ctx ends) and returns
// all the events not yet read: for a reader that needs only the end, it
// avoids a wake-up per decoding step.
func (s *GenStream) Wait(ctx context.Context) ([]GenEvent, error) {
	select {
	case <-s.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := s.events
	s.events = nil
	return ev, nil
}

// TokenTimes are when the first and the latest tokens reached the stream.
func (s *GenStream) TokenTimes() (first, last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, s.last
}

// Next waits for events and returns all that are queued; io.EOF once every
// sequence has finished and its events were returned; ctx.Err() when ctx
// ends first.
func (s *GenStream) Next(ctx context.Context) ([]GenEvent, error) {
	for {
		s.mu.Lock()
		ev, left := s.events, s.left
		s.events = nil
		s.mu.Unlock()
		if len(ev) > 0 {
			return ev, nil
		}
		if left == 0 {
			return nil, io.EOF
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// PromptLogprobs are the prompt's logprobs when requested: entry i is the
// prompt token i (i ≥ 1) first, then the alternatives; entry 0 is nil.
// They are set before the first event.
func (s *GenStream) PromptLogprobs() [][]TokenLogprob {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.promptL
}

// Close abandons the request: its sequences stop at the next step.
func (s *GenStream) Close() {
	if !s.closed.Swap(true) {
		s.eng.mu.Lock()
		s.eng.sweep = true
		s.eng.mu.Unlock()
		s.eng.signal()
	}
}

func (s *GenStream) push(ev []GenEvent, finished int) {
	s.markStarted()
	s.mu.Lock()
	s.events = append(s.events, ev...)
	for _, e := range ev {
		if e.HasToken {
			now := time.Now()
			if s.first.IsZero() {
				s.first = now
			}
			s.last = now
			break
		}
	}
	wasLeft := s.left
	s.left -= finished
	if wasLeft > 0 && s.left == 0 {
		close(s.done)
		if s.stopWatch != nil {
			s.stopWatch()
		}
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Err is set when the engine failed the request (a panic while it ran):
// its sequences then finish with "abort" and Err says why. It is set
// before the finishing events.
func (s *GenStream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Started is closed once the request has left the waiting queue (it runs,
// or it ended without running); Version and Snapshot are final then.
func (s *GenStream) Started() <-chan struct{} { return s.started }

func (s *GenStream) markStarted() { s.startMu.Do(func() { close(s.started) }) }

func (s *GenStream) cancelled() bool { return s.closed.Load() || s.ctx.Err() != nil }

// genGroup is one request: its sequences share the prompt's prefill.
type genGroup struct {
	req    GenRequest
	stream *GenStream
	seqs   []*genSeq
	seed   uint64
	wseq   int
}

// genSeq is one running sequence.
type genSeq struct {
	g         *genGroup
	idx       int
	w         *weights
	kv        *kvCache
	logits    []float32
	rng       *rand.Rand
	n         int // tokens generated
	maxTokens int
	text      []byte
	last      int
	ev        GenEvent
	done      bool
}

// NewEngine starts an engine serving snap as weight version version.
func NewEngine(snap *Snapshot, version string, opts EngineOptions) *Engine {
	if opts.MaxNumSeqs <= 0 {
		opts.MaxNumSeqs = 256
	}
	if opts.MaxWaiting <= 0 {
		opts.MaxWaiting = 4 * opts.MaxNumSeqs
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	e := &Engine{opts: opts, snap: snap, version: version, wake: make(chan struct{}, 1),
		control: make(chan func([]*genSeq) []*genSeq), done: make(chan struct{})}
	go e.loop()
	return e
}

// Options are the engine's bounds after defaults.
func (e *Engine) Options() EngineOptions { return e.opts }

// Weights are the snapshot and version new requests use.
func (e *Engine) Weights() (*Snapshot, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snap, e.version
}

// SetWeights makes later requests use snap as version. It refuses a
// snapshot whose model shape differs, since the served context and
// vocabulary would change under clients.
func (e *Engine) SetWeights(snap *Snapshot, version string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := CheckSameShape(snap.Config(), e.snap.Config()); err != nil {
		return err
	}
	e.snap, e.version = snap, version
	e.wseq++
	// Requests still waiting have not started: they run on the new
	// weights, as SGLang runs requests queued during a pause on the
	// weights loaded before /continue_generation.
	for _, g := range e.waiting {
		g.stream.Snapshot, g.stream.Version, g.wseq = snap, version, e.wseq
	}
	return nil
}

// CheckSameShape refuses weights of shape got for a server that runs
// shape want: the served context and vocabulary would change under
// clients.
func CheckSameShape(got, want Config) error {
	a, b := got.withDefaults(), want.withDefaults()
	if a.Layers != b.Layers || a.DModel != b.DModel || a.Heads != b.Heads || a.DFF != b.DFF || a.Context != b.Context {
		return &backend.InputError{Msg: fmt.Sprintf("the new weights have shape layers %d, d_model %d, heads %d, d_ff %d, context %d but the server runs layers %d, d_model %d, heads %d, d_ff %d, context %d; restart the server to change the model's shape",
			a.Layers, a.DModel, a.Heads, a.DFF, a.Context, b.Layers, b.DModel, b.Heads, b.DFF, b.Context)}
	}
	return nil
}

// SetVersion renames the current weights' version.
func (e *Engine) SetVersion(version string) {
	e.mu.Lock()
	e.version = version
	e.mu.Unlock()
}

// Pause stops decoding after the current step; with abort, every running
// and waiting request ends now with finish reason "abort" (SGLang's
// pause_generation modes "abort" and "in_place"). Requests submitted while
// paused wait. It returns how many requests were aborted or are paused.
func (e *Engine) Pause(abort bool) int {
	e.mu.Lock()
	e.paused = true
	n := len(e.waiting)
	var abortWaiting []*genGroup
	if abort {
		abortWaiting, e.waiting, e.nWait = e.waiting, nil, 0
		e.waitN.Store(0)
	}
	e.mu.Unlock()
	for _, g := range abortWaiting {
		g.abort()
	}
	if abort {
		// Running sequences are the loop's; ask it to abort them.
		done := make(chan int, 1)
		fn := func(running []*genSeq) []*genSeq {
			groups := map[*genGroup]bool{}
			for _, s := range running {
				groups[s.g] = true
			}
			for g := range groups {
				g.abort()
			}
			done <- len(groups)
			return nil
		}
		select {
		case e.control <- fn:
			return n + <-done
		case <-e.done: // closed: nothing runs any more
			return n
		}
	}
	return n + int(e.running.Load())
}

// Continue resumes decoding after Pause.
func (e *Engine) Continue() {
	e.mu.Lock()
	e.paused = false
	e.mu.Unlock()
	e.signal()
}

// Paused reports whether decoding is paused.
func (e *Engine) Paused() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.paused
}

// Stats returns the engine's counters.
func (e *Engine) Stats() EngineStats {
	return EngineStats{
		Running: int(e.running.Load()), Waiting: int(e.waitN.Load()),
		Steps: e.stats.steps.Load(), Forwards: e.stats.forwards.Load(), MaxBatch: e.stats.maxBatch.Load(),
		PromptTokens: e.stats.promptTokens.Load(), GenTokens: e.stats.genTokens.Load(),
	}
}

// Close aborts every request and stops the loop.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.signal()
	<-e.done
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Submit queues requests (e.g. the prompts of one completions call)
// together: all are queued or none. Each stream ends when its sequences
// finish, ctx ends or the stream is closed. Requests are validated first;
// a bad one fails with *backend.InputError.
func (e *Engine) Submit(ctx context.Context, reqs ...GenRequest) ([]*GenStream, error) {
	e.mu.Lock()
	snap, version, wseq := e.snap, e.version, e.wseq
	e.mu.Unlock()
	total := 0
	for i := range reqs {
		r := &reqs[i]
		r.N = max(r.N, 1)
		if r.N > e.opts.MaxNumSeqs {
			return nil, inputErrorf("n is %d but the server runs at most %d sequences at once (--max-num-seqs); ask for fewer", r.N, e.opts.MaxNumSeqs)
		}
		sr := backend.SampleRequest{Prompt: r.Prompt, NumSamples: r.N, Params: r.Params}
		if err := validateSampleRequest(&sr, snap.Config().Context); err != nil {
			return nil, err
		}
		for id := range r.LogitBias {
			if id < 0 || id >= TokenizerVocab {
				return nil, inputErrorf("logit_bias names token %d, outside the vocabulary [0, %d)", id, TokenizerVocab)
			}
		}
		for _, id := range r.AllowedTokenIDs {
			if id < 0 || id >= TokenizerVocab {
				return nil, inputErrorf("allowed_token_ids has token %d, outside the vocabulary [0, %d)", id, TokenizerVocab)
			}
		}
		if math.IsNaN(r.MinP) || r.MinP < 0 || r.MinP > 1 {
			return nil, inputErrorf("min_p is %g; use a number in [0, 1]", r.MinP)
		}
		total += r.N
	}
	groups := make([]*genGroup, len(reqs))
	streams := make([]*GenStream, len(reqs))
	for i, r := range reqs {
		st := &GenStream{Version: version, Snapshot: snap, ctx: ctx, eng: e, n: r.N, left: r.N, notify: make(chan struct{}, 1), done: make(chan struct{}), started: make(chan struct{})}
		seed := rand.Uint64()
		if r.Params.Seed != nil {
			seed = uint64(*r.Params.Seed)
		}
		groups[i], streams[i] = &genGroup{req: r, stream: st, seed: seed, wseq: wseq}, st
	}
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return nil, ErrEngineClosed
	case e.nWait+total > e.opts.MaxWaiting:
		e.mu.Unlock()
		return nil, ErrQueueFull
	}
	e.waiting = append(e.waiting, groups...)
	e.nWait += total
	e.waitN.Store(int64(e.nWait))
	e.mu.Unlock()
	// A request whose context ends leaves at once, even while paused.
	for _, st := range streams {
		st.mu.Lock()
		if st.left > 0 {
			st.stopWatch = context.AfterFunc(ctx, st.Close)
		}
		st.mu.Unlock()
	}
	e.signal()
	return streams, nil
}

// fail ends the group's unfinished sequences because the engine failed
// while running them; the stream's Err says why.
func (g *genGroup) fail(err error) {
	g.stream.mu.Lock()
	if g.stream.err == nil {
		g.stream.err = err
	}
	g.stream.mu.Unlock()
	g.abort()
}

func (g *genGroup) abort() {
	var ev []GenEvent
	finished := 0
	if g.seqs == nil {
		for i := range g.req.N {
			ev = append(ev, GenEvent{Seq: i, Finish: "abort"})
		}
		finished = g.req.N
	} else {
		for _, s := range g.seqs {
			if !s.done {
				s.done = true
				ev = append(ev, GenEvent{Seq: s.idx, Finish: "abort"})
				finished++
			}
		}
	}
	g.stream.push(ev, finished)
}

func (e *Engine) loop() {
	defer close(e.done)
	var running []*genSeq
	spaces := make([]*stepSpace, e.opts.Workers)
	for {
		// Wait for work, sweep cancelled requests, admit waiting ones.
		var admit []*genGroup
		e.mu.Lock()
		for {
			if e.closed {
				waiting := e.waiting
				e.waiting, e.nWait = nil, 0
				e.mu.Unlock()
				for _, g := range waiting {
					g.abort()
				}
				e.abortRunning(running)
				e.running.Store(0)
				e.waitN.Store(0)
				return
			}
			select {
			case fn := <-e.control:
				e.mu.Unlock()
				running = fn(running)
				e.running.Store(int64(len(running)))
				e.mu.Lock()
				continue
			default:
			}
			if e.sweep {
				e.sweep = false
				e.waiting = slices.DeleteFunc(e.waiting, func(g *genGroup) bool {
					if g.stream.cancelled() {
						e.nWait -= g.req.N
						g.abort()
						return true
					}
					return false
				})
				e.waitN.Store(int64(e.nWait))
				running = dropCancelled(running)
				e.running.Store(int64(len(running)))
			}
			if !e.paused && (len(running) > 0 || len(e.waiting) > 0) {
				break
			}
			e.mu.Unlock()
			select {
			case <-e.wake:
			case fn := <-e.control:
				running = fn(running)
				e.running.Store(int64(len(running)))
			}
			e.mu.Lock()
		}
		slots := e.opts.MaxNumSeqs - len(running)
		for len(e.waiting) > 0 && e.waiting[0].req.N <= slots {
			g := e.waiting[0]
			e.waiting = e.waiting[1:]
			e.nWait -= g.req.N
			slots -= g.req.N
			if g.stream.cancelled() {
				g.abort()
				continue
			}
			g.stream.markStarted()
			admit = append(admit, g)
		}
		e.waitN.Store(int64(e.nWait))
		e.mu.Unlock()

		running = dropCancelled(running)
		if err := guard(func() { running = append(running, e.prefill(admit)...) }); err != nil {
			// Only the requests being admitted were involved.
			for _, g := range admit {
				g.fail(err)
			}
		}
		e.running.Store(int64(len(running)))
		if len(running) == 0 {
			continue
		}
		if err := guard(func() { running = e.step(running, spaces) }); err != nil {
			// The step's batch is in an unknown state: fail its requests,
			// start the next step afresh.
			failRunning(running, err)
			running = nil
			clear(spaces)
		}
		e.running.Store(int64(len(running)))
	}
}

// testHookStep, set by tests, runs in each step worker before sampling.
var testHookStep func(part []*genSeq)

// ErrEngineFailed wraps a panic in the engine loop: the requests it was
// running fail with it, the engine goes on serving the others.
var ErrEngineFailed = errors.New("the engine failed while running this request")

// guard runs fn and turns a panic (in fn or re-raised from its workers)
// into an error.
func guard(fn func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrEngineFailed, p)
		}
	}()
	fn()
	return nil
}

// workerPanic carries a worker goroutine's panic to the loop goroutine,
// where guard can recover it (a panic in another goroutine cannot be).
type workerPanic struct {
	mu sync.Mutex
	p  any
}

func (w *workerPanic) catch() {
	if p := recover(); p != nil {
		w.mu.Lock()
		if w.p == nil {
			w.p = p
		}
		w.mu.Unlock()
	}
}

func (w *workerPanic) rethrow() {
	if w.p != nil {
		panic(w.p)
	}
}

func failRunning(running []*genSeq, err error) {
	groups := map[*genGroup]bool{}
	for _, s := range running {
		groups[s.g] = true
	}
	for g := range groups {
		g.fail(err)
	}
}

func (e *Engine) abortRunning(running []*genSeq) {
	groups := map[*genGroup]bool{}
	for _, s := range running {
		groups[s.g] = true
	}
	for g := range groups {
		g.abort()
	}
}

// dropCancelled ends the sequences of cancelled requests.
func dropCancelled(running []*genSeq) []*genSeq {
	var gone map[*genGroup]bool
	for _, s := range running {
		if s.g.stream.cancelled() {
			if gone == nil {
				gone = map[*genGroup]bool{}
			}
			gone[s.g] = true
		}
	}
	if gone == nil {
		return running
	}
	for g := range gone {
		g.abort()
	}
	return slices.DeleteFunc(running, func(s *genSeq) bool { return gone[s.g] })
}

// prefill runs the admitted prompts, split over the workers, and returns
// their sequences ready to sample their first token.
func (e *Engine) prefill(groups []*genGroup) []*genSeq {
	if len(groups) == 0 {
		return nil
	}
	e.parallel(len(groups), func(i int) {
		g := groups[i]
		w := g.stream.Snapshot.w
		r := &g.req
		kv, logits, all := prefill(w, r.Prompt, r.PromptLogprobs >= 0)
		if all != nil {
			g.stream.mu.Lock()
			g.stream.promptL = promptLogprobs(all, r.Prompt, r.PromptLogprobs)
			g.stream.mu.Unlock()
		}
		maxTokens := w.cfg.Context - len(r.Prompt)
		if r.Params.MaxTokens > 0 {
			maxTokens = min(maxTokens, r.Params.MaxTokens)
		}
		g.seqs = make([]*genSeq, r.N)
		for j := range r.N {
			s := &genSeq{g: g, idx: j, w: w, logits: logits, maxTokens: maxTokens,
				rng: rand.New(rand.NewPCG(g.seed, uint64(j)))}
			if j == 0 {
				s.kv = kv
			} else {
				s.kv = newKVCache(w.cfg)
				s.kv.copyFrom(kv, w.cfg.DModel)
				s.logits = slices.Clone(logits)
			}
			g.seqs[j] = s
		}
		e.stats.promptTokens.Add(int64(len(r.Prompt)))
	})
	var out []*genSeq
	for _, g := range groups {
		out = append(out, g.seqs...)
	}
	return out
}

// parallel runs fn(0..n-1) over the workers.
func (e *Engine) parallel(n int, fn func(i int)) {
	workers := min(e.opts.Workers, n)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var wp workerPanic
	defer wp.rethrow()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer wp.catch()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// step samples one token for every running sequence and runs the batched
// forward of those that go on, then delivers the tokens. Sequences are
// split into one contiguous chunk per worker; a chunk's forward is one
// matrix product per weight over all its rows.
func (e *Engine) step(running []*genSeq, spaces []*stepSpace) []*genSeq {
	// Keep sequences of the same weights together (stable: FIFO order).
	slices.SortStableFunc(running, func(a, b *genSeq) int {
		return a.g.wseq - b.g.wseq
	})
	workers := min(e.opts.Workers, len(running))
	chunk := (len(running) + workers - 1) / workers
	var wg sync.WaitGroup
	var wp workerPanic
	for wk := range workers {
		lo, hi := wk*chunk, min((wk+1)*chunk, len(running))
		if lo >= hi {
			continue
		}
		if spaces[wk] == nil || spaces[wk].rows < chunk || spaces[wk].cfg != running[lo].w.cfg {
			spaces[wk] = newStepSpace(running[lo].w.cfg, max(chunk, e.opts.MaxNumSeqs/e.opts.Workers+1))
		}
		wg.Add(1)
		go func(part []*genSeq, sp *stepSpace) {
			defer wg.Done()
			defer wp.catch()
			if testHookStep != nil {
				testHookStep(part)
			}
			scratch := make([]float64, TokenizerVocab)
			biased := make([]float32, TokenizerVocab)
			var caches []*kvCache
			var tokens []int
			var outs [][]float32
			var w *weights
			flush := func() {
				if len(tokens) > 0 {
					sp.forward(w, caches, tokens, outs)
				}
				caches, tokens, outs = caches[:0], tokens[:0], outs[:0]
			}
			for _, s := range part {
				s.sample(scratch, biased)
				if s.done {
					continue
				}
				if s.w != w {
					flush()
					w = s.w
				}
				caches, tokens, outs = append(caches, s.kv), append(tokens, s.last), append(outs, s.logits)
			}
			flush()
		}(running[lo:hi], spaces[wk])
	}
	wg.Wait()
	wp.rethrow()

	// Count forwards: one per weight version among the sequences that
	// went on (the per-worker chunks of one version are one batch).
	var batch int64
	versions := 0
	var prev *weights
	for _, s := range running {
		if !s.done {
			batch++
			if s.w != prev {
				versions++
				prev = s.w
			}
		}
	}
	e.stats.steps.Add(1)
	e.stats.forwards.Add(int64(versions))
	if batch > e.stats.maxBatch.Load() {
		e.stats.maxBatch.Store(batch)
	}
	e.stats.genTokens.Add(int64(len(running)))

	// Deliver, one push per request (a request's sequences are adjacent:
	// admitted together, kept in order).
	var group *genGroup
	var evs []GenEvent
	finished := 0
	flush := func() {
		if group != nil {
			group.stream.push(evs, finished)
		}
		evs, finished = nil, 0
	}
	for _, s := range running {
		if s.g != group {
			flush()
			group = s.g
		}
		evs = append(evs, s.ev)
		if s.done {
			finished++
		}
	}
	flush()
	return slices.DeleteFunc(running, func(s *genSeq) bool { return s.done })
}

// sample draws the next token from s.logits and decides whether the
// sequence ends; the event is left in s.ev.
func (s *genSeq) sample(scratch []float64, biased []float32) {
	r := &s.g.req
	logits := s.logits
	lse := logSumExp(logits)
	shaped := logits
	blockStops := r.MinTokens > 0 && s.n < r.MinTokens
	if len(r.LogitBias) > 0 || blockStops || (r.MinP > 0 && r.Params.Temperature > 0) || len(r.AllowedTokenIDs) > 0 {
		copy(biased, logits)
		if len(r.AllowedTokenIDs) > 0 {
			for i := range biased {
				biased[i] = float32(math.Inf(-1))
			}
			for _, id := range r.AllowedTokenIDs {
				biased[id] = logits[id]
			}
		}
		for id, b := range r.LogitBias {
			biased[id] += float32(b)
		}
		if blockStops {
			for _, id := range []int{TokenEOS, TokenImEnd} {
				biased[id] = float32(math.Inf(-1))
			}
			for _, id := range r.Params.StopTokenIDs {
				biased[id] = float32(math.Inf(-1))
			}
		}
		if r.MinP > 0 && r.Params.Temperature > 0 {
			m := slices.Max(biased)
			floor := m + float32(r.Params.Temperature*math.Log(r.MinP))
			for i, v := range biased {
				if v < floor {
					biased[i] = float32(math.Inf(-1))
				}
			}
		}
		shaped = biased
	}
	tok := choose(shaped, r.Params, s.rng, scratch)
	s.n++
	s.last = tok
	s.ev = GenEvent{Seq: s.idx, HasToken: true, Token: tok, Logprob: float64(logits[tok]) - lse}
	if r.TopLogprobs > 0 {
		s.ev.Top = topLogprobs(logits, lse, r.TopLogprobs)
	}
	end := func(reason, matched string) {
		s.done, s.ev.Finish, s.ev.MatchedStop = true, reason, matched
	}
	switch {
	case (tok == TokenEOS || tok == TokenImEnd) && !r.IgnoreEOS:
		end(backend.StopReasonStop, "")
		s.ev.StopToken = true
		return
	case slices.Contains(r.Params.StopTokenIDs, tok) && !blockStops:
		end(backend.StopReasonStop, strconv.Itoa(tok))
		s.ev.StopToken = true
		return
	}
	if tok < 256 {
		s.text = append(s.text, byte(tok))
		if !blockStops {
			for _, stop := range r.Params.Stop {
				if stop != "" && len(stop) <= len(s.text) && string(s.text[len(s.text)-len(stop):]) == stop {
					end(backend.StopReasonStop, stop)
					return
				}
			}
		}
	}
	if s.n >= s.maxTokens {
		end(backend.StopReasonLength, "")
	}
}

// topLogprobs lists the k most likely tokens (ties by id).
func topLogprobs(logits []float32, lse float64, k int) []TokenLogprob {
	k = min(k, len(logits))
	if k <= 0 {
		return nil // prompt_logprobs: 0 asks for the token's own only
	}
	top := make([]TokenLogprob, 0, k+1)
	for id, v := range logits {
		lp := float64(v) - lse
		if len(top) == k && lp <= top[k-1].Logprob {
			continue
		}
		i := len(top)
		if i == k {
			i--
			top = top[:i]
		}
		for i > 0 && top[i-1].Logprob < lp {
			i--
		}
		top = slices.Insert(top, i, TokenLogprob{Token: id, Logprob: lp})
	}
	for i := range top {
		top[i].Rank = i + 1
	}
	return top
}

// promptLogprobs turns the prefill's logits into vLLM's prompt_logprobs:
// nil for the first token, then the token's logprob and k alternatives.
func promptLogprobs(all []float32, prompt []int, k int) [][]TokenLogprob {
	out := make([][]TokenLogprob, len(prompt))
	V := TokenizerVocab
	for i := 1; i < len(prompt); i++ {
		row := all[(i-1)*V : i*V]
		lse := logSumExp(row)
		v := row[prompt[i]]
		rank := 1
		for _, x := range row {
			if x > v {
				rank++
			}
		}
		out[i] = append([]TokenLogprob{{Token: prompt[i], Logprob: float64(v) - lse, Rank: rank}}, topLogprobs(row, lse, k)...)
	}
	return out
}
