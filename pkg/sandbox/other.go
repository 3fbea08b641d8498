//go:build !linux

package sandbox

import (
	"context"
	"fmt"
	"io"
	"runtime"
)

func newBwrap(context.Context, Config) (Backend, error) {
	return nil, errUnavailable(BackendBwrap, "bubblewrap runs on Linux only, not "+runtime.GOOS)
}

func newHost(Config) (Backend, error) {
	return nil, errUnavailable(BackendUnsafeHost, "the unsafe-host backend sets Linux rlimits and runs on Linux only, not "+runtime.GOOS)
}

// ForwardMain is the sandbox forwarder, which runs inside Linux sandboxes
// only.
func ForwardMain(_ []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "rllm sandbox forwarder: runs on Linux only, not "+runtime.GOOS)
	return 125
}

// NewBwrapOpener refuses: bubblewrap runs on Linux only.
func NewBwrapOpener(context.Context, Config) (Opener, error) {
	return nil, errUnavailable(BackendBwrap, "bubblewrap runs on Linux only, not "+runtime.GOOS)
}
