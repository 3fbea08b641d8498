package main

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/policy"
	"github.com/rllm-org/rllm-go/pkg/runs"
)

// openPolicy opens the model a command samples from (pkg/policy): for
// servers it reads the API key the config names, for the embedded policy
// it resolves backend.local.weights to a model directory; then it
// connects (checking that each server is up and serves rollout.model)
// or loads.
func openPolicy(ctx context.Context, a *App, c *config.Config, textOnly bool) (*policy.Policy, error) {
	o := policyOptions(a, textOnly)
	if policy.UsesServer(c) {
		key, err := readAPIKey(a, c.Rollout.APIKeyEnv, c.Rollout.APIKeyFile)
		if err != nil {
			return nil, err
		}
		o.APIKey = key
	} else if !textOnly { // --text-only locally is refused by policy.Open
		weights, err := resolveWeights(a, c, "")
		if err != nil {
			return nil, err
		}
		c.Backend.Local.Weights = weights
	}
	return policy.Open(ctx, c, o)
}

// policyOptions are the App's ways to the outside for pkg/policy.
func policyOptions(a *App, textOnly bool) policy.Options {
	return policy.Options{TextOnly: textOnly, Getenv: a.Getenv, ReadFile: a.ReadFile,
		Warn: func(note string) { a.warnf("%s", note) }}
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
