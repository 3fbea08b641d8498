//go:build linux

package sandbox

import (
	"context"
	"os"
	"path/filepath"
)

// host runs each request directly on the host in a fresh temporary
// directory with the same rlimits, process-group kill and environment as
// the sandbox, but with none of its isolation: the program sees the
// host's files and network. It exists for machines where no sandbox can
// run and only when sandbox.backend=unsafe-host names it.
type host struct {
	prlimit string
	env     []string
}

func newHost(c Config) (Backend, error) {
	prlimit, err := lookPath("prlimit")
	if err != nil {
		return nil, errUnavailable(BackendUnsafeHost, "prlimit (Debian package util-linux) is not installed")
	}
	announceCgroups()
	env := c.environ()
	for i, kv := range env {
		if len(kv) > 5 && kv[:5] == "HOME=" {
			env[i] = "HOME=."
		}
	}
	return &host{prlimit: prlimit, env: env}, nil
}

func (h *host) Name() string { return BackendUnsafeHost }

func (h *host) Close() error { return nil }

func (h *host) Run(ctx context.Context, req Request) (Result, error) {
	l, err := req.start()
	if err != nil {
		return Result{}, err
	}
	dir, err := os.MkdirTemp("", "rllm-unsafe-host-*")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	for _, name := range req.sortedFiles() {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return Result{}, err
		}
		if err := os.WriteFile(p, req.Files[name], 0o644); err != nil {
			return Result{}, err
		}
	}
	argv := append(prlimitArgs(h.prlimit, l), req.Command...)
	res, st, err := runProcess(ctx, procRun{argv: argv, dir: dir, env: h.env, stdin: req.Stdin, stream: req.Stream, limits: l})
	if err != nil {
		return res, err
	}
	Classify(&res, cpuTime(st), l)
	return res, nil
}
