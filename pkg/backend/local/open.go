package local

import (
	"context"
	"fmt"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/config"
)

// Kind is what every embedded policy can do: it returns per-token
// entropies (Info().Entropy).
var Kind = backend.Kind{Entropy: true}

func init() { backend.Register("local", openBackend, Kind) }

func openBackend(ctx context.Context, c *config.Config, o backend.OpenOptions) (backend.TrainingBackend, error) {
	b, err := OpenConfig(ctx, c, o.Weights)
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return b, nil
}

// OpenConfig builds the embedded policy a configuration describes: the
// checkpoint at weights (or backend.local.weights when weights is empty),
// else a fresh model sized by backend.local.* and seeded by trainer.seed.
func OpenConfig(ctx context.Context, c *config.Config, weights string) (*Backend, error) {
	if weights == "" {
		weights = c.Backend.Local.Weights
	}
	opts := Options{Workers: c.Backend.Local.Threads}
	if weights != "" {
		b, err := Open(ctx, weights, opts)
		if err != nil {
			return nil, fmt.Errorf("loading weights %s: %w", weights, err)
		}
		return b, nil
	}
	l := c.Backend.Local
	opts.Config = DefaultConfig()
	opts.Config.Layers, opts.Config.DModel, opts.Config.Heads, opts.Config.Context = l.Layers, l.DModel, l.Heads, l.Context
	opts.Config.DFF = 4 * l.DModel
	opts.Config.Seed = int64(c.Trainer.Seed)
	return New(opts)
}
