package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/view"
)

type viewOptions struct {
	dirs []string
	host string
	port int
	// ready, when set, receives the server's address once it listens
	// (tests).
	ready func(addr string)
}

func newViewCmd(a *App) *cobra.Command {
	opts := &viewOptions{}
	cmd := &cobra.Command{
		Use:   "view [DIR ...] [--port P]",
		Short: "A read-only web page of runs, live metrics and every kept episode token by token",
		Long: `Serve a web page of the runs under the folders given (default: the
current directory): every training run directory (trainer.default_local_dir)
and every episodes file of rllm eval --episodes found there, with:

  runs      status (training, finished, interrupted, crashed), steps, best
            validation and the configuration keys that differ between runs;
  metrics   charts of every series of metrics.jsonl, smoothed as TensorBoard
            smooths, several runs overlaid, following a run as it trains;
  episodes  each kept step's training and validation episodes, filtered by
            reward, termination, data source and length; one episode as its
            conversation and token by token, shaded by sampling logprob or
            advantage, masked tokens striped, truncation marked; the same
            task across steps;
  eval      pass@1 and pass@k per data source.

Everything the page needs is in the binary: it works offline and through an
SSH tunnel (ssh -L 7860:127.0.0.1:7860 host). It is read-only and binds
127.0.0.1; with --host set to another address every request needs the
token printed in the URL. It serves nothing outside the folders given.
Stop it with Ctrl-C.`,
		Example: `  rllm view checkpoints/rllm
  rllm view runs/a runs/b --port 8080
  rllm view --host 0.0.0.0 checkpoints   # prints a URL with a token`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.dirs = args
			if len(opts.dirs) == 0 {
				opts.dirs = []string{"."}
			}
			if opts.port < 0 || opts.port > 65535 {
				return usagef("--port %d: give a port from 0 to 65535", opts.port)
			}
			return runView(a.context(), a, opts)
		},
	}
	cmd.Flags().IntVar(&opts.port, "port", view.DefaultPort, "`PORT` to serve on (0 picks a free one)")
	cmd.Flags().StringVar(&opts.host, "host", "127.0.0.1", "`ADDRESS` to bind; any address but loopback requires the printed token")
	return cmd
}

func runView(ctx context.Context, a *App, opts *viewOptions) error {
	vo := view.Options{}
	if !view.IsLoopback(opts.host) {
		vo.Token = view.NewToken()
	}
	s, err := view.New(opts.dirs, vo)
	if err != nil {
		return err
	}
	ln, err := view.Listen(opts.host, opts.port)
	if err != nil {
		return err
	}
	if opts.ready != nil {
		opts.ready(ln.Addr().String())
	}
	return view.Serve(ctx, ln, s, a.Stdout)
}
