package program

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/pkg/gateway"
)

var shared struct {
	once sync.Once
	gw   *Gateway
	err  error
}

// Shared is the process-wide gateway program episodes use: started on
// first use on a free port of 127.0.0.1, it lives as long as the process.
// Each episode opens its own session on it with its own sampler, so
// training, validation and eval phases share it. Its admin token is a
// random one that stays in this process: a program holds only its own
// session's token, which makes model calls and reads that session's
// traces, so it cannot list, read or delete the other episodes' sessions.
func Shared() (*Gateway, error) {
	shared.once.Do(func() {
		shared.gw, shared.err = Start("127.0.0.1:0", gateway.New(gateway.Options{}))
	})
	return shared.gw, shared.err
}

// Start serves gw on addr in the background.
func Start(addr string, gw *gateway.Gateway) (*Gateway, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: gw.Handler(), ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = srv.Serve(ln) }()
	return &Gateway{GW: gw, Base: "http://" + ln.Addr().String()}, nil
}
