// Package tinker is a backend.TrainingBackend that trains a LoRA adapter
// through a service speaking the Tinker API: hosted Tinker, or a
// self-hosted SkyRL or TuFT server. See docs/real-models.md.
//
// Opening a backend creates a session (kept alive by a heartbeat
// goroutine), checks get_server_capabilities for the base model, and
// creates the model. Training calls are queued: each is given the
// model's next seq_id when it is sent (in submission order) and keeps it
// on every retry, so the server runs them in order and de-duplicates
// repeats; the caller gets a *backend.Future at once and may queue more
// calls before waiting. Failures are retried within bounds: 408 and
// try_again poll again, 410 resubmits the same request, 429 honours
// Retry-After (capped), 5xx and dropped connections back off. A request
// that fails with category "user" is never retried.
package tinker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/chatsampler"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/tokenizer"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Kind is what every Tinker service can and cannot do: the API returns no
// per-token entropies, so the entropy bonus cannot run on it.
var Kind = backend.Kind{Entropy: false}

func init() { backend.Register("tinker", Open, Kind) }

// Options configure a Tinker backend.
type Options struct {
	ClientOptions
	// BaseModel is the model to train a LoRA adapter on.
	BaseModel string
	LoRA      wire.LoRAConfig
	// Heartbeat is the session heartbeat period; 0 means 10 s.
	Heartbeat time.Duration
	// Weights, when set, is a tinker://…/weights/… path loaded (without
	// optimizer state) right after the model is created.
	Weights string
	// MaxInFlight bounds the calls sent but not finished; 0 means 32.
	MaxInFlight int
	// SamplerTTL, when set, is the ttl_seconds of the sampler snapshots
	// PublishSampler saves (backend.tinker.sampler_ttl_s): the service
	// deletes each after that long. Checkpoints never expire. SkyRL drops
	// it (said at start).
	SamplerTTL time.Duration
	// GradClipNorm is the trainer's gradient clipping (actor.optim.
	// grad_clip), known here only to say at start that SkyRL ignores it.
	GradClipNorm float64
	// Tokenizer is the base model's own tokenizer and chat template
	// (rollout.tokenizer): ChatSampler renders chats with it and Codec is
	// it. It may be nil only for EmbeddedModel, whose byte tokenizer is
	// built in.
	Tokenizer *tokenizer.Tokenizer
	// TokenizerRef, when Tokenizer is nil, names it (rollout.tokenizer: a
	// directory or a Hugging Face id in the local cache, found through
	// Getenv); empty means the base model's id. Loaded after the
	// capabilities check.
	TokenizerRef string
	Getenv       func(string) string
	// Chat configures the chat samplers.
	Chat chatsampler.Options
}

// EmbeddedModel is the base model internal/faketinker serves (the
// embedded policy behind the Tinker API); its tokenizer and ChatML
// template are the embedded policy's.
const EmbeddedModel = "rllm/embedded-tiny"

// DefaultLosses are the built-in losses assumed when a server does not
// list supported_loss_fns (hosted Tinker and TuFT have them all).
var DefaultLosses = backend.BuiltinLosses()

// Backend trains one LoRA model on a Tinker service.
type Backend struct {
	c         *Client
	opts      Options
	service   Service
	sessionID string
	info      backend.ModelInfo
	supported map[string]bool

	// modelMu guards modelID and models: a load into a model that has
	// had requests replaces it by a fresh one.
	modelMu sync.Mutex
	modelID string
	models  int // create_model calls so far (model_seq_id)

	mu        sync.Mutex // guards closed, versions, published and sends on jobs
	closed    bool
	versions  int
	saves     int
	published map[string]bool
	brokenMu  sync.Mutex
	broken    error
	jobs      chan *job
	slots     chan struct{}
	workerWG  sync.WaitGroup
	waitWG    sync.WaitGroup

	// chunkMu keeps the chunks of one forward_backward together in the
	// queue.
	chunkMu sync.Mutex

	stopHeartbeat context.CancelFunc
	heartbeatDone chan struct{}
	// life ends when Close gives up waiting for the calls in flight:
	// sends that must not stop with their caller's context stop then.
	life    context.Context
	endLife context.CancelFunc
}

var _ backend.TrainingBackend = (*Backend)(nil)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("tinker backend is closed")

// Open builds the backend from backend.tinker.* (the registry's opener).
func Open(ctx context.Context, cfg *config.Config, o backend.OpenOptions) (backend.TrainingBackend, error) {
	tk := cfg.Backend.Tinker
	key, source, err := APIKey(tk, o.Getenv, o.ReadFile)
	if err != nil {
		return nil, err
	}
	if tk.MaxRetries < 0 || tk.RetryAfterCapS < 0 {
		return nil, usererr.Errorf("backend.tinker.max_retries and backend.tinker.retry_after_cap_s must be ≥ 0 (got %d and %g)", tk.MaxRetries, tk.RetryAfterCapS)
	}
	weights, what := o.Weights, "weights"
	if weights == "" {
		weights, what = tk.Weights, "backend.tinker.weights"
	}
	if weights != "" {
		if weights, err = ResolveWeights(what, weights); err != nil {
			return nil, err
		}
	}
	seed := int64(cfg.Trainer.Seed)
	opts := Options{
		ClientOptions: ClientOptions{
			BaseURL: tk.BaseURL, APIKey: key, KeySource: source, Log: o.Log,
			MaxRetries: tk.MaxRetries, RetryAfterCap: time.Duration(tk.RetryAfterCapS * float64(time.Second)),
			RequestTimeout: time.Duration(tk.RequestTimeoutS * float64(time.Second)),
		},
		BaseModel:    tk.BaseModel,
		LoRA:         wire.LoRAConfig{Rank: tk.LoRARank, Seed: &seed, TrainUnembed: tk.TrainUnembed, TrainMLP: tk.TrainMLP, TrainAttn: tk.TrainAttn},
		Heartbeat:    time.Duration(tk.HeartbeatS * float64(time.Second)),
		Weights:      weights,
		Chat:         chatsampler.Options{ParseToolCalls: true},
		GradClipNorm: cfg.Actor.Optim.GradClip,
	}
	opts.CredentialCmd = CredentialCmd(o.Getenv)
	if tk.SamplerTTLS != nil {
		opts.SamplerTTL = time.Duration(*tk.SamplerTTLS * float64(time.Second))
	}
	opts.TokenizerRef, opts.Getenv = cfg.Rollout.Tokenizer, o.Getenv
	b, err := New(ctx, opts)
	if err != nil {
		return nil, err // not a typed nil
	}
	return b, nil
}

// APIKey reads the key from the variable named by api_key_env or from
// api_key_file (getenv and readFile may be nil: no environment,
// os.ReadFile). It returns the key and a description of where it came
// from for error messages; the key itself never enters an error.
func APIKey(tk config.Tinker, getenv func(string) string, readFile func(string) ([]byte, error)) (key, source string, err error) {
	if tk.APIKeyFile != "" {
		read := readFile
		if read == nil {
			read = os.ReadFile
		}
		b, err := read(tk.APIKeyFile)
		if err != nil {
			return "", "", usererr.Errorf("backend.tinker.api_key_file: cannot read %s (%v); point it at a file holding the API key", tk.APIKeyFile, pathErr(err))
		}
		key = strings.TrimSpace(string(b))
		if key == "" {
			return "", "", usererr.Errorf("backend.tinker.api_key_file: %s is empty; put the API key in it", tk.APIKeyFile)
		}
		return key, "the file " + tk.APIKeyFile + " named by backend.tinker.api_key_file", nil
	}
	if getenv != nil {
		key = strings.TrimSpace(getenv(tk.APIKeyEnv))
	}
	if key == "" && CredentialCmd(getenv) != "" {
		// Hosted Tinker can sign in with the command's credential alone
		// (auth.go); no key is needed then.
		return "", "the command in " + CredentialCmdEnv, nil
	}
	if key == "" {
		return "", "", usererr.Errorf("backend.tinker.api_key_env: the environment variable %s is not set; export the API key in it (SkyRL accepts any value, e.g. tml-dummy), set backend.tinker.api_key_file, or set %s to a command printing a credential", tk.APIKeyEnv, CredentialCmdEnv)
	}
	return key, "the environment variable " + tk.APIKeyEnv + " named by backend.tinker.api_key_env", nil
}

// pathErr keeps the reason of a file error without repeating the path.
func pathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// New opens a session, checks the server's capabilities, creates the
// model and starts the heartbeat.
func New(ctx context.Context, opts Options) (*Backend, error) {
	c, err := NewClient(opts.ClientOptions)
	if err != nil {
		return nil, err
	}
	if opts.BaseModel == "" {
		return nil, usererr.Errorf("backend.tinker.base_model is empty; name the base model, e.g. Qwen/Qwen3-8B")
	}
	if opts.LoRA.Rank < 1 {
		return nil, usererr.Errorf("backend.tinker.lora_rank is %d; use a rank ≥ 1, e.g. 32", opts.LoRA.Rank)
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 10 * time.Second
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 32
	}
	b := &Backend{c: c, opts: opts, jobs: make(chan *job, 64), slots: make(chan struct{}, opts.MaxInFlight)}
	b.life, b.endLife = context.WithCancel(context.Background())
	if err := c.SignIn(ctx); err != nil {
		b.endLife()
		return nil, err
	}
	if err := b.checkCapabilities(ctx); err != nil {
		b.endLife()
		return nil, err
	}
	if err := b.loadTokenizer(); err != nil {
		b.endLife()
		return nil, err
	}
	if err := b.createSession(ctx); err != nil {
		b.endLife()
		return nil, err
	}
	hbCtx, stop := context.WithCancel(context.Background())
	b.stopHeartbeat, b.heartbeatDone = stop, make(chan struct{})
	go b.heartbeat(hbCtx)
	if err := b.createModel(ctx); err != nil {
		b.stopHeartbeat()
		<-b.heartbeatDone
		b.endLife()
		return nil, err
	}
	b.workerWG.Add(1)
	go b.worker()
	if opts.Weights != "" {
		if _, err := b.LoadState(ctx, opts.Weights, false).Result(ctx); err != nil {
			b.Close()
			return nil, fmt.Errorf("loading the starting weights %s: %w", opts.Weights, err)
		}
	}
	return b, nil
}

func (b *Backend) checkCapabilities(ctx context.Context) error {
	caps, err := b.c.Capabilities(ctx)
	if err != nil {
		return err
	}
	var offered []string
	found := false
	b.service = detectService(b.c.configFields, caps)
	for _, m := range caps.SupportedModels {
		offered = append(offered, m.ModelName)
		if m.ModelName == b.opts.BaseModel {
			found = true
			b.info.MaxContext = m.MaxContextLength
		}
	}
	if !found {
		list := strings.Join(offered, ", ")
		if list == "" {
			list = "no models"
		}
		return usererr.Errorf("backend.tinker.base_model: %s is not served by the Tinker service at %s, which offers %s; set backend.tinker.base_model to one of them or start the server with that model", b.opts.BaseModel, b.c.BaseURL(), list)
	}
	losses := caps.SupportedLossFns
	if losses == nil {
		losses = DefaultLosses
	}
	if line := b.service.ignored(b.opts); line != "" {
		b.c.logf("%s at %s: %s", b.service.Name, b.c.BaseURL(), line)
	}
	if b.info.MaxContext == 0 {
		b.c.logf("%s at %s does not say the context length of %s: datums and prompts are not checked against it here (the service refuses what does not fit), and a sample's max_tokens is rollout.max_tokens", b.service.Name, b.c.BaseURL(), b.opts.BaseModel)
	}
	b.supported = map[string]bool{}
	for _, l := range backend.BuiltinLosses() {
		for _, s := range losses {
			if s == l {
				b.supported[l] = true
				b.info.SupportedLosses = append(b.info.SupportedLosses, l)
			}
		}
	}
	b.info.Name = b.opts.BaseModel
	b.info.Entropy = false
	return nil
}

// loadTokenizer finds the base model's tokenizer and checks its chat
// template once, here, rather than at every swap.
func (b *Backend) loadTokenizer() error {
	o := &b.opts
	if o.Tokenizer == nil && (o.TokenizerRef != "" || o.BaseModel != EmbeddedModel) {
		ref := o.TokenizerRef
		if ref == "" {
			ref = o.BaseModel
		}
		tok, err := chatsampler.LoadTokenizer(ref, o.Getenv)
		if err != nil {
			return err
		}
		o.Tokenizer = tok
	}
	if o.Tokenizer == nil {
		return nil // EmbeddedModel: the built-in byte tokenizer
	}
	_, err := chatsampler.New(nil, o.Tokenizer, o.Chat)
	return err
}

func (b *Backend) createSession(ctx context.Context) error {
	body, _ := json.Marshal(wire.CreateSessionRequest{Tags: []string{"rllm"}, UserMetadata: map[string]string{}, SDKVersion: "rllm-go"})
	data, err := b.c.call(ctx, http.MethodPost, wire.PathCreateSession, body)
	if err != nil {
		return fmt.Errorf("creating a session on %s: %w", b.c.BaseURL(), err)
	}
	var s wire.CreateSessionResponse
	if err := json.Unmarshal(data, &s); err != nil || s.SessionID == "" {
		return fmt.Errorf("%s at %s: the answer has no session_id: %s", wire.PathCreateSession, b.c.BaseURL(), b.c.serverMessage(data))
	}
	if s.ErrorMessage != "" {
		return fmt.Errorf("the Tinker service at %s: %s", b.c.BaseURL(), b.c.redact(s.ErrorMessage))
	}
	if s.WarningMessage != "" {
		b.c.logf("warning from the service: %s", s.WarningMessage)
	}
	b.sessionID = s.SessionID
	return nil
}

// heartbeat tells the server every period that the session is alive
// (SkyRL unloads the models of sessions silent for 300 s).
func (b *Backend) heartbeat(ctx context.Context) {
	defer close(b.heartbeatDone)
	t := time.NewTicker(b.opts.Heartbeat)
	defer t.Stop()
	body, _ := json.Marshal(wire.SessionRequest{SessionID: b.sessionID})
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*b.opts.Heartbeat)
		_, err := b.c.once(cctx, http.MethodPost, wire.PathHeartbeat, body)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !failing:
			b.c.logf("session heartbeat failed (%v); the server may unload the model if this lasts", err)
			failing = true
		case err == nil && failing:
			b.c.logf("session heartbeat works again")
			failing = false
		}
	}
}

// createModel creates a model (the session's next model_seq_id) and
// makes it the one trained.
func (b *Backend) createModel(ctx context.Context) error {
	var lora any = b.opts.LoRA
	if b.service.SkyRL {
		lora = wire.SkyRLLoRAConfig{Rank: b.opts.LoRA.Rank, Seed: b.opts.LoRA.Seed}
	}
	b.modelMu.Lock()
	seq := b.models
	b.models++
	b.modelMu.Unlock()
	body, _ := json.Marshal(wire.CreateModelRequest{Type: "create_model", SessionID: b.sessionID, ModelSeqID: seq, BaseModel: b.opts.BaseModel, LoRAConfig: lora})
	data, err := b.c.invoke(ctx, wire.PathCreateModel, body)
	if err != nil {
		return fmt.Errorf("creating a LoRA model on %s: %w", b.opts.BaseModel, err)
	}
	var m wire.ModelIDResult
	if err := json.Unmarshal(data, &m); err != nil || m.ModelID == "" {
		return fmt.Errorf("%s: the result has no model_id: %s", wire.PathCreateModel, b.c.serverMessage(data))
	}
	b.modelMu.Lock()
	b.modelID = m.ModelID
	b.modelMu.Unlock()
	b.c.logf("model %s created on %s (LoRA rank %d)", m.ModelID, b.opts.BaseModel, b.opts.LoRA.Rank)
	return nil
}

// freshModel replaces the model, which has had requests, by a new one
// for load_weights, which both SkyRL and hosted Tinker take only as a
// model's first request (SkyRL api.py load_weights at a9564572; the SDK's
// LoadWeightsRequest "a load right after create_model"). It waits for
// every call in flight, then unloads the old model (its checkpoints stay).
func (b *Backend) freshModel(ctx context.Context) error {
	b.waitWG.Wait()
	old := b.ModelID()
	if err := b.createModel(ctx); err != nil {
		return err
	}
	uctx, cancel := context.WithTimeout(ctx, b.c.opts.RequestTimeout)
	defer cancel()
	body, _ := json.Marshal(wire.ModelRequest{Type: wire.PathUnloadModel, ModelID: old})
	if _, err := b.c.once(uctx, http.MethodPost, wire.PathUnloadModel, body); err != nil {
		b.c.logf("unloading the replaced model %s: %v", old, err)
	}
	return nil
}

// Info describes the model: its name is the base model; the vocabulary
// size is not reported by the API (0); MaxContext is the server's
// max_context_length (0 when it does not say).
func (b *Backend) Info() backend.ModelInfo {
	info := b.info
	info.SupportedLosses = append([]string(nil), b.info.SupportedLosses...)
	return info
}

// ChatSampler samples from snap through sampler.Sampler with the base
// model's own tokenizer and chat template (the embedded policy's for
// EmbeddedModel): exact token ids and logprobs kept.
func (b *Backend) ChatSampler(snap backend.TokenSampler) sampler.Sampler {
	if b.opts.Tokenizer == nil {
		return local.NewChatSampler(snap)
	}
	cs, err := chatsampler.New(snap, b.opts.Tokenizer, b.opts.Chat)
	if err != nil {
		// New checked the template at Open; this cannot happen.
		panic(err)
	}
	return cs
}

// Codec is the base model's tokenizer.
func (b *Backend) Codec() backend.Codec {
	if b.opts.Tokenizer == nil {
		return local.Tokenizer{}
	}
	c := chatsampler.NewCodec(b.opts.Tokenizer)
	if b.opts.Chat.StopTokenIDs != nil {
		c.Stops = b.opts.Chat.StopTokenIDs
	}
	return c
}

// ModelID is the server's id of the model being trained (a load replaces
// it by a fresh model).
func (b *Backend) ModelID() string {
	b.modelMu.Lock()
	defer b.modelMu.Unlock()
	return b.modelID
}

// Service is which implementation of the API the backend talks to.
func (b *Backend) Service() Service { return b.service }

// SessionID is the server's id of the session.
func (b *Backend) SessionID() string { return b.sessionID }

// Client is the HTTP client (for archive downloads and the like).
func (b *Backend) Client() *Client { return b.c }

// job is one queued training call. body builds the request for the model
// and seq_id it is given when sent; finish receives the result.
type job struct {
	ctx    context.Context
	path   string
	body   func(model string, seq int) [][]byte
	finish func(json.RawMessage, error)
	// load marks load_weights, which must be a model's first request.
	load bool
	// saved, for a save, is the checkpoint's kind and name: a resend
	// refused as "already exists" is done once the checkpoint is listed.
	saved [2]string
}

// enqueue queues a training call behind every earlier one.
func enqueue[T any](b *Backend, ctx context.Context, path string, body func(model string, seq int) [][]byte, decode func(json.RawMessage) (T, error), tweak ...func(*job)) *backend.Future[T] {
	f, resolve := backend.NewFuture[T]()
	var zero T
	j := &job{ctx: ctx, path: path, body: body, finish: func(raw json.RawMessage, err error) {
		if err != nil {
			resolve(zero, err)
			return
		}
		resolve(decode(raw))
	}}
	for _, t := range tweak {
		t(j)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		resolve(zero, ErrClosed)
		return f
	}
	// A full queue blocks the caller: back-pressure for a trainer racing
	// ahead of the service (until the caller gives up).
	select {
	case b.jobs <- j:
	case <-ctx.Done():
		resolve(zero, ctx.Err())
	}
	return f
}

// worker sends the queued calls one by one, in order, giving each the
// next seq_id, and hands each sent call to a goroutine that waits for
// its result, so later calls are sent while earlier ones run.
func (b *Backend) worker() {
	defer b.workerWG.Done()
	seq := 1
	for j := range b.jobs {
		if err := j.ctx.Err(); err != nil {
			j.finish(nil, err)
			continue
		}
		b.brokenMu.Lock()
		broken := b.broken
		b.brokenMu.Unlock()
		if broken != nil {
			j.finish(nil, broken)
			continue
		}
		select {
		case b.slots <- struct{}{}:
		case <-j.ctx.Done():
			j.finish(nil, j.ctx.Err())
			continue
		}
		// Sending is not cancelled with the caller's context: once a
		// seq_id is out, the server must receive it or the model's
		// queue would have a gap. It is bounded all the same: each
		// attempt by request_timeout_s, the attempts by max_retries, and
		// the whole by Close.
		sendCtx, stop := b.lifeOf(j.ctx)
		if j.load && seq > 1 {
			if err := b.freshModel(sendCtx); err != nil {
				stop()
				<-b.slots
				j.finish(nil, fmt.Errorf("a load needs a fresh model: %w", err))
				continue
			}
			seq = 1
		}
		model := b.ModelID()
		s, err := b.c.submit(sendCtx, j.path, j.body(model, seq)...)
		var lost *LostError
		if err != nil && j.load && loadNotFirst(err) {
			// The model took a request rllm did not count (a lost attempt
			// of this load, which SkyRL does not de-duplicate): load again
			// into a fresh model.
			if err = b.freshModel(sendCtx); err == nil {
				seq = 1
				model = b.ModelID()
				s, err = b.c.submit(sendCtx, j.path, j.body(model, seq)...)
			}
		}
		if err != nil && j.saved[1] != "" && errors.As(err, &lost) && alreadyExists(err) {
			// A resend of a save whose first attempt took (SkyRL does not
			// de-duplicate saves by seq_id): done once it is listed.
			raw, ferr := b.findCheckpoint(sendCtx, model, j.saved[0], j.saved[1])
			stop()
			<-b.slots
			seq++
			j.finish(raw, ferr)
			continue
		}
		stop()
		if err != nil && j.saved[1] != "" && alreadyExists(err) {
			// SkyRL refuses a save over an existing name at once, before
			// queueing it (api.py create_checkpoint): nothing was taken.
			<-b.slots
			j.finish(nil, usererr.Errorf("checkpoint %s already exists for model %s on the Tinker service at %s; save under another name", j.saved[1], model, b.c.BaseURL()))
			continue
		}
		if err != nil {
			<-b.slots
			if rejected(err) {
				// The server refused the request outright: the seq_id was
				// not taken and the next call reuses it.
				j.finish(nil, noRoute(b.c, j.path, err))
				continue
			}
			// Whether the server holds this seq_id is unknown: no later
			// call can be ordered safely.
			b.brokenMu.Lock()
			b.broken = fmt.Errorf("an earlier %s (seq_id %d) could not be delivered to %s, so later calls cannot be ordered; restart from the last checkpoint: %w", j.path, seq, b.c.BaseURL(), err)
			b.brokenMu.Unlock()
			j.finish(nil, err)
			continue
		}
		usedSeq := seq
		seq++
		b.waitWG.Add(1)
		go func() {
			defer b.waitWG.Done()
			defer func() { <-b.slots }()
			waitCtx, cancel := context.WithCancel(j.ctx)
			defer cancel()
			defer context.AfterFunc(b.life, cancel)()
			raw, err := b.c.await(waitCtx, j.path, s.RequestID, func() (string, error) {
				// 410: the same body, hence the same seq_id; the server
				// de-duplicates it.
				sendCtx, stop := b.lifeOf(j.ctx)
				defer stop()
				r, err := b.c.submit(sendCtx, j.path, j.body(model, usedSeq)...)
				return r.RequestID, err
			})
			j.finish(raw, err)
		}()
	}
}

// noRoute explains a forward the service has no route for: the SDK 0.25
// sends forward-only passes as protobuf forward_backward with
// forward_only (resources/training.py), which rllm does not speak; JSON
// forward_backward ignores forward_only and would train.
func noRoute(c *Client, path string, err error) error {
	var he *HTTPError
	if path != wire.PathForward || !errors.As(err, &he) || he.Status != http.StatusNotFound || he.Msg != "Not Found" {
		return err
	}
	return usererr.Errorf("the Tinker service at %s has no JSON %s route, which rllm's forward passes (the logprobs of the policy before an update, client-side losses) use; SkyRL serves it, and hosted Tinker served it to SDKs before 0.25, whose forward-only passes are protobuf forward_backward: this service cannot train with rllm", c.BaseURL(), wire.APIPrefix+wire.PathForward)
}

// lifeOf is ctx's values without its cancellation, ended instead with
// the backend's life (Close).
func (b *Backend) lifeOf(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(b.life, cancel)
	return c, func() { stop(); cancel() }
}

// rejected reports a submit the server refused as a whole (a 4xx other
// than 408, 409 and 429): the request was not queued, and its seq_id
// goes to the next call. After an attempt whose answer was lost (a
// *LostError), even a refusal does not say the first attempt was not
// taken, so the seq_id is never handed to another request: the backend
// stops ordering calls instead (as the Tinker SDK, which never reuses a
// seq_id).
func rejected(err error) bool {
	var lost *LostError
	if errors.As(err, &lost) {
		return false
	}
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status/100 == 4 && he.Status != http.StatusConflict && !he.retryable()
	}
	var ue *usererr.Error
	if errors.As(err, &ue) {
		return errors.As(ue.Err, &he) || errors.Is(err, ErrUnauthorized)
	}
	return false
}

func (b *Backend) checkLoss(loss backend.Loss) error {
	if err := loss.Validate(); err != nil {
		return usererr.Wrap(err)
	}
	if !b.supported[loss.Name] {
		return usererr.Errorf("loss %s is not a built-in of the Tinker service at %s (it has %s); compute it client side with forward and cross_entropy weights", loss.Name, b.c.BaseURL(), strings.Join(b.info.SupportedLosses, ", "))
	}
	return nil
}

// ForwardBackward sends the datums with the loss by name and accumulates
// the gradient on the server.
func (b *Backend) ForwardBackward(ctx context.Context, data []backend.Datum, loss backend.Loss) *backend.Future[backend.ForwardBackwardOutput] {
	return b.forward(ctx, wire.PathForwardBackward, data, loss)
}

// Forward computes logprobs and losses without a gradient.
func (b *Backend) Forward(ctx context.Context, data []backend.Datum, loss backend.Loss) *backend.Future[backend.ForwardBackwardOutput] {
	return b.forward(ctx, wire.PathForward, data, loss)
}

func (b *Backend) forward(ctx context.Context, path string, data []backend.Datum, loss backend.Loss) *backend.Future[backend.ForwardBackwardOutput] {
	if err := b.checkLoss(loss); err != nil {
		return backend.Resolved(backend.ForwardBackwardOutput{}, err)
	}
	if err := validateDatums(data, loss, b.info.MaxContext, b.info.VocabSize); err != nil {
		return backend.Resolved(backend.ForwardBackwardOutput{}, err)
	}
	// As the Tinker SDK does, a large batch goes as several requests of
	// at most maxChunkDatums datums and maxChunkNumbers numbers, queued
	// back to back: the server adds their gradients up before the next
	// optim_step, so the update is the same as one request's.
	chunks := chunkDatums(data, loss)
	futures := make([]*backend.Future[backend.ForwardBackwardOutput], len(chunks))
	b.chunkMu.Lock() // the chunks of one call take consecutive seq_ids
	for i, c := range chunks {
		part := data[c[0]:c[1]]
		// Encoded now, in the caller's goroutine, so the worker only
		// sends. As with every backend, the datums must not change until
		// the future resolves (the elementwise loss may be computed from
		// them).
		head, tail := encodeTrainingBody(path, part, loss)
		futures[i] = enqueue(b, ctx, path, spliceSeq(head, tail), func(raw json.RawMessage) (backend.ForwardBackwardOutput, error) {
			var res wire.ForwardBackwardResult
			if err := json.Unmarshal(raw, &res); err != nil {
				return backend.ForwardBackwardOutput{}, fmt.Errorf("%s: the result is not {loss_fn_outputs, metrics}: %v", path, err)
			}
			return decodeOutputs(path, res, part, loss)
		})
	}
	b.chunkMu.Unlock()
	if len(futures) == 1 {
		return futures[0]
	}
	f, resolve := backend.NewFuture[backend.ForwardBackwardOutput]()
	go func() {
		outs := make([]backend.ForwardBackwardOutput, len(futures))
		for i, fu := range futures {
			o, err := fu.Result(context.WithoutCancel(ctx))
			if err != nil {
				resolve(backend.ForwardBackwardOutput{}, err)
				return
			}
			outs[i] = o
		}
		resolve(combineOutputs(outs), nil)
	}()
	return f
}

// The Tinker SDK's limits on one forward_backward request
// (training_client's chunking): at most this many datums, and at most
// this many numbers (input tokens plus every loss_fn_inputs value).
const (
	maxChunkDatums  = 128
	maxChunkNumbers = 500_000
)

// chunkDatums splits data into [start, end) ranges within the limits; a
// datum larger than maxChunkNumbers on its own goes alone.
func chunkDatums(data []backend.Datum, loss backend.Loss) [][2]int {
	var out [][2]int
	start, numbers := 0, 0
	for i := range data {
		n := datumNumbers(&data[i], loss)
		if i > start && (i-start == maxChunkDatums || numbers+n > maxChunkNumbers) {
			out = append(out, [2]int{start, i})
			start, numbers = i, 0
		}
		numbers += n
	}
	return append(out, [2]int{start, len(data)})
}

// datumNumbers counts what a datum puts on the wire: its input tokens and
// one value per target for each loss input the loss sends.
func datumNumbers(d *backend.Datum, loss backend.Loss) int {
	n := len(d.Input)
	keys := 1 // target_tokens
	switch loss.Name {
	case backend.LossCrossEntropy:
		keys++ // weights
	default:
		keys += 2 // logprobs, advantages
	}
	return n + keys*len(d.LossFnInputs.TargetTokens)
}

// combineOutputs joins the results of one call's chunks: the outputs in
// order; metrics named "…:sum" added, "…:max" and "…:min" the largest
// and smallest, any other the mean weighted by the chunks' datums (the
// Tinker SDK's reduction by suffix).
func combineOutputs(outs []backend.ForwardBackwardOutput) backend.ForwardBackwardOutput {
	res := backend.ForwardBackwardOutput{Metrics: map[string]float64{}}
	total := 0
	for _, o := range outs {
		total += len(o.LossFnOutputs)
	}
	for _, o := range outs {
		w := float64(len(o.LossFnOutputs)) / float64(max(total, 1))
		res.LossFnOutputs = append(res.LossFnOutputs, o.LossFnOutputs...)
		for k, v := range o.Metrics {
			cur, ok := res.Metrics[k]
			switch {
			case strings.HasSuffix(k, ":sum"):
				res.Metrics[k] = cur + v
			case strings.HasSuffix(k, ":max"):
				if !ok || v > cur {
					res.Metrics[k] = v
				}
			case strings.HasSuffix(k, ":min"):
				if !ok || v < cur {
					res.Metrics[k] = v
				}
			default:
				res.Metrics[k] = cur + w*v
			}
		}
	}
	return res
}

// spliceSeq completes a body encodeTrainingBody began with the model id
// and seq_id it is sent with.
func spliceSeq(head, tail []byte) func(string, int) [][]byte {
	return func(model string, seq int) [][]byte {
		mid := strconv.AppendQuote(nil, model)
		mid = append(mid, `,"seq_id":`...)
		return [][]byte{head, strconv.AppendInt(mid, int64(seq), 10), tail}
	}
}

func jsonBody(v func(model string, seq int) any) func(string, int) [][]byte {
	return func(model string, seq int) [][]byte {
		b, err := json.Marshal(v(model, seq))
		if err != nil {
			panic(err) // our own structs always marshal
		}
		return [][]byte{b}
	}
}

// OptimStep applies Adam with the given parameters on the server.
func (b *Backend) OptimStep(ctx context.Context, p backend.AdamParams) *backend.Future[backend.OptimStepOutput] {
	if err := p.Validate(); err != nil {
		return backend.Resolved(backend.OptimStepOutput{}, usererr.Wrap(err))
	}
	// SkyRL's AdamParams has no grad_clip_norm (said at start).
	adam := wire.NewAdamParams(p, !b.service.SkyRL)
	return enqueue(b, ctx, wire.PathOptimStep, jsonBody(func(model string, seq int) any {
		return wire.OptimStepRequest{Type: wire.PathOptimStep, ModelID: model, SeqID: seq, AdamParams: adam}
	}), func(raw json.RawMessage) (backend.OptimStepOutput, error) {
		var r wire.OptimStepResult
		if err := json.Unmarshal(raw, &r); err != nil {
			return backend.OptimStepOutput{}, fmt.Errorf("%s: the result is not {metrics}: %v", wire.PathOptimStep, err)
		}
		if r.Metrics == nil {
			r.Metrics = map[string]float64{}
		}
		r.Metrics["learning_rate"] = p.LearningRate
		return backend.OptimStepOutput{Metrics: r.Metrics}, nil
	})
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

func checkName(what, name string) error {
	if !nameRE.MatchString(name) || len(name) > 128 {
		return usererr.Errorf("%s name %q is not valid on the Tinker service; use letters, digits, _ and - only (e.g. global_step_10)", what, name)
	}
	return nil
}

func decodePath(path string) func(json.RawMessage) (string, error) {
	return func(raw json.RawMessage) (string, error) {
		var r wire.PathResult
		if err := json.Unmarshal(raw, &r); err != nil || !strings.HasPrefix(r.Path, "tinker://") {
			return "", fmt.Errorf("%s: the result has no tinker:// path: %s", path, strings.TrimSpace(string(raw)))
		}
		return r.Path, nil
	}
}

// SaveState saves weights and optimizer state under name (letters,
// digits, _ and -) and returns their tinker://…/weights/name path.
//
// A target that is a local directory (the trainer's global_step_N/model)
// saves under a fresh unique name, also saves the weights for sampling
// (what `rllm export` downloads), and records both tinker:// paths in
// target/tinker.json; the returned path is the training checkpoint's.
func (b *Backend) SaveState(ctx context.Context, name string) *backend.Future[string] {
	if strings.ContainsAny(name, `/\`) {
		return b.saveToDir(ctx, name)
	}
	if err := checkName("checkpoint", name); err != nil {
		return backend.Resolved("", err)
	}
	return enqueue(b, ctx, wire.PathSaveWeights, jsonBody(func(model string, seq int) any {
		return wire.SaveWeightsRequest{Type: wire.PathSaveWeights, ModelID: model, SeqID: seq, Path: name}
	}), decodePath(wire.PathSaveWeights), saving("weights", name))
}

// saving marks a save job with its checkpoint (see job.saved).
func saving(kind, name string) func(*job) {
	return func(j *job) { j.saved = [2]string{kind, name} }
}

// saveToDir is SaveState for a local directory: save_weights and
// save_weights_for_sampler under one fresh name (queued back to back),
// then dir/tinker.json.
func (b *Backend) saveToDir(ctx context.Context, dir string) *backend.Future[string] {
	b.mu.Lock()
	b.saves++
	// Unique across processes too: a resumed run saves into the same model's
	// namespace, where an existing name is refused.
	name := fmt.Sprintf("rllm-%s-%d", strconv.FormatInt(time.Now().UnixNano(), 36), b.saves)
	b.mu.Unlock()
	weights := enqueue(b, ctx, wire.PathSaveWeights, jsonBody(func(model string, seq int) any {
		return wire.SaveWeightsRequest{Type: wire.PathSaveWeights, ModelID: model, SeqID: seq, Path: name}
	}), decodePath(wire.PathSaveWeights), saving("weights", name))
	sampler := enqueue(b, ctx, wire.PathSaveForSampler, jsonBody(func(model string, seq int) any {
		return wire.SaveWeightsRequest{Type: wire.PathSaveForSampler, ModelID: model, SeqID: seq, Path: name}
	}), decodePath(wire.PathSaveForSampler), saving("sampler_weights", name))
	_, statErr := os.Stat(filepath.Dir(dir))
	parentExisted := statErr == nil
	f, resolve := backend.NewFuture[string]()
	go func() {
		wp, err := weights.Result(context.WithoutCancel(ctx))
		if err != nil {
			resolve("", err)
			return
		}
		sp, err := sampler.Result(context.WithoutCancel(ctx))
		if err != nil {
			resolve("", err)
			return
		}
		// When dir's parent existed at the call, only dir itself is made:
		// if the caller gave up and removed the checkpoint's temporary
		// directory meanwhile, nothing is written into an abandoned place.
		mkdir := os.MkdirAll
		if parentExisted {
			mkdir = os.Mkdir
		}
		if err := mkdir(dir, atomicfile.DirMode); err != nil && !errors.Is(err, os.ErrExist) {
			resolve("", fmt.Errorf("the checkpoint directory is gone (the save was abandoned): %w", err))
			return
		}
		err = WriteCheckpoint(dir, Checkpoint{WeightsPath: wp, SamplerPath: sp, BaseModel: b.opts.BaseModel, BaseURL: b.c.BaseURL()})
		resolve(wp, err)
	}()
	return f
}

// LoadState loads a tinker://…/weights/… path that SaveState returned,
// with the optimizer state when withOptimizer is set. The services take a
// load only as a model's first request: after any other, the load goes
// into a freshly created model, which replaces the one trained (its
// checkpoints stay on the service).
func (b *Backend) LoadState(ctx context.Context, path string, withOptimizer bool) *backend.Future[struct{}] {
	if !strings.HasPrefix(path, "tinker://") || !strings.Contains(path, "/weights/") {
		return backend.Resolved(struct{}{}, usererr.Errorf("%q is not a Tinker training checkpoint; give the tinker://…/weights/NAME path save_weights returned (recorded in the run directory's tinker.json)", path))
	}
	return enqueue(b, ctx, wire.PathLoadWeights, jsonBody(func(model string, seq int) any {
		return wire.LoadWeightsRequest{Type: wire.PathLoadWeights, ModelID: model, SeqID: seq, Path: path, Optimizer: withOptimizer}
	}), func(json.RawMessage) (struct{}, error) { return struct{}{}, nil }, func(j *job) { j.load = true })
}

// PublishSampler saves the weights for sampling (save_weights_for_sampler)
// and returns a sampler on them. An empty name becomes "rllm-v<N>"; a name
// published before becomes "<name>-v<N>" (N counts this backend's
// publishes), since sampler weights on the server never change.
func (b *Backend) PublishSampler(ctx context.Context, name string) *backend.Future[backend.TokenSampler] {
	if name != "" {
		if err := checkName("sampler snapshot", name); err != nil {
			return backend.Resolved[backend.TokenSampler](nil, err)
		}
	}
	b.mu.Lock()
	b.versions++
	version := b.versions
	switch {
	case name == "":
		name = fmt.Sprintf("rllm-v%d", version)
	case b.published[name]:
		// Sampler weights are immutable on the server: a name published
		// before gets the version to stay unique.
		name = fmt.Sprintf("%s-v%d", name, version)
	}
	if b.published == nil {
		b.published = map[string]bool{}
	}
	b.published[name] = true
	b.mu.Unlock()
	decode := decodePath(wire.PathSaveForSampler)
	var ttl *int
	if b.opts.SamplerTTL > 0 && !b.service.SkyRL {
		// A snapshot serves the episodes of one step: the service deletes
		// it after sampler_ttl_s rather than keeping every step's forever.
		n := int(max(b.opts.SamplerTTL.Round(time.Second), time.Second) / time.Second)
		ttl = &n
	}
	return enqueue(b, ctx, wire.PathSaveForSampler, jsonBody(func(model string, seq int) any {
		return wire.SaveWeightsRequest{Type: wire.PathSaveForSampler, ModelID: model, SeqID: seq, Path: name, TTLSeconds: ttl}
	}), func(raw json.RawMessage) (backend.TokenSampler, error) {
		path, err := decode(raw)
		if err != nil {
			return nil, err
		}
		return &Sampler{c: b.c, path: path, name: name, version: version, maxContext: b.info.MaxContext}, nil
	}, saving("sampler_weights", name))
}

// Close waits for the queued calls, stops the heartbeat and unloads the
// model (best effort: the saved weights stay on the server).
func (b *Backend) Close() error {
	b.mu.Lock()
	already := b.closed
	if !b.closed {
		b.closed = true
		close(b.jobs)
	}
	b.mu.Unlock()
	if already {
		return nil
	}
	// The calls queued and in flight get one request_timeout_s to finish;
	// then every send and wait stops.
	done := make(chan struct{})
	go func() { b.workerWG.Wait(); b.waitWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(b.c.opts.RequestTimeout):
		b.c.logf("%d calls still unfinished after %s; stopping them", len(b.slots), b.c.opts.RequestTimeout)
		b.endLife()
		<-done
	}
	defer b.endLife()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	model := b.ModelID()
	body, _ := json.Marshal(wire.ModelRequest{Type: wire.PathUnloadModel, ModelID: model})
	if _, err := b.c.once(ctx, http.MethodPost, wire.PathUnloadModel, body); err != nil {
		b.c.logf("unloading model %s: %v", model, err)
	}
	b.stopHeartbeat()
	<-b.heartbeatDone
	return nil
}
