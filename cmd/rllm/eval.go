package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/dataset/catalog"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/rollout"
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
			if cmd.Flags().Changed("n") && opts.n < 1 {
				return usagef("--n must be at least 1, got %d", opts.n)
			}
			opts.output = outputText
			if a.jsonResults() {
				opts.output = outputJSON
			}
			return runEval(cmd.Context(), a, opts)
		},
		ValidArgsFunction: completeConfigKeys,
	}
	opts.config.register(cmd)
	f := cmd.Flags()
	f.StringArrayVar(&opts.data, "data", nil, "dataset `FILE` of tasks (repeatable)")
	f.IntVar(&opts.n, "n", 0, "attempts per task, the k of pass@k (default rollout.val_kwargs.n)")
	f.StringVar(&opts.episodes, "episodes", "", "write every episode as JSON lines to `FILE`")
	f.BoolVar(&opts.textOnly, "text-only", false, "accept replies without token ids (plain OpenAI APIs); token counts are then 0")
	return cmd
}

// evalReport is the JSON form of the report: the summary plus what was
// evaluated and how.
type evalReport struct {
	rollout.EvalSummary
	Model       string       `json:"model"`
	Sampler     string       `json:"sampler"`
	Data        []string     `json:"data"`
	Temperature float64      `json:"temperature"`
	TopP        float64      `json:"top_p"`
	TopK        int          `json:"top_k"`
	Failed      int          `json:"failed"`
	Client      *clientStats `json:"client,omitempty"`
	EpisodesOut string       `json:"episodes_file,omitempty"`
}

// clientStats are the server client's counters: a run that completes
// may still have needed retries, and this is where they show.
type clientStats struct {
	Requests int64 `json:"requests"`
	Retries  int64 `json:"retries"`
	Failures int64 `json:"failures"`
}

func runEval(ctx context.Context, a *App, opts *evalOptions) error {
	ld, err := opts.config.load(a, opts.args)
	if err != nil {
		return err
	}
	c := ld.Config
	k := opts.n
	if k == 0 {
		k = c.Rollout.ValKwargs.N
	}

	var tasks []episode.Task
	data, err := catalog.ResolveFiles(c.Data.DatasetsDir, "--data", opts.data) // registered dataset names → their files
	if err != nil {
		return err
	}
	for _, path := range data {
		ts, err := dataset.Load(ctx, path, dataset.Options{})
		if err != nil {
			return err
		}
		if len(ts) == 0 {
			return usagef("%s has no rows; nothing to evaluate", path)
		}
		tasks = append(tasks, ts...)
	}

	spec := workflow.SpecFromConfig(c)
	// Resolve names and arguments before loading a model or calling a server.
	if err := spec.Check(); err != nil {
		return err
	}

	// Open the episodes file first: a long eval must not fail at the end
	// because its output directory is missing.
	var out *pendingFile
	if opts.episodes != "" {
		if out, err = createPending(opts.episodes); err != nil {
			return err
		}
		defer out.abort()
	}

	pol, err := openPolicy(ctx, a, c, opts.textOnly)
	if err != nil {
		return err
	}
	defer pol.close()
	total := len(tasks) * k
	prog := newEvalProgress(a.Stderr, opts.output == "json", total)
	eng, err := rollout.NewRunner(spec, pol.sampler, trainer.ValParams(c), k, rollout.RunnerOptionsFromConfig(c), prog.onEvent)
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
	eps, runErr := eng.Run(ctx, tasks)
	elapsed := time.Since(began)
	stopTicker()
	prog.finish(elapsed, runErr != nil)

	if out != nil {
		if err := rollout.WriteEpisodes(out.w, eps); err != nil {
			return fmt.Errorf("writing %s: %w", opts.episodes, err)
		}
		if err := out.commit(); err != nil {
			return err
		}
	}
	if runErr != nil {
		where := ""
		if out != nil {
			where = "; they are in " + opts.episodes
		}
		return fmt.Errorf("interrupted after %d of %d episodes%s: %w", len(eps), total, where, runErr)
	}

	sum := rollout.Summarize(eps, k)
	vk := c.Rollout.ValKwargs
	sum.Seconds = elapsed.Seconds()
	rep := evalReport{EvalSummary: sum, Model: pol.model, Sampler: pol.kind, Data: opts.data,
		Temperature: vk.Temperature, TopP: vk.TopP, TopK: vk.TopK, EpisodesOut: opts.episodes}
	var firstErr string
	for _, ep := range eps {
		if ep.TerminationReason == episode.TerminationError || ep.TerminationReason == episode.TerminationTimeout {
			rep.Failed++
			if firstErr == "" {
				firstErr = ep.ID + ": " + ep.Error
			}
		}
	}
	if pol.client != nil {
		st := pol.client.Stats()
		rep.Client = &clientStats{Requests: st.Requests, Retries: st.Retries, Failures: st.Failures}
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
	switch {
	case rep.Failed > 0 && rep.Failed == len(eps):
		return fmt.Errorf("every episode failed; the first: %s", firstErr)
	case rep.Failed > 0:
		a.warnf("%d of %d episodes failed (counted as incorrect); the first: %s", rep.Failed, len(eps), firstErr)
	}
	return nil
}

func writeEvalTable(w io.Writer, r *evalReport) error {
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
		fmt.Fprintf(w, "server    %d requests, %d retries, %d failed\n", cs.Requests, cs.Retries, cs.Failures)
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
	case rollout.EventFinished:
		p.done.Add(1)
	case rollout.EventFailed:
		p.done.Add(1)
		p.failed.Add(1)
	case rollout.EventRetried:
		p.retry.Add(1)
	}
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

// pendingFile is an output file that appears under its name only when
// complete: it is written to a temporary file in the same directory and
// renamed at commit.
type pendingFile struct {
	path string
	f    *os.File
	w    io.Writer
	done bool
}

func createPending(path string) (*pendingFile, error) {
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return nil, usagef("--episodes %s is a directory; give a file name", path)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if errors.Is(err, os.ErrNotExist) {
		return nil, usagef("--episodes %s: the directory %s does not exist; create it first", path, dir)
	}
	if err != nil {
		return nil, usagef("--episodes %s: %v", path, err)
	}
	return &pendingFile{path: path, f: f, w: f}, nil
}

func (p *pendingFile) commit() error {
	if err := p.f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", p.path, err)
	}
	if err := os.Rename(p.f.Name(), p.path); err != nil {
		return fmt.Errorf("writing %s: %w", p.path, err)
	}
	p.done = true
	return nil
}

func (p *pendingFile) abort() {
	if p.done {
		return
	}
	p.f.Close()
	os.Remove(p.f.Name())
}
