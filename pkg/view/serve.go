package view

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// DefaultPort is rLLM's `rllm view` port.
const DefaultPort = 7860

// IsLoopback reports whether host names this machine only.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Listen binds host:port for the viewer. A port in use is one line
// naming it.
func Listen(host string, port int) (net.Listener, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, usererr.Errorf("rllm view: port %d on %s is in use (another rllm view?); pick another with --port", port, host)
	}
	if err != nil {
		return nil, usererr.Errorf("rllm view: cannot listen on %s: %v", addr, err)
	}
	return ln, nil
}

// NewToken is a random token for a viewer bound beyond loopback.
func NewToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Serve serves s on ln until ctx ends, printing the URL to open to out
// (with the token when s has one).
func Serve(ctx context.Context, ln net.Listener, s *Server, out io.Writer) error {
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	url := "http://" + net.JoinHostPort(host, port) + "/"
	if s.opts.Token != "" {
		url += "?token=" + s.opts.Token
	}
	fmt.Fprintf(out, "rllm view: serving %d folder(s) read-only on %s\n", len(s.roots), url)
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		return nil
	case err := <-done:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}
