package main

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"
)

// countFlag is a flag that must be a positive count.
type countFlag struct {
	name string
	v    int
}

// checkServerFlags refuses a --port outside 0..65535 and a count below 1,
// for the commands that run an HTTP server (serve, gateway).
func checkServerFlags(port int, counts ...countFlag) error {
	if port < 0 || port > 65535 {
		return usagef("--port %d is not a TCP port; use 0 to 65535", port)
	}
	for _, f := range counts {
		if f.v < 1 {
			return usagef("%s is %d; use a positive number", f.name, f.v)
		}
	}
	return nil
}

// listen opens host:port, or says which flag to change.
func listen(host string, port int) (net.Listener, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usagef("cannot listen on %s: %v; choose another --port or --host", addr, err)
	}
	return ln, nil
}

// serveUntilDone serves h on ln until ctx ends, then hands the server to
// shutdown. Headers must arrive within 10 s and an idle connection closes
// after 2 minutes, so a stalled client cannot hold a connection (handlers
// set their own body and write deadlines).
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler, shutdown func(*http.Server) error) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return shutdown(srv)
	}
}
