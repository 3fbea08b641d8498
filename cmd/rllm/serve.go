package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/backend/local/openai"
)

type serveOptions struct {
	config    configFlags
	args      []string
	weights   string
	host      string
	port      int
	modelName string
	truncate  bool
	// ready, when set, is told the address once the server listens (tests).
	ready func(addr string)
}

func newServeCmd(a *App) *cobra.Command {
	opts := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve [key=value ...]",
		Short: "Serve the embedded policy as an OpenAI-compatible (vLLM) server",
		Long: `Serve the embedded pure-Go policy over HTTP with vLLM's OpenAI-compatible
API: /v1/completions (string or token-id prompts), /v1/chat/completions,
/tokenize, /detokenize, /v1/models and /health. With --weights it serves a
checkpoint; otherwise a freshly initialised model sized by backend.local.*.`,
		Example: `  rllm serve --weights checkpoints/rllm/arith
  rllm serve --weights checkpoints/rllm/arith/global_step_2
  rllm serve --port 8001 backend.local.d_model=32`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if opts.port < 0 || opts.port > 65535 {
				return usagef("--port %d is not a TCP port; use 0 to 65535", opts.port)
			}
			return runServe(cmd.Context(), a, opts)
		},
		ValidArgsFunction: completeConfigKeys,
	}
	opts.config.register(cmd)
	f := cmd.Flags()
	f.StringVar(&opts.weights, "weights", "", "checkpoint to serve: a run `DIR` (its newest checkpoint), a global_step_N directory or a model directory (rllm sft --out)")
	f.StringVar(&opts.host, "host", "127.0.0.1", "address to listen on (loopback by default)")
	f.IntVar(&opts.port, "port", 8000, "TCP port (0 picks a free one)")
	f.StringVar(&opts.modelName, "model-name", "", "model id to serve (default: the checkpoint's model name)")
	f.BoolVar(&opts.truncate, "truncate-long-prompts", false, "keep the last context-1 tokens of a prompt that does not fit, instead of answering 400")
	return cmd
}

func runServe(ctx context.Context, a *App, opts *serveOptions) error {
	ld, err := opts.config.load(a, opts.args)
	if err != nil {
		return err
	}
	weights, err := resolveWeights(a, ld.Config, opts.weights)
	if err != nil {
		return err
	}
	be, err := local.OpenConfig(ctx, ld.Config, weights)
	if err != nil {
		return err
	}
	defer be.Close()
	ts, err := be.PublishSampler(ctx, "").Result(ctx)
	if err != nil {
		return err
	}
	snap := ts.(*local.Snapshot)
	name := opts.modelName
	if name == "" {
		name = be.Info().Name
	}
	handler := openai.New(snap, openai.Options{ModelName: name, TruncateLongPrompts: opts.truncate})
	addr := net.JoinHostPort(opts.host, strconv.Itoa(opts.port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return usagef("cannot listen on %s: %v; choose another --port or --host", addr, err)
	}
	c := snap.Config()
	fmt.Fprintf(a.Stderr, "rllm: serving %s (%d parameters, %d layers, d_model %d, context %d) on http://%s\n",
		name, be.NumParams(), c.Layers, c.DModel, c.Context, ln.Addr())
	if opts.ready != nil {
		opts.ready(ln.Addr().String())
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return nil
	}
}
