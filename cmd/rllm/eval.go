package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/dataset/catalog"
	envexec "github.com/rllm-org/rllm-go/pkg/env/exec"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/evaluate"
	"github.com/rllm-org/rllm-go/pkg/tracking"
	"github.com/rllm-org/rllm-go/pkg/workflow/program"
)

type evalOptions struct {
	config   configFlags
	args     []string
	data     []string
	n        int
	output   string
	episodes string
	force    bool
	textOnly bool
	// progressEvery is the period of progress lines (default 2s).
	progressEvery time.Duration
}

func newEvalCmd(a *App) *cobra.Command {
	opts := &evalOptions{}
	cmd := &cobra.Command{
		Use:   "eval --data FILE --n K [key=value ...]",
		Short: "Score the configured agent and env on a dataset: pass@1, pass@k, rewards",
		Long: `Run the configured agent+env (or workflow) over every task of the dataset
files, K attempts per task, and report pass@1 and the unbiased pass@k
(Chen et al. 2021) per data_source, the mean reward, the termination
reasons, tokens and time. Sampling uses rollout.val_kwargs (temperature,
top_p, top_k; n is the default of --n).

With rollout.engine=openai it samples from OpenAI-compatible servers
(vLLM, SGLang, any OpenAI API with --text-only); otherwise from the
embedded policy (backend.local.weights, or a fresh model).`,
		Example: `  rllm data generate arith --n 200 --out arith.jsonl
  rllm eval --data arith.jsonl --n 4 backend.local.weights=checkpoints/rllm/arith
  rllm eval --data test.parquet --n 8 --output json --episodes eps.jsonl \
      rollout.engine=openai rollout.endpoints=[http://gpu1:8000] rollout.model=Qwen/Qwen3-4B \
      env.name=math agent.name=math`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if len(opts.data) == 0 {
				return usagef("rllm eval needs --data FILE (.parquet, .jsonl, .json or .csv); repeat --data for several files")
			}
			if cmd.Flags().Changed("n") && (opts.n < 1 || opts.n > config.MaxN) {
				return usagef("--n must be from 1 to %d, got %d", config.MaxN, opts.n)
			}
			opts.output = a.resultFormat(outputText)
			return runEval(cmd.Context(), a, opts)
		},
		ValidArgsFunction: completeConfigKeys,
	}
	opts.config.register(cmd)
	f := cmd.Flags()
	f.StringArrayVar(&opts.data, "data", nil, "dataset `FILE` of tasks (repeatable)")
	f.IntVar(&opts.n, "n", 0, "attempts per task, the k of pass@k (default rollout.val_kwargs.n)")
	f.StringVar(&opts.episodes, "episodes", "", "write every episode as JSON lines to `FILE`")
	f.BoolVar(&opts.force, "force", false, "let --episodes replace an existing file that does not hold rllm episodes")
	f.BoolVar(&opts.textOnly, "text-only", false, "accept replies without token ids (plain OpenAI APIs); token counts are then 0")
	return cmd
}

// runEval resolves what needs the outside world (the configuration,
// hf:// files, the policy, trainer.logger's trackers) and hands the rest
// to pkg/evaluate: Prepare checks everything that needs no model, Run
// samples and scores; the report is printed here.
func runEval(ctx context.Context, a *App, opts *evalOptions) error {
	// exec environments start their pools lazily; whatever happens, they
	// (and their process groups) end with the command.
	defer envexec.CloseAll()
	defer program.CloseServers() // serving agent programs (workflow.args.mode=serve)
	ld, err := opts.config.load(a, opts.args)
	if err != nil {
		return err
	}
	c := ld.Config
	files, _, err := resolveHubFiles(ctx, a, c, "--data", opts.data) // hf:// URIs → local files
	if err != nil {
		return err
	}
	files, err = catalog.ResolveFiles(c.Data.DatasetsDir, "--data", files) // registered dataset names → their files
	if err != nil {
		return err
	}
	plan := evaluate.NewPlan(c, evaluate.Inputs{Data: opts.data, Files: files, ConfigFiles: opts.config.files,
		N: opts.n, Episodes: opts.episodes, Force: opts.force})
	ev, err := evaluate.Prepare(ctx, plan, evaluate.Options{Log: a.Stderr, JSON: opts.output == "json", ProgressEvery: opts.progressEvery})
	if err != nil {
		return err
	}
	defer ev.Close()

	pol, err := openPolicy(ctx, a, c, opts.textOnly)
	if err != nil {
		return err
	}
	defer pol.Close()
	// trainer.logger's trackers (tensorboard, wandb, mlflow) get the
	// results when it names them.
	track, err := openSideTracking(ctx, a, c, "eval")
	if err != nil {
		return err
	}
	res, err := ev.Run(ctx, pol)
	if err != nil {
		closeSideTracking(ctx, track, err, nil)
		return err
	}
	rep := &res.Report
	if track != nil {
		em := evaluate.Metrics(rep.EvalSummary)
		track.Log(tracking.Row{Step: 0, Time: time.Now(), Metrics: em, Kind: tracking.KindEval})
		closeSideTracking(ctx, track, res.RunErr, em)
	}
	if opts.output == "json" {
		enc := json.NewEncoder(a.Stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := writeEvalTable(a.Stdout, rep); err != nil {
		return err
	}
	warning, err := res.Verdict()
	if warning != "" {
		a.warnf("%s", warning)
	}
	return err
}

func writeEvalTable(w io.Writer, r *evaluate.Report) error {
	if r.Interrupted {
		fmt.Fprintf(w, "partial   interrupted: the figures below cover the %s that finished\n", evaluate.Plural(r.Episodes, "episode"))
	}
	fmt.Fprintf(w, "model     %s (%s)\n", r.Model, r.Sampler)
	fmt.Fprintf(w, "data      %s: %s × %s = %s\n", strings.Join(r.Data, ", "), evaluate.Plural(r.Tasks, "task"), evaluate.Plural(r.K, "attempt"), evaluate.Plural(r.Episodes, "episode"))
	fmt.Fprintf(w, "sampling  temperature %g, top_p %g, top_k %d\n\n", r.Temperature, r.TopP, r.TopK)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// With one attempt per task pass@k is pass@1: one column, not two.
	passK := func(v float64) string {
		if r.K == 1 {
			return ""
		}
		return fmt.Sprintf("%.4f\t", v)
	}
	head := ""
	if r.K != 1 {
		head = fmt.Sprintf("pass@%d\t", r.K)
	}
	fmt.Fprintf(tw, "data_source\ttasks\tepisodes\tpass@1\t%smean_reward\n", head)
	for _, name := range r.Sources() {
		s := r.BySource[name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.4f\t%s%.4f\n", name, s.Tasks, s.Episodes, s.PassAt1, passK(s.PassAtK), s.MeanReward)
	}
	if len(r.BySource) > 1 {
		fmt.Fprintf(tw, "all\t%d\t%d\t%.4f\t%s%.4f\n", r.Tasks, r.Episodes, r.PassAt1, passK(r.PassAtK), r.MeanReward)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "termination\tepisodes\n")
	reasons := make([]string, 0, len(r.Terminations))
	for t := range r.Terminations {
		reasons = append(reasons, string(t))
	}
	sort.Strings(reasons)
	for _, t := range reasons {
		fmt.Fprintf(tw, "%s\t%d\n", t, r.Terminations[episode.TerminationReason(t)])
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w)
	perEp := 0.0
	if r.Episodes > 0 {
		perEp = float64(r.ResponseTokens) / float64(r.Episodes)
	}
	fmt.Fprintf(w, "tokens    %d prompt, %d response (%.1f response tokens per episode)\n", r.PromptTokens, r.ResponseTokens, perEp)
	if cs := r.Client; cs != nil {
		refused := ""
		if cs.Refused > 0 {
			refused = fmt.Sprintf(" (%d refused by the server)", cs.Refused)
		}
		sent := ""
		if cs.Sent != cs.Requests {
			// Retries and re-sent requests: what the server saw.
			sent = fmt.Sprintf(" (%d sent)", cs.Sent)
		}
		fmt.Fprintf(w, "server    %d requests%s, %d retries, %d failed%s\n", cs.Requests, sent, cs.Retries, cs.Failures, refused)
	}
	rate := 0.0
	if r.Seconds > 0 {
		rate = float64(r.Episodes) / r.Seconds
	}
	fmt.Fprintf(w, "time      %.1fs (%.1f episodes/s)\n", r.Seconds, rate)
	if r.EpisodesOut != "" {
		fmt.Fprintf(w, "episodes  written to %s\n", r.EpisodesOut)
	}
	return nil
}
