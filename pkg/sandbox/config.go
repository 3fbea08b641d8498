package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/internal/childenv"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Config is the sandbox section of the config (sandbox.*).
type Config struct {
	// Backend is auto, bwrap, docker or unsafe-host. auto takes bwrap
	// when it is installed and works, else docker when a daemon
	// answers; it never takes unsafe-host.
	Backend string
	// BindRO lists host paths made visible read-only at the same place
	// (bwrap; docker mounts them read-only too). /usr always is.
	BindRO []string
	// Env is the whole environment of the sandboxed program, over
	// DefaultEnv. Nothing of rllm's own environment is passed.
	Env map[string]string
	// MaxConcurrent bounds the runs at once; 0 means runtime.NumCPU().
	MaxConcurrent int
	// Limits are every run's limits (a request may only tighten them).
	Limits Limits
	// DockerImage is the image the docker backend runs; empty is the
	// local base image (BaseImage).
	DockerImage string
	// DockerWarm is how many started containers the docker backend keeps
	// waiting per container shape (sandbox.docker.warm_pool); 0: none.
	DockerWarm int
}

// DefaultEnv is the environment every sandboxed program starts with;
// sandbox.env adds to it or replaces its values.
var DefaultEnv = map[string]string{
	"PATH":                    "/usr/local/bin:/usr/bin:/bin",
	"HOME":                    WorkDir,
	"LANG":                    "C.UTF-8",
	"PYTHONDONTWRITEBYTECODE": "1",
	"PYTHONUNBUFFERED":        "1",
	"OMP_NUM_THREADS":         "1",
}

// environ is the sandbox's environment as sorted KEY=value pairs.
func (c Config) environ() []string {
	return childenv.List(DefaultEnv, c.Env)
}

// Check validates c without probing any backend.
func (c Config) Check() error {
	if c.Backend != "" && !slices.Contains(Backends, c.Backend) {
		return &usererr.Error{Subject: "sandbox.backend", Msg: fmt.Sprintf("%q is not a sandbox backend; use one of: %s", c.Backend, strings.Join(Backends, ", "))}
	}
	if c.MaxConcurrent < 0 {
		return &usererr.Error{Subject: "sandbox.max_concurrent", Msg: fmt.Sprintf("is %d; use a positive number (0: one per core)", c.MaxConcurrent)}
	}
	if err := c.Limits.Check(); err != nil {
		return &usererr.Error{Subject: "sandbox.limits", Msg: err.Error()}
	}
	for _, p := range c.BindRO {
		if !strings.HasPrefix(p, "/") || strings.Contains(p, "..") {
			return &usererr.Error{Subject: "sandbox.bind_ro", Msg: fmt.Sprintf("%q must be an absolute host path without ..", p)}
		}
		if p == "/" || p == WorkDir || strings.HasPrefix(p, "/proc") || strings.HasPrefix(p, "/dev") {
			return &usererr.Error{Subject: "sandbox.bind_ro", Msg: fmt.Sprintf("%q cannot be bound into the sandbox; name a narrower directory", p)}
		}
	}
	for k := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return &usererr.Error{Subject: "sandbox.env", Msg: fmt.Sprintf("%q is not an environment variable name", k)}
		}
	}
	return nil
}

// Open builds the configured backend behind a pool. A backend that is
// not available here is a user error naming sandbox.backend and what to
// install.
func Open(ctx context.Context, c Config) (*Pool, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Limits == (Limits{}) {
		c.Limits = DefaultLimits
	}
	b, err := openBackend(ctx, c)
	if err != nil {
		return nil, err
	}
	n := c.MaxConcurrent
	if n <= 0 {
		n = runtime.NumCPU()
	}
	return NewPool(b, n, c.Limits), nil
}

// errUnavailable says how to get a sandbox.
func errUnavailable(backend, why string) error {
	fix := "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or set sandbox.backend=docker with a Docker daemon running"
	if backend == BackendDocker {
		fix = "start a Docker daemon (DOCKER_HOST names where it listens), or set sandbox.backend=bwrap and install bubblewrap (apt-get install bubblewrap)"
	}
	return &usererr.Error{Subject: "sandbox.backend", Msg: fmt.Sprintf("%s: %s", backend, why), Fix: fix}
}

func openBackend(ctx context.Context, c Config) (Backend, error) {
	switch c.Backend {
	case BackendBwrap:
		return newBwrap(ctx, c)
	case BackendDocker:
		return newDocker(ctx, c)
	case BackendUnsafeHost:
		return newHost(c)
	}
	// auto
	b, berr := newBwrap(ctx, c)
	if berr == nil {
		return b, nil
	}
	d, derr := newDocker(ctx, c)
	if derr == nil {
		return d, nil
	}
	var ue *usererr.Error
	if errors.As(derr, &ue) && ue.Subject == dockerImageKey {
		// A daemon answers: what is missing is the image, and that is
		// the fix to name.
		return nil, &usererr.Error{Subject: dockerImageKey, Msg: fmt.Sprintf("sandbox.backend auto: bwrap is not usable (%s), and %s", message(berr), ue.Msg), Fix: ue.Fix}
	}
	return nil, errUnavailable("auto", "no sandbox is available ("+message(berr)+"; "+message(derr)+") and code from a model never runs on the host unsandboxed")
}

// lookPath finds a host program.
var lookPath = exec.LookPath

// The process-wide sandbox: the code env and the python tool share one
// pool, so sandbox.max_concurrent bounds every run of the process.
var shared struct {
	mu   sync.Mutex
	cfg  Config
	set  bool
	pool *Pool
	err  error
}

// Configure sets the configuration Shared opens. The workflow spec calls
// it when it reads the config; a changed configuration closes the pool
// opened for the previous one once its runs end.
func Configure(c Config) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.set && equalConfig(shared.cfg, c) {
		return
	}
	if shared.pool != nil {
		p := shared.pool
		go func() { p.Close() }()
	}
	shared.cfg, shared.set, shared.pool, shared.err = c, true, nil, nil
}

func equalConfig(a, b Config) bool {
	return a.Backend == b.Backend && slices.Equal(a.BindRO, b.BindRO) && fmt.Sprint(a.Env) == fmt.Sprint(b.Env) &&
		a.MaxConcurrent == b.MaxConcurrent && a.Limits == b.Limits && a.DockerImage == b.DockerImage && a.DockerWarm == b.DockerWarm
}

// Shared returns the process-wide pool, opening it on first use (with
// the defaults when Configure was never called). A backend that is not
// available is reported every time, without probing again.
func Shared(ctx context.Context) (*Pool, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.pool != nil || shared.err != nil {
		return shared.pool, shared.err
	}
	c := shared.cfg
	if !shared.set {
		c = Config{Backend: BackendAuto, Limits: DefaultLimits}
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	shared.pool, shared.err = Open(pctx, c)
	return shared.pool, shared.err
}

// message is an error's text without the key it names.
func message(err error) string {
	var ue *usererr.Error
	if errors.As(err, &ue) {
		return ue.Msg
	}
	return err.Error()
}
