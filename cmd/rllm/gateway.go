package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

type gatewayOptions struct {
	config      configFlags
	args        []string
	host        string
	port        int
	modelName   string
	adminKeyEnv string
	// adminKeyFile is where the key the gateway makes is written when
	// adminKeyEnv is empty (default ~/.rllm/gateway-PORT.key).
	adminKeyFile string
	maxCalls     int
	maxBodyMB    int
	maxSessions  int
	// ready, when set, is told the address once the gateway listens (tests).
	ready func(addr string)
}

func newGatewayCmd(a *App) *cobra.Command {
	opts := &gatewayOptions{}
	cmd := &cobra.Command{
		Use:   "gateway [--port P] [key=value ...]",
		Short: "Record an agent program's model calls, token for token, per session",
		Long: `Serve the recording gateway in front of the configured sampler (the
servers of rollout.endpoints, or the embedded policy / Tinker sampler of
backend.name). Create a session with POST /sessions (optionally
{"session_id", "sampling_params", "max_calls", "metadata"}); it answers
the session's url and api_key. Point an agent at it:

  OPENAI_BASE_URL=http://HOST:PORT/sessions/ID/v1      (OpenAI SDKs)
  ANTHROPIC_BASE_URL=http://HOST:PORT/sessions/ID      (Anthropic SDKs)
  OPENAI_API_KEY / ANTHROPIC_API_KEY = the session's api_key

Calls go to /v1/chat/completions, /v1/completions (token-id prompts),
/v1/responses (the Responses API: the Agents SDK, Codex) and /v1/messages
(+ /v1/messages/count_tokens), streamed or not; the model and sampling parameters are the
session's whatever the client sends. GET /sessions/ID/traces returns each
call with its exact prompt and completion token ids, logprobs, finish
reason, weight version and latency; DELETE /sessions/ID ends it. /health
and Prometheus /metrics. It listens on 127.0.0.1 unless --host says
otherwise.

Creating, listing, reading and deleting sessions, and reading any
session's traces, need the admin key (Authorization: Bearer); a session's
api_key makes model calls and reads that session's traces, nothing else.
The key is the one in $NAME with --admin-key-env NAME; otherwise the
gateway makes one and writes it, readable by you only, to --admin-key-file
(default ~/.rllm/gateway-PORT.key), saying where on start:

  curl -H "Authorization: Bearer $(cat ~/.rllm/gateway-9090.key)" -d '{}' http://127.0.0.1:9090/sessions

See docs/gateway.md.`,
		Example: `  rllm gateway --port 9090
  rllm gateway --port 9090 rollout.engine=openai rollout.endpoints=[http://gpu1:8000] rollout.model=Qwen/Qwen3-4B`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if err := checkServerFlags(opts.port, countFlag{"--max-calls", opts.maxCalls}, countFlag{"--max-body-mb", opts.maxBodyMB}, countFlag{"--max-sessions", opts.maxSessions}); err != nil {
				return err
			}
			return runGateway(cmd.Context(), a, opts)
		},
		ValidArgsFunction: completeConfigKeys,
	}
	opts.config.register(cmd)
	f := cmd.Flags()
	f.StringVar(&opts.host, "host", "127.0.0.1", "address to listen on (loopback by default)")
	f.IntVar(&opts.port, "port", 9090, "TCP port (0 picks a free one)")
	f.StringVar(&opts.modelName, "model-name", gateway.DefaultModel, "model name the replies carry")
	f.StringVar(&opts.adminKeyEnv, "admin-key-env", "", "environment variable `NAME` holding the admin key that session management needs (default: the gateway makes one)")
	f.StringVar(&opts.adminKeyFile, "admin-key-file", "", "`PATH` the key the gateway makes is written to, mode 0600 (default ~/.rllm/gateway-PORT.key)")
	f.IntVar(&opts.maxCalls, "max-calls", gateway.DefaultMaxTraces, "model calls a session may make unless it sets max_calls")
	f.IntVar(&opts.maxBodyMB, "max-body-mb", gateway.DefaultMaxBodyBytes>>20, "largest request body in MiB; larger ones get 413")
	f.IntVar(&opts.maxSessions, "max-sessions", gateway.DefaultMaxSessions, "sessions alive at once; more get 503")
	return cmd
}

func runGateway(ctx context.Context, a *App, opts *gatewayOptions) error {
	ld, err := opts.config.load(a, opts.args)
	if err != nil {
		return err
	}
	c := ld.Config
	admin := ""
	if opts.adminKeyEnv != "" {
		if a.Getenv != nil {
			admin = strings.TrimSpace(a.Getenv(opts.adminKeyEnv))
		}
		if admin == "" {
			return usagef("--admin-key-env names %s, but that variable is empty or unset; export it or drop the flag", opts.adminKeyEnv)
		}
		if opts.adminKeyFile != "" {
			return usagef("--admin-key-file is where a key the gateway makes is written; with --admin-key-env %s you hold the key already: drop one of the two", opts.adminKeyEnv)
		}
	}
	home := ""
	if a.Getenv != nil {
		home = a.Getenv("HOME")
	}
	if admin == "" && opts.adminKeyFile == "" && home == "" {
		return usagef("HOME is not set, so the admin key has no default file; give --admin-key-file PATH or --admin-key-env NAME")
	}
	pol, err := openPolicy(ctx, a, c, false)
	if err != nil {
		return err
	}
	defer pol.Close()
	gw := gateway.New(gateway.Options{
		Sampler: pol.Sampler, Params: rollout.TrainParams(c), ChatTemplateKwargs: c.Rollout.ChatTemplateKwargs,
		Model: opts.modelName, MaxBodyBytes: int64(opts.maxBodyMB) << 20, MaxSessions: opts.maxSessions,
		MaxCalls: opts.maxCalls, AdminToken: admin,
	})
	ln, err := listen(opts.host, opts.port)
	if err != nil {
		return err
	}
	if admin == "" {
		keyFile := opts.adminKeyFile
		if keyFile == "" {
			keyFile = filepath.Join(home, ".rllm", "gateway-"+strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)+".key")
		}
		if err := atomicfile.WriteSecret(keyFile, []byte(gw.AdminToken()+"\n")); err != nil {
			ln.Close()
			return usagef("cannot write the gateway's admin key: %v; give --admin-key-file PATH in a writable directory, or --admin-key-env NAME", err)
		}
		// The key dies with the gateway; so does its file.
		defer os.Remove(keyFile)
		a.infof("gateway admin key written to %s (mode 0600); session management needs it as Authorization: Bearer", keyFile)
	}
	a.infof("gateway serving %s (%s) on http://%s; create a session with POST /sessions and the admin key", pol.Where, pol.Kind, ln.Addr())
	if opts.ready != nil {
		opts.ready(ln.Addr().String())
	}
	return serveUntilDone(ctx, ln, gw.Handler(), func(srv *http.Server) error {
		// Calls in flight get 5 s to finish; what is left is closed.
		wait, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(wait); errors.Is(err, context.DeadlineExceeded) {
			return srv.Close()
		} else if err != nil {
			return err
		}
		return nil
	})
}
