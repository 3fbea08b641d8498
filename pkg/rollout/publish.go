package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

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
	Endpoints []string
	Mode      PublishMode
	// APIKey, when set, is sent as a bearer token (never logged).
	APIKey string
	// Timeout bounds one update call on one endpoint (loading weights
	// takes a while); 0 means 10 minutes.
	Timeout time.Duration
	// Warn receives one line when an endpoint is dropped.
	Warn func(msg string)
	// OnDrop is called with the URL of each endpoint dropped, so the
	// rollout client stops sampling from its stale weights.
	OnDrop func(url string)
	// HTTP is the client; nil builds one that refuses redirects.
	HTTP *http.Client
}

// WeightPublisher makes every inference endpoint serve each new policy
// version before the next rollouts, as the trainer requires: an endpoint
// that refuses an update stops the run with an error naming it (sampling
// from stale weights is never silent), one that cannot be reached any
// more is dropped with a warning while others remain.
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
	if o.HTTP == nil {
		o.HTTP = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	p := &WeightPublisher{opts: o}
	for _, ep := range o.Endpoints {
		p.live = append(p.live, strings.TrimRight(ep, "/"))
	}
	return p, nil
}

// Live lists the endpoints still in use.
func (p *WeightPublisher) Live() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.live...)
}

// LoRAName is the model name requests use for a LoRA-published version.
func LoRAName(version int) string { return "policy-v" + strconv.Itoa(version) }

// Publish makes every live endpoint serve the weights at path (a
// checkpoint directory for full weights, a PEFT adapter directory for
// LoRA) as version. It returns the model name requests must use from now
// on ("" when it does not change).
func (p *WeightPublisher) Publish(ctx context.Context, version int, path string) (string, error) {
	var route string
	var body any
	model := ""
	switch p.opts.Mode {
	case PublishFullWeights:
		route, body = "/update_weights_from_disk", map[string]string{"model_path": path, "weight_version": strconv.Itoa(version)}
	case PublishVLLMLoRA:
		model = LoRAName(version)
		route, body = "/v1/load_lora_adapter", map[string]string{"lora_name": model, "lora_path": path}
	case PublishSGLangLoRA:
		model = LoRAName(version)
		route, body = "/load_lora_adapter", map[string]string{"lora_name": model, "lora_path": path}
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	var lastGone error
	for _, ep := range p.Live() {
		err := p.call(ctx, ep+route, payload, p.opts.Mode == PublishFullWeights)
		var gone *endpointGoneError
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return "", ctx.Err()
		case errors.As(err, &gone):
			lastGone = err
			p.drop(ep, err)
		default:
			return "", err
		}
	}
	if len(p.Live()) == 0 {
		return "", fmt.Errorf("no inference endpoint is left to sample from: %w", lastGone)
	}
	if model != "" {
		p.unloadOld(ctx, model)
	}
	return model, nil
}

// unloadOld unloads LoRA versions older than the two newest (the newest
// serves new requests, the one before finishes requests in flight); a
// failure to unload costs server memory, not correctness, so it is only
// reported through Warn.
func (p *WeightPublisher) unloadOld(ctx context.Context, model string) {
	p.loaded = append(p.loaded, model)
	for len(p.loaded) > 2 {
		old := p.loaded[0]
		p.loaded = p.loaded[1:]
		route := "/v1/unload_lora_adapter"
		if p.opts.Mode == PublishSGLangLoRA {
			route = "/unload_lora_adapter"
		}
		payload, _ := json.Marshal(map[string]string{"lora_name": old})
		for _, ep := range p.Live() {
			if err := p.call(ctx, ep+route, payload, false); err != nil && p.opts.Warn != nil {
				p.opts.Warn(fmt.Sprintf("unloading LoRA adapter %s from %s: %v", old, ep, err))
			}
		}
	}
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

// endpointGoneError is an endpoint that could not be reached at all.
type endpointGoneError struct {
	url string
	err error
}

func (e *endpointGoneError) Error() string { return fmt.Sprintf("%s is unreachable: %v", e.url, e.err) }
func (e *endpointGoneError) Unwrap() error { return e.err }

// call posts one update. A transport failure (refused, reset, timed out)
// means the endpoint is gone; an answer that is not success is an update
// the endpoint refused.
func (p *WeightPublisher) call(ctx context.Context, url string, payload []byte, sglangBody bool) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if p.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.opts.APIKey)
	}
	resp, err := p.opts.HTTP.Do(req)
	if err != nil {
		// Refused, reset or timed out: the server is not there any more.
		return &endpointGoneError{url: url, err: stripURL(err)}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := strings.TrimSpace(string(body))
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
				return fmt.Errorf("the inference server %s refused the weight update: %s", url, msg)
			}
		}
	}
	if resp.StatusCode/100 != 2 {
		if resp.StatusCode/100 == 3 {
			return fmt.Errorf("the inference server %s answered the weight update with a redirect (%s) to %s; point rollout.endpoints at the server itself", url, resp.Status, resp.Header.Get("Location"))
		}
		return fmt.Errorf("the inference server %s refused the weight update (%s): %s", url, resp.Status, msg)
	}
	return nil
}
