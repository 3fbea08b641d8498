package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/internal/boundedio"
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
	version   string
	maxSeqs   int
	maxWait   int
	maxN      int
	timeout   time.Duration
	apiKey    string
	keyFile   string
	// ready, when set, is told the address once the server listens (tests).
	ready func(addr string)
	// grace is how long shutdown waits for requests in flight before it
	// aborts them (shutdownGrace when 0).
	grace time.Duration
}

// shutdownGrace is how long serve's shutdown lets requests in flight
// finish; then they end with finish_reason "abort" and are answered.
const shutdownGrace = 5 * time.Second

func newServeCmd(a *App) *cobra.Command {
	opts := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve [key=value ...]",
		Short: "Serve the embedded policy as an OpenAI-compatible (vLLM) server",
		Long: `Serve the embedded pure-Go policy over HTTP as a drop-in for a vLLM or
SGLang server: vLLM's OpenAI-compatible API (/v1/completions with string or
token-id prompts, /v1/chat/completions, streamed or not, /tokenize,
/detokenize, /v1/models, /health, Prometheus /metrics) and SGLang's weight
updates (/update_weights_from_disk, /get_weight_version, /pause_generation,
/continue_generation). Concurrent requests share batched forward passes
(continuous batching). With --weights it serves a checkpoint; otherwise a
freshly initialised model sized by backend.local.*. See docs/serve.md.`,
		Example: `  rllm serve --weights checkpoints/rllm/arith
  rllm serve --weights checkpoints/rllm/arith/global_step_2
  rllm serve --port 8001 --max-num-seqs 64 backend.local.d_model=32`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if err := checkServerFlags(opts.port, countFlag{"--max-num-seqs", opts.maxSeqs}, countFlag{"--max-waiting", opts.maxWait}, countFlag{"--max-n", opts.maxN}); err != nil {
				return err
			}
			if opts.timeout < 0 {
				return usagef("--request-timeout is %s; use 0 (no limit) or a positive duration", opts.timeout)
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
	f.StringVar(&opts.version, "weight-version", "default", "weight version reported until /update_weights_from_disk names another (SGLang's --weight-version)")
	f.IntVar(&opts.maxSeqs, "max-num-seqs", 256, "sequences decoded together in one batch (vLLM's --max-num-seqs)")
	f.IntVar(&opts.maxWait, "max-waiting", 1024, "sequences that may wait for a slot; more are refused with 429")
	f.IntVar(&opts.maxN, "max-n", openai.DefaultMaxN, "largest n (choices per prompt) a request may ask for")
	f.DurationVar(&opts.timeout, "request-timeout", 10*time.Minute, "end a request that runs longer (0: no limit)")
	f.StringVar(&opts.apiKey, "api-key", "", "require Authorization: Bearer `KEY` on every endpoint but /health and /metrics (vLLM's --api-key; prefer --api-key-file, a flag shows in ps)")
	f.StringVar(&opts.keyFile, "api-key-file", "", "read the API key from `FILE` (its first line)")
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
	key, err := serveAPIKey(a, opts)
	if err != nil {
		return err
	}
	eng := local.NewEngine(snap, opts.version, local.EngineOptions{MaxNumSeqs: opts.maxSeqs, MaxWaiting: opts.maxWait, Workers: ld.Config.Backend.Local.Threads})
	defer eng.Close()
	handler := openai.New(eng, openai.Options{
		ModelName: name, TruncateLongPrompts: opts.truncate, MaxN: min(opts.maxN, opts.maxSeqs),
		RequestTimeout: opts.timeout, Workers: ld.Config.Backend.Local.Threads, APIKey: key,
		Logf: func(format string, args ...any) { a.infof(format, args...) },
	})
	a.setUndone(func() string {
		return fmt.Sprintf("answering the %d requests in flight (their connections are closed)", handler.InFlight())
	})
	ln, err := listen(opts.host, opts.port)
	if err != nil {
		return err
	}
	c := snap.Config()
	guarded := ""
	if key != "" {
		guarded = " (API key required)"
	}
	a.infof("serving %s (%d parameters, %d layers, d_model %d, context %d) on http://%s%s",
		name, be.NumParams(), c.Layers, c.DModel, c.Context, ln.Addr(), guarded)
	if opts.ready != nil {
		opts.ready(ln.Addr().String())
	}
	return serveUntilDone(ctx, ln, handler, func(srv *http.Server) error {
		return shutdownServe(a, srv, eng, handler, opts.grace)
	})
}

// shutdownServe stops accepting requests and lets those in flight finish
// for the grace period; those still running then end with finish_reason
// "abort" and are answered; a connection still open after that is closed.
// No client is left with a half-written answer it cannot tell apart from
// a complete one.
func shutdownServe(a *App, srv *http.Server, eng *local.Engine, handler *openai.Server, grace time.Duration) error {
	if grace <= 0 {
		grace = shutdownGrace
	}
	if n := handler.InFlight(); n > 0 {
		a.infof("shutting down: letting %d requests in flight finish (at most %s; a second Ctrl-C exits at once)", n, grace)
	}
	wait, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(wait)
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	a.infof("shutting down: aborting the %d requests still running", handler.InFlight())
	eng.Close() // every request ends with finish_reason "abort"; handlers answer
	wait2, cancel2 := context.WithTimeout(context.Background(), grace)
	defer cancel2()
	if err := srv.Shutdown(wait2); err != nil {
		return srv.Close() // whatever is left: its connection closes
	}
	return nil
}

// serveAPIKey is --api-key or the first line of --api-key-file.
func serveAPIKey(a *App, opts *serveOptions) (string, error) {
	if opts.apiKey != "" && opts.keyFile != "" {
		return "", usagef("give --api-key or --api-key-file, not both")
	}
	if opts.keyFile == "" {
		return opts.apiKey, nil
	}
	b, err := boundedio.ReadFile(a.context(), opts.keyFile, 64<<10)
	if err != nil {
		return "", usagef("--api-key-file: %v", err)
	}
	key, _, _ := strings.Cut(string(b), "\n")
	if key = strings.TrimSpace(key); key == "" {
		return "", usagef("--api-key-file %s is empty; put the key on its first line", opts.keyFile)
	}
	return key, nil
}
