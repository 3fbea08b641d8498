package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/faketinker"
)

// The first Ctrl-C of rllm train whose service has stopped answering
// anything (it took step 2's forward_backward, then every request hangs:
// futures, heartbeats, closing the session) ends the command in bounded
// time, exit 130, without a second Ctrl-C.
func TestInterruptTrainWedgedService(t *testing.T) {
	const key = "tml-wedged-cli-key"
	var armed, wedged atomic.Bool
	var cancelled atomic.Int64
	var cancel atomic.Pointer[context.CancelFunc]
	srv, err := faketinker.New(faketinker.Options{APIKey: key, PollWait: 20 * time.Millisecond,
		OnRequest: func(name string) {
			switch {
			case name == "save_weights":
				armed.Store(true)
			case name == "forward_backward" && armed.Load() && !wedged.Swap(true):
				cancelled.Store(time.Now().UnixNano())
				(*cancel.Load())()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	proxy := httputil.NewSingleHostReverseProxy(u)
	release := make(chan struct{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wedged.Load() {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	defer close(release)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	cancel.Store(&stop)
	var stdout, stderr bytes.Buffer
	a := &App{Stdout: &stdout, Stderr: &stderr, Environ: smallTrainEnv(t.TempDir()), Getenv: func(k string) string {
		if k == "TINKER_API_KEY" {
			return key
		}
		return ""
	}}
	done := make(chan int, 1)
	go func() {
		done <- a.Run(ctx, []string{"train", "-o", "text", "backend.name=tinker", "backend.tinker.base_url=" + front.URL, "backend.tinker.base_model=rllm/embedded-tiny",
			"backend.tinker.lora_rank=2", "trainer.save_freq=1", "trainer.total_training_steps=3"})
	}()
	select {
	case code := <-done:
		t.Logf("exit %d, %v after the Ctrl-C", code, time.Since(time.Unix(0, cancelled.Load())))
		if code != exitInterrupted {
			t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "interrupted during step 2") {
			t.Fatalf("stderr:\n%s", stderr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("rllm train still runs 3 minutes after the first Ctrl-C; stderr:\n%s", stderr.String())
	}
}
