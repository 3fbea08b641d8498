package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/runs"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// policy is the model a command samples from, whichever side of a wire
// it is on.
type policy struct {
	sampler sampler.Sampler
	// kind is "openai" or "local"; model names the served model or the
	// published snapshot; where says where it runs (endpoints, weights).
	kind, model, where string
	// client is set for an OpenAI-compatible server (for its counters).
	client *rollout.Client
	close  func()
}

// usesServer reports whether the config samples from OpenAI-compatible
// servers rather than the embedded policy.
func usesServer(c *config.Config) bool {
	return c.Rollout.Engine != "auto" || len(c.Rollout.Endpoints) > 0
}

// openPolicy connects to the configured servers (checking that each one
// is up and serves rollout.model) or loads the embedded policy.
func openPolicy(ctx context.Context, a *App, c *config.Config, textOnly bool) (*policy, error) {
	if usesServer(c) {
		return openServerPolicy(ctx, a, c, textOnly)
	}
	if textOnly {
		return nil, usagef("--text-only applies to OpenAI-compatible servers (rollout.engine=openai); the %s backend's sampler always returns token ids", c.Backend.Name)
	}
	weights, err := resolveWeights(a, c, "")
	if err != nil {
		return nil, err
	}
	c.Backend.Local.Weights = weights
	be, err := backend.Open(ctx, c, backend.OpenOptions{Getenv: a.Getenv, ReadFile: a.ReadFile})
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
	return &policy{sampler: be.ChatSampler(ts), kind: c.Backend.Name, model: be.Info().Name, where: where,
		close: func() { be.Close() }}, nil
}

func openServerPolicy(ctx context.Context, a *App, c *config.Config, textOnly bool) (*policy, error) {
	r := c.Rollout
	key, err := readAPIKey(a, r.APIKeyEnv, r.APIKeyFile)
	if err != nil {
		return nil, err
	}
	client, err := rollout.NewClient(rollout.Options{
		Endpoints:      r.Endpoints,
		Model:          r.Model,
		APIKey:         key,
		RequestTimeout: seconds(r.RequestTimeoutS),
		Retry: rollout.RetryPolicy{
			MaxAttempts: r.Retry.MaxAttempts,
			BaseBackoff: seconds(r.Retry.BackoffBaseS),
			MaxBackoff:  seconds(r.Retry.BackoffMaxS),
		},
		TextOnly:         textOnly,
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
	// Requests are fitted to each server's context; say once where the
	// configured lengths do not fit, or where the context is unknown.
	budget := rollout.ContextBudget{MaxPrompt: c.Data.MaxPromptLength, MaxResponse: c.EffectiveMaxTokens(),
		PromptKey: "data.max_prompt_length", ResponseKey: "data.max_response_length"}
	if r.MaxTokens != nil {
		budget.ResponseKey = "rollout.max_tokens"
	}
	for _, note := range rollout.ContextNotes(client.Contexts(), budget) {
		a.warnf("%s", note)
	}
	return &policy{sampler: client, kind: "openai", model: r.Model, where: strings.Join(r.Endpoints, ", "),
		client: client, close: client.Close}, nil
}

// readAPIKey resolves a key named by an environment variable or a file.
// The key itself never appears in a message.
func readAPIKey(a *App, envName, file string) (string, error) {
	switch {
	case envName != "":
		key := ""
		if a.Getenv != nil {
			key = strings.TrimSpace(a.Getenv(envName))
		}
		if key == "" {
			return "", usagef("rollout.api_key_env names %s, but that variable is empty or unset; export it or unset rollout.api_key_env", envName)
		}
		return key, nil
	case file != "":
		read := a.ReadFile
		if read == nil {
			read = func(name string) ([]byte, error) { return boundedio.ReadFile(a.context(), name, 64<<10) }
		}
		data, err := read(file)
		if err != nil {
			return "", usagef("cannot read rollout.api_key_file %s: %v; fix the path or its permissions", file, err)
		}
		key := strings.TrimSpace(string(data))
		if key == "" {
			return "", usagef("rollout.api_key_file %s is empty; put the API key in it", file)
		}
		if strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return "", usagef("rollout.api_key_file %s holds more than one line or a space or control character inside the key; keep only the key on one line", file)
		}
		return key, nil
	}
	return "", nil
}

// resolveWeights turns the weights a user named — the --weights flag, or
// backend.local.weights when the flag is empty — into the model directory
// to load: a run directory gives its newest checkpoint, a global_step_N
// directory its model. "" means a fresh model.
func resolveWeights(a *App, c *config.Config, flag string) (string, error) {
	what, path := "--weights", flag
	if path == "" {
		what, path = "backend.local.weights", c.Backend.Local.Weights
	}
	if path == "" {
		return "", nil
	}
	model, err := runs.ResolveWeights(what, path)
	if err != nil {
		return "", err
	}
	if filepath.Clean(model) != filepath.Clean(path) {
		a.infof("%s %s: loading %s", what, path, runs.Describe(path, model))
	}
	return model, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// describe is one line naming the policy for progress output.
func (p *policy) describe() string {
	return fmt.Sprintf("%s (%s: %s)", p.model, p.kind, p.where)
}
