package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/rllm-org/rllm-go/pkg/workflow/program"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/internal/anyval"
	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/dataset/catalog"
	"github.com/rllm-org/rllm-go/pkg/env"
	envexec "github.com/rllm-org/rllm-go/pkg/env/exec"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/episodestore"
	"github.com/rllm-org/rllm-go/pkg/reward"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/tracking"
	"github.com/rllm-org/rllm-go/pkg/trainer"
	"github.com/rllm-org/rllm-go/pkg/workflow"
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

// evalReport is the JSON form of the report: the summary plus what was
// evaluated and how.
type evalReport struct {
	rollout.EvalSummary
	Model       string   `json:"model"`
	Sampler     string   `json:"sampler"`
	Data        []string `json:"data"`
	Temperature float64  `json:"temperature"`
	TopP        float64  `json:"top_p"`
	TopK        int      `json:"top_k"`
	// Failed counts the episodes that ended in error or timeout, or
	// whose first request was refused (a prompt longer than the
	// context): with a server, the calls the server table counts as
	// failed.
	Failed int `json:"failed"`
	// SkippedLong counts rows whose question is too long for
	// data.max_prompt_length by its size alone; they were not run.
	SkippedLong int          `json:"skipped_long_prompts,omitempty"`
	Client      *clientStats `json:"client,omitempty"`
	EpisodesOut string       `json:"episodes_file,omitempty"`
	// Interrupted marks a partial report: the run was stopped (Ctrl-C)
	// and these figures cover the episodes that finished.
	Interrupted bool `json:"interrupted,omitempty"`
}

// clientStats are the server client's counters: a run that completes
// may still have needed retries, and this is where they show.
type clientStats struct {
	Requests int64 `json:"requests"` // model calls
	// Sent counts the HTTP requests the server saw: every attempt of
	// every call.
	Sent     int64 `json:"sent"`
	Retries  int64 `json:"retries"`
	Failures int64 `json:"failures"`
	// Refused counts the failures the server answered with an error it
	// will give again (a prompt longer than its context, a bad request).
	Refused int64 `json:"refused"`
}

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
	k := opts.n
	if k == 0 {
		k = c.Rollout.ValKwargs.N
	}

	data, _, err := resolveHubFiles(ctx, a, c, "--data", opts.data) // hf:// URIs → local files
	if err != nil {
		return err
	}
	data, err = catalog.ResolveFiles(c.Data.DatasetsDir, "--data", data) // registered dataset names → their files
	if err != nil {
		return err
	}
	// Refuse to overwrite an input or a file that is not ours before any
	// work is done.
	if opts.episodes != "" {
		if err := checkEpisodesPath(opts.episodes, data, opts.config.files, opts.force); err != nil {
			return err
		}
	}

	singleTurn := !c.Workflow.UseWorkflow && env.IsSingleTurn(c.Env.Name)
	maxQuestion := c.Data.MaxPromptLength * maxBytesPerToken
	var tasks []episode.Task
	skipped := 0
	for _, path := range data {
		ts, err := dataset.Load(ctx, path, dataset.Options{})
		if err != nil {
			return err
		}
		if len(ts) == 0 {
			return usagef("%s has no rows; nothing to evaluate", path)
		}
		if singleTurn {
			if err := checkScoredColumns(path, c.Env.Name, ts); err != nil {
				return err
			}
			// A question longer than any tokenization of
			// data.max_prompt_length tokens is skipped before it is
			// tokenized or sent.
			kept := ts[:0]
			for _, t := range ts {
				if q, _ := questionText(t); len(q) > maxQuestion {
					skipped++
					continue
				}
				kept = append(kept, t)
			}
			ts = kept
		}
		tasks = append(tasks, ts...)
	}
	if skipped > 0 {
		fmt.Fprintf(a.Stderr, "rllm: eval: skipped %d rows whose question is longer than %d bytes (data.max_prompt_length=%d tokens x %d bytes per token at most); raise data.max_prompt_length to run them\n",
			skipped, maxQuestion, c.Data.MaxPromptLength, maxBytesPerToken)
	}
	if len(tasks) == 0 {
		return usagef("every row of %s is too long for data.max_prompt_length=%d; nothing to evaluate", strings.Join(opts.data, ", "), c.Data.MaxPromptLength)
	}

	spec := workflow.SpecFromConfig(c)
	// Resolve names and arguments before loading a model or calling a server.
	if err := spec.Check(); err != nil {
		return err
	}

	// Open the episodes file first: a long eval must not fail at the end
	// because its output directory is missing. It appears under its name
	// only when complete (or interrupted, with what finished).
	var out *atomicfile.File
	var epw *episodestore.Writer // the records rllm train keeps (rllm view reads both); gzip for a .gz name
	if opts.episodes != "" {
		if out, err = atomicfile.Create(opts.episodes); err != nil {
			return usagef("--episodes %s: %v", opts.episodes, err)
		}
		defer out.Abort()
		epw = episodestore.NewWriter(out, nil, strings.HasSuffix(opts.episodes, ".gz"), 0)
	}

	pol, err := openPolicy(ctx, a, c, opts.textOnly)
	if err != nil {
		return err
	}
	defer pol.close()
	// trainer.logger's trackers (tensorboard, wandb, mlflow) get the
	// results when it names them.
	track, err := openSideTracking(ctx, a, c, "eval")
	if err != nil {
		return err
	}
	total := len(tasks) * k
	prog := newEvalProgress(a.Stderr, opts.output == "json", total)
	ro := rollout.RunnerOptionsFromConfig(c)
	ro.Stall = prog.stalled
	eng, err := rollout.NewRunner(spec, pol.sampler, trainer.ValParams(c), k, ro, prog.onEvent)
	if err != nil {
		return err
	}

	prog.start(len(tasks), k, pol.describe())
	every := opts.progressEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	stopTicker := prog.tick(every)
	began := time.Now()
	// Episodes stream into the aggregates and the file as they finish;
	// none is kept.
	agg := rollout.NewEvalAggregator(k)
	var endings rollout.FirstTurnEndings
	failed, done := 0, 0
	var firstErr string
	var writeErr error
	runErr := eng.Stream(ctx, tasks, func(ep *episode.Episode) error {
		done++
		agg.Add(ep)
		endings.Add(ep)
		if rollout.Failed(ep) {
			failed++
			if firstErr == "" {
				firstErr = ep.ID + ": " + ep.Error
			}
		}
		if epw != nil {
			if _, err := epw.Write(&episodestore.Record{Phase: episodestore.PhaseEval, Episode: *ep}); err != nil {
				writeErr = fmt.Errorf("writing %s: %w", opts.episodes, err)
				return writeErr
			}
		}
		return nil
	})
	elapsed := time.Since(began)
	stopTicker()
	prog.finish(elapsed, runErr != nil)
	if writeErr != nil {
		return writeErr
	}

	if out != nil {
		if err := out.Commit(); err != nil {
			return err
		}
	}
	sum := agg.Summary()
	vk := c.Rollout.ValKwargs
	sum.Seconds = elapsed.Seconds()
	if track != nil {
		em := evalMetrics(sum)
		track.Log(tracking.Row{Step: 0, Time: time.Now(), Metrics: em, Kind: tracking.KindEval})
		closeSideTracking(ctx, track, runErr, em)
	}
	rep := evalReport{EvalSummary: sum, Model: pol.model, Sampler: pol.kind, Data: opts.data,
		Temperature: vk.Temperature, TopP: vk.TopP, TopK: vk.TopK, EpisodesOut: opts.episodes,
		Failed: failed, SkippedLong: skipped, Interrupted: runErr != nil}
	if pol.client != nil {
		st := pol.client.Stats()
		rep.Client = &clientStats{Requests: st.Requests, Sent: st.Attempts, Retries: st.Retries, Failures: st.Failures, Refused: st.Refused}
	}
	if opts.output == "json" {
		enc := json.NewEncoder(a.Stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := writeEvalTable(a.Stdout, &rep); err != nil {
		return err
	}
	if runErr != nil {
		// The partial report above covers what finished.
		where := ""
		if out != nil {
			where = "; they are in " + opts.episodes
		}
		return fmt.Errorf("interrupted after %d of %d episodes%s: %w", done, total, where, runErr)
	}
	// Most episodes ending the same way before a reply is named with its
	// cause and the keys that change it.
	common, dominant := endings.Dominant()
	switch {
	case rep.Failed > 0 && rep.Failed == done && dominant:
		return fmt.Errorf("every episode failed: %s", common)
	case rep.Failed > 0 && rep.Failed == done:
		return fmt.Errorf("every episode failed; the first: %s", firstErr)
	case dominant:
		a.warnf("%s", common)
	case rep.Failed > 0:
		a.warnf("%d of %d episodes failed (counted as incorrect); the first: %s", rep.Failed, done, firstErr)
	}
	return nil
}

// maxBytesPerToken bounds the bytes of one token's text: a question of
// more than data.max_prompt_length times this many bytes cannot fit,
// whatever the tokenizer (common ones average 3 to 5 bytes per token).
const maxBytesPerToken = 16

// questionColumns are the columns the agents read the question from, in
// their order (pkg/agent ObservationText).
var questionColumns = []string{"question", "problem", "prompt", "observation"}

// questionText is a row's question as the agents read it.
func questionText(t episode.Task) (string, string) {
	for _, col := range questionColumns {
		if v, ok := t[col]; ok {
			s, _ := v.(string)
			return s, col
		}
	}
	return "", ""
}

// checkScoredColumns refuses, before anything runs, rows a single-turn
// scored env cannot use: without a text question or without a reference
// answer they would only score 0.
func checkScoredColumns(path, envName string, tasks []episode.Task) error {
	for i, t := range tasks {
		q, col := questionText(t)
		switch {
		case col == "":
			return usagef("%s: row %d has no question column (%s); env %s reads the question from one of them: rename the column that holds it (columns: %s)",
				path, i, strings.Join(questionColumns, ", "), envName, columnList(t))
		case q == "" && t[col] != nil:
			return usagef("%s: row %d: column %s holds %s, not text; env %s needs the question as a string", path, i, col, anyval.Kind(t[col]), envName)
		case q == "":
			return usagef("%s: row %d: column %s is empty; env %s needs a question in every row", path, i, col, envName)
		}
		if _, ok := reward.GroundTruth(t); !ok {
			return usagef("%s: row %d has no reference answer (ground_truth, answer, target or reward_model.ground_truth); env %s scores replies against it: add the column (columns: %s)",
				path, i, envName, columnList(t))
		}
	}
	return nil
}

func columnList(t episode.Task) string {
	cols := make([]string, 0, len(t))
	for k := range t {
		cols = append(cols, k)
	}
	sort.Strings(cols)
	if len(cols) > 20 {
		cols = append(cols[:20], "...")
	}
	return strings.Join(cols, ", ")
}

// checkEpisodesPath refuses an --episodes path that is one of the inputs
// (the dataset or a config file) and, without force, an existing file
// that is not an episodes file rllm wrote: eval replaces it whole.
func checkEpisodesPath(path string, data, configs []string, force bool) error {
	info, err := os.Stat(path)
	if err != nil {
		dir := filepath.Dir(path)
		if _, derr := os.Stat(dir); errors.Is(derr, fs.ErrNotExist) {
			return usagef("--episodes %s: the directory %s does not exist; create it first", path, dir)
		}
		return nil // a new file
	}
	if info.IsDir() {
		return usagef("--episodes %s is a directory; give a file name", path)
	}
	for _, in := range data {
		if fi, err := os.Stat(in); err == nil && os.SameFile(info, fi) {
			return usagef("--episodes %s is also an input (--data %s); writing episodes there would destroy the dataset: choose another file", path, in)
		}
	}
	for _, in := range configs {
		if fi, err := os.Stat(in); err == nil && os.SameFile(info, fi) {
			return usagef("--episodes %s is also an input (--config %s); choose another file", path, in)
		}
	}
	if force || info.Size() == 0 {
		return nil
	}
	ours, err := episodestore.IsEpisodesFile(path)
	if err != nil {
		return usagef("--episodes %s exists and cannot be read (%v); choose another file", path, err)
	}
	if !ours {
		return usagef("--episodes %s exists and does not hold episodes written by rllm; choose another file, or pass --force to replace it", path)
	}
	return nil
}

func writeEvalTable(w io.Writer, r *evalReport) error {
	if r.Interrupted {
		fmt.Fprintf(w, "partial   interrupted: the figures below cover the %s that finished\n", plural(r.Episodes, "episode"))
	}
	fmt.Fprintf(w, "model     %s (%s)\n", r.Model, r.Sampler)
	fmt.Fprintf(w, "data      %s: %s × %s = %s\n", strings.Join(r.Data, ", "), plural(r.Tasks, "task"), plural(r.K, "attempt"), plural(r.Episodes, "episode"))
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

// plural writes "1 attempt", "4 attempts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// evalProgress reports progress on stderr: a line when the run starts, one
// every few seconds while it runs, and one at the end; JSON lines with
// --output json so that a wrapper can parse them.
type evalProgress struct {
	w      io.Writer
	json   bool
	total  int
	mu     sync.Mutex // serializes writes from the ticker and the end
	began  time.Time
	done   atomic.Int64
	failed atomic.Int64
	retry  atomic.Int64
}

func newEvalProgress(w io.Writer, asJSON bool, total int) *evalProgress {
	return &evalProgress{w: w, json: asJSON, total: total}
}

func (p *evalProgress) onEvent(ev rollout.Event) {
	switch ev.Kind {
	case rollout.EventFinished, rollout.EventFailed:
		p.done.Add(1)
		if ev.Failed() {
			p.failed.Add(1)
		}
	case rollout.EventRetried:
		p.retry.Add(1)
	}
}

// stalled reports episodes that run and do not end (rollout.OnStall).
func (p *evalProgress) stalled(msg string) {
	p.line(map[string]any{"event": "stall", "message": msg}, msg)
}

func (p *evalProgress) line(fields map[string]any, text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		b, err := json.Marshal(fields)
		if err == nil {
			fmt.Fprintf(p.w, "%s\n", b)
		}
		return
	}
	fmt.Fprintln(p.w, "rllm: eval: "+text)
}

func (p *evalProgress) start(tasks, k int, policy string) {
	p.began = time.Now()
	p.line(map[string]any{"event": "start", "tasks": tasks, "k": k, "episodes": p.total, "policy": policy},
		fmt.Sprintf("%s × %s = %s, sampling from %s", plural(tasks, "task"), plural(k, "attempt"), plural(p.total, "episode"), policy))
}

func (p *evalProgress) progress(event string, elapsed time.Duration) {
	done, failed, retries := p.done.Load(), p.failed.Load(), p.retry.Load()
	text := fmt.Sprintf("%d/%d episodes done, %d failed, %d retried, %.1fs", done, p.total, failed, retries, elapsed.Seconds())
	if event == "interrupted" {
		text += " (interrupted)"
	}
	p.line(map[string]any{"event": event, "done": done, "episodes": p.total, "failed": failed,
		"retries": retries, "elapsed_s": elapsed.Seconds()}, text)
}

// tick prints a progress line every period until the returned stop is
// called.
func (p *evalProgress) tick(every time.Duration) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				p.progress("progress", time.Since(p.began))
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}

func (p *evalProgress) finish(elapsed time.Duration, interrupted bool) {
	event := "done"
	if interrupted {
		event = "interrupted"
	}
	p.progress(event, elapsed)
}
