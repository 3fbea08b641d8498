package rollout

import (
	"context"
	"errors"
)

// CanPause reports whether the endpoints speak SGLang's generation
// pause API (/pause_generation, /continue_generation), which rllm serve
// implements: the full-weights and SGLang-LoRA modes. vLLM has none.
func (p *WeightPublisher) CanPause() bool {
	return p.opts.Mode == PublishFullWeights || p.opts.Mode == PublishSGLangLoRA
}

// Pause stops generation on every live endpoint before a weight update
// (SGLang's POST /pause_generation {"mode": "in_place"}: requests keep
// their state and resume on /continue_generation), so no request decodes
// across the update. An endpoint that cannot be reached is dropped, as
// Publish drops it.
func (p *WeightPublisher) Pause(ctx context.Context) error {
	return p.each(ctx, "/pause_generation", []byte(`{"mode":"in_place"}`))
}

// Continue resumes generation on every live endpoint after an update.
func (p *WeightPublisher) Continue(ctx context.Context) error {
	return p.each(ctx, "/continue_generation", []byte(`{}`))
}

func (p *WeightPublisher) each(ctx context.Context, route string, payload []byte) error {
	var errs []error
	for _, ep := range p.Live() {
		err := p.call(ctx, ep+route, payload, false)
		var gone *endpointGoneError
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &gone):
			p.drop(ep, err)
		default:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
