package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rllm-org/rllm-go/pkg/openaiwire"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// PublishMode is how an inference server takes a new policy version.
type PublishMode string

const (
	// PublishFullWeights reloads the whole model from a checkpoint
	// directory: SGLang's POST /update_weights_from_disk {model_path,
	// weight_version}, which `rllm serve` implements for the embedded
	// policy.
	PublishFullWeights PublishMode = "update_weights_from_disk"
	// PublishVLLMLoRA loads a PEFT adapter under a versioned name with
	// vLLM's POST /v1/load_lora_adapter {lora_name, lora_path} (runtime
	// LoRA updating enabled); requests then name it as their model.
	PublishVLLMLoRA PublishMode = "vllm_lora"
	// PublishSGLangLoRA is the same through SGLang's /load_lora_adapter.
	PublishSGLangLoRA PublishMode = "sglang_lora"
)

// PublisherOptions configure a WeightPublisher.
type PublisherOptions struct {
	// Endpoints are the servers' base URLs; each is normalised with
	// NormalizeEndpoint (the spelling the rollout client uses too).
	Endpoints []string
	Mode      PublishMode
	// APIKey, when set, is sent as a bearer token (never logged).
	APIKey string
	// Timeout bounds one update call on one endpoint (loading weights
	// takes a while); 0 means 10 minutes. A call that times out is tried
	// again (a slow server is not a dead one), Attempts times in all.
	Timeout time.Duration
	// Attempts is how many times an update that timed out or whose
	// connection dropped is sent to one endpoint; 0 means 3.
	Attempts int
	// Prefix starts every LoRA name: "<Prefix>-v<version>". The trainer
	// puts the run's name in it, so that runs sharing a server never
	// take each other's adapters; "" means "policy".
	Prefix string
	// Warn receives one line when an endpoint is dropped.
	Warn func(msg string)
	// OnDrop is called with the URL of each endpoint dropped, so the
	// rollout client stops sampling from its stale weights.
	OnDrop func(url string)
	// HTTP is the client; nil builds one that refuses redirects.
	HTTP *http.Client
}

// WeightPublisher makes every inference endpoint serve each new policy
// version before the next rollouts, as the trainer requires. It updates
// all endpoints at once. An endpoint that refuses an update stops the run
// with an error naming it (sampling from stale weights is never silent);
// one that times out is asked again (Attempts in all) and stops the run
// if it never answers; only one that refuses connections, or drops the
// connection without an answer on every try, is dropped, with a warning,
// while others remain.
type WeightPublisher struct {
	opts PublisherOptions
	mu   sync.Mutex
	live []string
	// loaded are the LoRA names loaded, oldest first, so old versions can
	// be unloaded.
	loaded []string
}

// NewWeightPublisher checks the options.
func NewWeightPublisher(o PublisherOptions) (*WeightPublisher, error) {
	if len(o.Endpoints) == 0 {
		return nil, usererr.Errorf("rollout.endpoints: training with rollout.engine=openai needs at least one inference server that takes weight updates")
	}
	switch o.Mode {
	case PublishFullWeights, PublishVLLMLoRA, PublishSGLangLoRA:
	default:
		return nil, fmt.Errorf("rollout: unknown publish mode %q", o.Mode)
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Attempts <= 0 {
		o.Attempts = 3
	}
	if o.Prefix == "" {
		o.Prefix = "policy"
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	p := &WeightPublisher{opts: o}
	for _, ep := range o.Endpoints {
		n, err := NormalizeEndpoint(ep)
		if err != nil {
			return nil, err
		}
		p.live = append(p.live, n)
	}
	return p, nil
}

// Live lists the endpoints still in use.
func (p *WeightPublisher) Live() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.live...)
}

// LoRANameWith is "<prefix>-v<version>".
func LoRANameWith(prefix string, version int) string {
	return prefix + "-v" + strconv.Itoa(version)
}

// LoRAPrefix makes a run's name fit for a LoRA name: letters, digits,
// '.', '_' and '-' kept, anything else '-'; "" gives "policy".
func LoRAPrefix(run string) string {
	b := []byte(run)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if s := strings.Trim(string(b), "-."); s != "" {
		return s
	}
	return "policy"
}

// routes of the publish mode: load and unload.
func (p *WeightPublisher) routes() (load, unload string) {
	switch p.opts.Mode {
	case PublishFullWeights:
		return "/update_weights_from_disk", ""
	case PublishSGLangLoRA:
		return "/load_lora_adapter", "/unload_lora_adapter"
	}
	return "/v1/load_lora_adapter", "/v1/unload_lora_adapter"
}

// Publish makes every live endpoint serve the weights at path (a
// checkpoint directory for full weights, a PEFT adapter directory for
// LoRA) as version, all endpoints at once. It returns the model name
// requests must use from now on ("" when it does not change).
//
// A LoRA name the server already holds (a resumed run, an earlier
// attempt that timed out, a run before this one on the same server) is
// unloaded and loaded again from path, since what it holds may be other
// weights. When some endpoints refuse the update, the adapter is unloaded
// from those that took it, so that a fixed server can be resumed from.
func (p *WeightPublisher) Publish(ctx context.Context, version int, path string) (string, error) {
	load, _ := p.routes()
	var body any
	model := ""
	if p.opts.Mode == PublishFullWeights {
		body = map[string]string{"model_path": path, "weight_version": strconv.Itoa(version)}
	} else {
		model = LoRANameWith(p.opts.Prefix, version)
		body = map[string]string{"lora_name": model, "lora_path": path}
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	live := p.Live()
	errs := make([]error, len(live))
	var wg sync.WaitGroup
	for i, ep := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.update(ctx, ep, load, payload, model)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	var refused, lastGone error
	var took []string
	for i, ep := range live {
		var gone *endpointGoneError
		switch err := errs[i]; {
		case err == nil:
			took = append(took, ep)
		case errors.As(err, &gone):
			lastGone = err
			p.drop(ep, err)
		case refused == nil:
			refused = err
		}
	}
	if refused != nil {
		if model != "" {
			p.unload(context.WithoutCancel(ctx), model, took)
		}
		return "", refused
	}
	if len(p.Live()) == 0 {
		return "", fmt.Errorf("no inference endpoint is left to sample from: %w", lastGone)
	}
	if model != "" {
		p.unloadOld(ctx, model)
	}
	return model, nil
}

// update sends one endpoint its update, again after a timeout or a
// dropped connection (up to Attempts in all), and after unloading a LoRA
// name the server says it already has.
func (p *WeightPublisher) update(ctx context.Context, ep, route string, payload []byte, model string) error {
	var err error
	reloaded := false
	for attempt := 1; attempt <= p.opts.Attempts; attempt++ {
		err = p.call(ctx, ep+route, payload, p.opts.Mode == PublishFullWeights)
		var slow *endpointSlowError
		var ref *refusedError
		switch {
		case err == nil || ctx.Err() != nil:
			return err
		case errors.As(err, &slow):
			if attempt == p.opts.Attempts && slow.dropped {
				// Every try ended with the connection dropped before an
				// answer: the server is going or gone, not slow.
				return &endpointGoneError{url: slow.url, err: slow.err}
			}
			if p.opts.Warn != nil && attempt < p.opts.Attempts {
				p.opts.Warn(fmt.Sprintf("%v; sending it again (%d of %d)", err, attempt+1, p.opts.Attempts))
			}
			continue
		case model != "" && !reloaded && errors.As(err, &ref) && alreadyLoaded(ref.msg):
			// vLLM: 400 "The lora adapter '…' has already been loaded."
			reloaded = true
			_, unload := p.routes()
			un, _ := json.Marshal(map[string]string{"lora_name": model})
			if uerr := p.call(ctx, ep+unload, un, false); uerr != nil {
				return fmt.Errorf("%w; unloading it to load it again failed: %v", err, uerr)
			}
			attempt--
			continue
		}
		return err
	}
	return err
}

// alreadyLoaded recognises a server's refusal of a LoRA name it holds
// (vLLM: "The lora adapter 'x' has already been loaded."; SGLang words it
// alike).
func alreadyLoaded(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "already") && (strings.Contains(m, "loaded") || strings.Contains(m, "exist"))
}

// unloadOld unloads LoRA versions older than the two newest (the newest
// serves new requests, the one before finishes requests in flight).
func (p *WeightPublisher) unloadOld(ctx context.Context, model string) {
	p.loaded = append(p.loaded, model)
	for len(p.loaded) > 2 {
		old := p.loaded[0]
		p.loaded = p.loaded[1:]
		p.unload(ctx, old, p.Live())
	}
}

// unload unloads a LoRA name from endpoints, all at once; a failure costs
// server memory, not correctness, so it is only reported through Warn.
func (p *WeightPublisher) unload(ctx context.Context, model string, endpoints []string) {
	_, route := p.routes()
	payload, _ := json.Marshal(map[string]string{"lora_name": model})
	var wg sync.WaitGroup
	for _, ep := range endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.call(ctx, ep+route, payload, false); err != nil && p.opts.Warn != nil {
				p.opts.Warn(fmt.Sprintf("unloading LoRA adapter %s from %s: %v", model, ep, err))
			}
		}()
	}
	wg.Wait()
}

func (p *WeightPublisher) drop(ep string, err error) {
	p.mu.Lock()
	for i, e := range p.live {
		if e == ep {
			p.live = append(p.live[:i], p.live[i+1:]...)
			break
		}
	}
	left := len(p.live)
	p.mu.Unlock()
	if p.opts.OnDrop != nil {
		p.opts.OnDrop(ep)
	}
	if p.opts.Warn != nil {
		p.opts.Warn(fmt.Sprintf("dropping inference endpoint %s: %v; %d left", ep, err, left))
	}
}

// endpointGoneError is an endpoint that could not be connected to.
type endpointGoneError struct {
	url string
	err error
}

func (e *endpointGoneError) Error() string { return fmt.Sprintf("%s is unreachable: %v", e.url, e.err) }
func (e *endpointGoneError) Unwrap() error { return e.err }

// endpointSlowError is an update that did not finish in time, or whose
// connection dropped after it was sent: the server may still be loading.
type endpointSlowError struct {
	url     string
	timeout time.Duration
	err     error
	// dropped: the connection closed without an answer (not a timeout).
	dropped bool
}

func (e *endpointSlowError) Error() string {
	return fmt.Sprintf("the weight update to %s did not finish (%v; each try may take %s)", e.url, e.err, e.timeout)
}
func (e *endpointSlowError) Unwrap() error { return e.err }

// refusedError is an answer that is not success.
type refusedError struct {
	url, status, msg string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("the inference server %s refused the weight update (%s): %s", e.url, e.status, e.msg)
}

// connectFailed reports an error that happened before a connection was
// made (refused, no route, unknown host): the server is not there.
func connectFailed(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED)
}

// call posts one update. A failure to connect means the endpoint is gone;
// a timeout or a connection dropped mid-call means it is slow; an answer
// that is not success is an update the endpoint refused.
func (p *WeightPublisher) call(ctx context.Context, url string, payload []byte, sglangBody bool) error {
	cctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if p.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.opts.APIKey)
	}
	resp, err := p.opts.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if connectFailed(err) {
			return &endpointGoneError{url: url, err: stripURL(err)}
		}
		var ne net.Error
		timedOut := cctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout())
		return &endpointSlowError{url: url, timeout: p.opts.Timeout, err: stripURL(err), dropped: !timedOut}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg, _ := openaiwire.ErrorMessage(body)
	if sglangBody {
		var r struct {
			Success *bool  `json:"success"`
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &r) == nil {
			if r.Message != "" {
				msg = r.Message
			}
			if r.Success != nil && !*r.Success {
				return &refusedError{url: url, status: resp.Status, msg: msg}
			}
		}
	}
	if resp.StatusCode/100 != 2 {
		if resp.StatusCode/100 == 3 {
			return fmt.Errorf("the inference server %s answered the weight update with a redirect (%s) to %s; point rollout.endpoints at the server itself", url, resp.Status, resp.Header.Get("Location"))
		}
		return &refusedError{url: url, status: resp.Status, msg: msg}
	}
	return nil
}
