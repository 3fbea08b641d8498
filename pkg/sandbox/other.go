//go:build !linux

package sandbox

import (
	"context"
	"runtime"
)

func newBwrap(context.Context, Config) (Backend, error) {
	return nil, errUnavailable(BackendBwrap, "bubblewrap runs on Linux only, not "+runtime.GOOS)
}

func newHost(Config) (Backend, error) {
	return nil, errUnavailable(BackendUnsafeHost, "the unsafe-host backend sets Linux rlimits and runs on Linux only, not "+runtime.GOOS)
}
