// Package policy opens the model a command samples from, whichever side of
// a wire it is on: OpenAI-compatible servers (rollout.engine=openai or any
// rollout.endpoints), checked before anything runs, or the configured
// backend's own sampler (the embedded policy by default). rllm eval, rllm
// gateway and rllm train (on servers) open it the same way.
//
// The caller resolves what comes from outside the configuration — the API
// key, the weights directory a run directory names — and passes it in:
// this package reads no environment variable.
package policy

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Policy is an open sampler and what names it.
type Policy struct {
	Sampler sampler.Sampler
	// Kind is "openai" or the backend's name ("local", "tinker"); Model
	// names the served model or the published snapshot; Where says where
	// it runs (endpoints, weights).
	Kind, Model, Where string
	// Client is set for OpenAI-compatible servers (for its counters).
	Client *rollout.Client
	close  func()
}

// Close releases the client or the backend.
func (p *Policy) Close() {
	if p != nil && p.close != nil {
		p.close()
	}
}

// Describe is one line naming the policy for progress output.
func (p *Policy) Describe() string {
	return fmt.Sprintf("%s (%s: %s)", p.Model, p.Kind, p.Where)
}

// Options are what the caller resolved outside the configuration.
type Options struct {
	// TextOnly accepts server replies without token ids (plain OpenAI
	// APIs); it is refused for a backend, whose sampler always returns
	// them.
	TextOnly bool
	// APIKey authenticates to the servers (rollout.api_key_env or
	// rollout.api_key_file, read by the caller); "" sends none.
	APIKey string
	// Getenv and ReadFile are handed to the backend (its own keys).
	Getenv   func(string) string
	ReadFile func(string) ([]byte, error)
	// Warn receives the notes worth a line on stderr (a server context
	// the configured lengths do not fit); nil drops them.
	Warn func(string)
}

// UsesServer reports whether the config samples from OpenAI-compatible
// servers rather than the configured backend.
func UsesServer(c *config.Config) bool {
	return c.Rollout.Engine != "auto" || len(c.Rollout.Endpoints) > 0
}

// Open connects to the configured servers (OpenServer) or opens the
// configured backend and publishes its current weights for sampling.
// c.Backend.Local.Weights is the model directory to load ("" for a fresh
// model), already resolved from a run directory by the caller.
func Open(ctx context.Context, c *config.Config, o Options) (*Policy, error) {
	if UsesServer(c) {
		return OpenServer(ctx, c, o)
	}
	if o.TextOnly {
		return nil, usererr.Errorf("--text-only applies to OpenAI-compatible servers (rollout.engine=openai); the %s backend's sampler always returns token ids", c.Backend.Name)
	}
	be, err := backend.Open(ctx, c, backend.OpenOptions{Getenv: o.Getenv, ReadFile: o.ReadFile})
	if err != nil {
		return nil, err
	}
	ts, err := be.PublishSampler(ctx, "").Result(ctx)
	if err != nil {
		be.Close()
		return nil, err
	}
	where := be.Info().Name
	if c.Backend.Name == "local" {
		where = "a fresh model sized by backend.local"
		if c.Backend.Local.Weights != "" {
			where = c.Backend.Local.Weights
		}
	}
	// The model is named as rllm serve serves it (the backend's name, not
	// the snapshot's versioned one), so the name eval prints is the one
	// rollout.model takes against rllm serve.
	return &Policy{Sampler: be.ChatSampler(ts), Kind: c.Backend.Name, Model: be.Info().Name, Where: where,
		close: func() { be.Close() }}, nil
}

// OpenServer builds the client of rollout.endpoints and checks that each
// server is up and serves rollout.model; it warns once where the
// configured lengths do not fit a server's context, or where the context
// is unknown.
func OpenServer(ctx context.Context, c *config.Config, o Options) (*Policy, error) {
	r := c.Rollout
	client, err := rollout.NewClient(rollout.Options{
		Endpoints:      r.Endpoints,
		Model:          r.Model,
		APIKey:         o.APIKey,
		RequestTimeout: seconds(r.RequestTimeoutS),
		Retry: rollout.RetryPolicy{
			MaxAttempts: r.Retry.MaxAttempts,
			BaseBackoff: seconds(r.Retry.BackoffBaseS),
			MaxBackoff:  seconds(r.Retry.BackoffMaxS),
		},
		TextOnly:         o.TextOnly,
		MaxResponseBytes: int64(r.MaxResponseMB) << 20,
	})
	if err != nil {
		return nil, err
	}
	if err := client.Check(ctx); err != nil {
		client.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	// Requests are fitted to each server's context.
	budget := rollout.ContextBudget{MaxPrompt: c.Data.MaxPromptLength, MaxResponse: c.EffectiveMaxTokens(),
		PromptKey: "data.max_prompt_length", ResponseKey: "data.max_response_length"}
	if r.MaxTokens != nil {
		budget.ResponseKey = "rollout.max_tokens"
	}
	for _, note := range rollout.ContextNotes(client.Contexts(), budget) {
		if o.Warn != nil {
			o.Warn(note)
		}
	}
	return &Policy{Sampler: client, Kind: "openai", Model: r.Model, Where: strings.Join(r.Endpoints, ", "),
		Client: client, close: client.Close}, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
