package trainer

import (
	"context"
	"fmt"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/config"
)

// OpenLocal builds the embedded policy the configuration describes: the
// checkpoint at weights (or backend.local.weights when weights is empty),
// else a fresh model sized by backend.local.* and seeded by trainer.seed.
func OpenLocal(ctx context.Context, c *config.Config, weights string) (*local.Backend, error) {
	if weights == "" {
		weights = c.Backend.Local.Weights
	}
	opts := local.Options{Workers: c.Backend.Local.Threads}
	if weights != "" {
		b, err := local.Open(ctx, weights, opts)
		if err != nil {
			return nil, fmt.Errorf("loading weights %s: %w", weights, err)
		}
		return b, nil
	}
	l := c.Backend.Local
	opts.Config = local.DefaultConfig()
	opts.Config.Layers, opts.Config.DModel, opts.Config.Heads, opts.Config.Context = l.Layers, l.DModel, l.Heads, l.Context
	opts.Config.DFF = 4 * l.DModel
	opts.Config.Seed = int64(c.Trainer.Seed)
	return local.New(opts)
}

// configError is a setting the trainer cannot honour: exit code 2.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }
func (e *configError) ExitCode() int { return 2 }

func configErrorf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}
