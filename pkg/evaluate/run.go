package evaluate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/episodestore"
	"github.com/rllm-org/rllm-go/pkg/policy"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Options are where an evaluation reports while it runs.
type Options struct {
	// Log receives the progress lines and notes (the command's stderr);
	// nil discards them.
	Log io.Writer
	// JSON writes progress as JSON lines (--output json).
	JSON bool
	// ProgressEvery is the period of progress lines; 0 means 2s.
	ProgressEvery time.Duration
}

// Eval is an evaluation ready to run: its tasks loaded and checked, its
// workflow resolved, its episodes file open. Close it when done.
type Eval struct {
	plan    *Plan
	opts    Options
	tasks   []episode.Task
	skipped int
	out     *atomicfile.File
	epw     *episodestore.Writer
	ran     bool
}

// Prepare does every check that needs no model before one is loaded or
// called: the --episodes path (not an input, not someone else's file),
// the dataset rows, the workflow's names and arguments. It then opens
// the episodes file, so that a long eval cannot fail at its end because
// the file's directory is missing; the file appears under its name only
// when Run completes (or is interrupted, with what finished).
func Prepare(ctx context.Context, p *Plan, o Options) (*Eval, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if p.K < 1 {
		return nil, usererr.Errorf("the number of attempts per task must be at least 1, got %d; set --n or rollout.val_kwargs.n", p.K)
	}
	if p.Episodes != "" {
		if err := CheckEpisodesPath(p.Episodes, p.Files, p.ConfigFiles, p.Force); err != nil {
			return nil, err
		}
	}
	tasks, skipped, err := p.LoadTasks(ctx)
	if skipped > 0 {
		max := p.Rows.MaxQuestionBytes()
		fmt.Fprintf(o.Log, "%sskipped %d rows whose question is longer than %d bytes (data.max_prompt_length=%d tokens x %d bytes per token at most); raise data.max_prompt_length to run them\n",
			linePrefix, skipped, max, p.Rows.MaxPromptLength, MaxBytesPerToken)
	}
	if err != nil {
		return nil, err
	}
	// Resolve names and arguments before loading a model or calling a server.
	if err := p.Workflow.Check(); err != nil {
		return nil, err
	}
	e := &Eval{plan: p, opts: o, tasks: tasks, skipped: skipped}
	if p.Episodes != "" {
		if e.out, err = atomicfile.Create(p.Episodes); err != nil {
			return nil, usererr.Errorf("--episodes %s: %v", p.Episodes, err)
		}
		// The records rllm train keeps (rllm view reads both); gzip for a .gz name.
		e.epw = episodestore.NewWriter(e.out, nil, strings.HasSuffix(p.Episodes, ".gz"), 0)
	}
	return e, nil
}

// Close discards the episodes file unless Run wrote it.
func (e *Eval) Close() {
	if e.out != nil {
		e.out.Abort()
	}
}

// Result is a run's report and how it ended.
type Result struct {
	Report Report
	// RunErr is why the run stopped before every episode ran (a cancelled
	// context); the report then covers the episodes that finished.
	RunErr error

	done, total int
	firstErr    string
	endings     rollout.FirstTurnEndings
}

// Run samples K episodes per task from pol. Episodes stream into the
// aggregates and the episodes file as they finish; none is kept. An
// error means no report (the engine could not be built, the episodes
// file could not be written); an interrupted run returns its partial
// report with Result.RunErr set.
func (e *Eval) Run(ctx context.Context, pol *policy.Policy) (*Result, error) {
	if e.ran {
		return nil, errors.New("evaluate: Run called twice")
	}
	e.ran = true
	p := e.plan
	res := &Result{total: len(e.tasks) * p.K}
	prog := newEvalProgress(e.opts.Log, e.opts.JSON, res.total)
	ro := p.Runner
	ro.Stall = prog.stalled
	eng, err := rollout.NewRunner(p.Workflow, pol.Sampler, p.Params, p.K, ro, prog.onEvent)
	if err != nil {
		return nil, err
	}

	prog.start(len(e.tasks), p.K, pol.Describe())
	every := e.opts.ProgressEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	stopTicker := prog.tick(every)
	began := time.Now()
	agg := rollout.NewEvalAggregator(p.K)
	failed := 0
	var writeErr error
	runErr := eng.Stream(ctx, e.tasks, func(ep *episode.Episode) error {
		res.done++
		agg.Add(ep)
		res.endings.Add(ep)
		if rollout.Failed(ep) {
			failed++
			if res.firstErr == "" {
				res.firstErr = ep.ID + ": " + ep.Error
			}
		}
		if e.epw != nil {
			if _, err := e.epw.Write(&episodestore.Record{Phase: episodestore.PhaseEval, Episode: *ep}); err != nil {
				writeErr = fmt.Errorf("writing %s: %w", p.Episodes, err)
				return writeErr
			}
		}
		return nil
	})
	elapsed := time.Since(began)
	stopTicker()
	prog.finish(elapsed, runErr != nil)
	if writeErr != nil {
		return nil, writeErr
	}
	if e.out != nil {
		if err := e.out.Commit(); err != nil {
			return nil, err
		}
	}

	sum := agg.Summary()
	sum.Seconds = elapsed.Seconds()
	res.RunErr = runErr
	res.Report = Report{EvalSummary: sum, Model: pol.Model, Sampler: pol.Kind, Data: p.Data,
		Temperature: p.Params.Temperature, TopP: p.Params.TopP, TopK: p.Params.TopK, EpisodesOut: p.Episodes,
		Failed: failed, SkippedLong: e.skipped, Interrupted: runErr != nil, Client: clientStats(pol.Client)}
	return res, nil
}

// Verdict is how the command ends once it has printed the report: an
// error when the run was interrupted or every episode failed; otherwise
// a warning ("" for none) when most episodes ended the same way before a
// reply (named with its cause and the keys that change it) or some
// failed.
func (r *Result) Verdict() (warning string, err error) {
	if r.RunErr != nil {
		// The partial report covers what finished.
		where := ""
		if r.Report.EpisodesOut != "" {
			where = "; they are in " + r.Report.EpisodesOut
		}
		return "", fmt.Errorf("interrupted after %d of %d episodes%s: %w", r.done, r.total, where, r.RunErr)
	}
	failed := r.Report.Failed
	common, dominant := r.endings.Dominant()
	switch {
	case failed > 0 && failed == r.done && dominant:
		return "", fmt.Errorf("every episode failed: %s", common)
	case failed > 0 && failed == r.done:
		return "", fmt.Errorf("every episode failed; the first: %s", r.firstErr)
	case dominant:
		return common.String(), nil
	case failed > 0:
		return fmt.Sprintf("%d of %d episodes failed (counted as incorrect); the first: %s", failed, r.done, r.firstErr), nil
	}
	return "", nil
}
