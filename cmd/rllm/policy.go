package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/trainer"
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
	return c.Rollout.Engine == "openai" || len(c.Rollout.Endpoints) > 0
}

// openPolicy connects to the configured servers (checking that each one
// is up and serves rollout.model) or loads the embedded policy.
func openPolicy(ctx context.Context, a *App, c *config.Config, textOnly bool) (*policy, error) {
	if usesServer(c) {
		return openServerPolicy(ctx, a, c, textOnly)
	}
	if c.Backend.Name != "local" {
		return nil, usagef("backend.name=%s has no sampler of its own here; sample from a server instead: rollout.engine=openai rollout.endpoints=[URL] rollout.model=NAME", c.Backend.Name)
	}
	if textOnly {
		return nil, usagef("--text-only applies to OpenAI-compatible servers (rollout.engine=openai); the embedded policy always returns token ids")
	}
	be, err := trainer.OpenLocal(ctx, c, "")
	if err != nil {
		return nil, err
	}
	ts, err := be.PublishSampler(ctx, "").Result(ctx)
	if err != nil {
		be.Close()
		return nil, err
	}
	where := "a fresh model sized by backend.local"
	if c.Backend.Local.Weights != "" {
		where = c.Backend.Local.Weights
	}
	return &policy{sampler: local.NewChatSampler(ts), kind: "local", model: ts.Name(), where: where,
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

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// describe is one line naming the policy for progress output.
func (p *policy) describe() string {
	return fmt.Sprintf("%s (%s: %s)", p.model, p.kind, p.where)
}
