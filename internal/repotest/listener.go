package repotest

import (
	"net"
	"sync/atomic"
	"testing"
)

// HostListener listens on the host's 127.0.0.1, for tests that check a
// sandbox cannot reach the host's network: port is where it listens and
// reached reports whether anything connected. It closes when the test
// ends.
func HostListener(t testing.TB) (port int, reached func() bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var hit atomic.Bool
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hit.Store(true)
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, hit.Load
}
