package backend

import (
	"context"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// OpenOptions are what opening a backend needs besides the configuration.
type OpenOptions struct {
	// Weights, when set, replaces the configured starting weights (a
	// checkpoint directory for local, a tinker:// path for tinker).
	Weights string
	// Getenv reads the environment (API keys named by the config); nil
	// means no environment.
	Getenv func(string) string
	// ReadFile reads files the config names (api_key_file); nil means
	// os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Opener builds the backend a configuration describes.
type Opener func(ctx context.Context, cfg *config.Config, opts OpenOptions) (TrainingBackend, error)

// Kind is what every backend registered under one name can and cannot
// do, known before one is opened, so that `rllm validate-config` and
// `train --dry-run` refuse what `train` would refuse only after
// connecting. What depends on the server (the losses it lists, the base
// models it serves, its context) is not here: Open checks it. (The
// backend's own keys, backend.<name>.*, are checked by pkg/config.)
type Kind struct {
	// Entropy is set when every model of this kind returns per-token
	// entropies (ModelInfo.Entropy) and takes EntropyWeights, which the
	// entropy bonus (actor.entropy_coeff) needs. The Tinker API never
	// returns them.
	Entropy bool
}

type registered struct {
	open Opener
	kind Kind
}

var (
	openersMu sync.RWMutex
	openers   = map[string]registered{}
)

// Register makes a backend available under backend.name, declaring what
// its kind can do; concrete backends call it from init, and a program
// picks the ones it links with blank imports. Registering a name twice
// panics (a programming error).
func Register(name string, open Opener, kind Kind) {
	openersMu.Lock()
	defer openersMu.Unlock()
	if _, dup := openers[name]; dup {
		panic("backend: " + name + " registered twice")
	}
	openers[name] = registered{open: open, kind: kind}
}

// KindOf is what the backend registered under name declared; ok is false
// when no backend has that name.
func KindOf(name string) (kind Kind, ok bool) {
	openersMu.RLock()
	defer openersMu.RUnlock()
	r, ok := openers[name]
	return r.kind, ok
}

// Names lists the registered backends, sorted.
func Names() []string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	return slices.Sorted(maps.Keys(openers))
}

// Open builds the backend named by cfg.Backend.Name.
func Open(ctx context.Context, cfg *config.Config, opts OpenOptions) (TrainingBackend, error) {
	openersMu.RLock()
	r, ok := openers[cfg.Backend.Name]
	openersMu.RUnlock()
	if !ok {
		return nil, usererr.Errorf("backend.name: %q is not a backend this program was built with; use one of %s", cfg.Backend.Name, strings.Join(Names(), ", "))
	}
	return r.open(ctx, cfg, opts)
}
