package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/tracking"
)

// MetricsFile is the name of the metrics log in trainer.default_local_dir.
const MetricsFile = tracking.MetricsFile

// Flush bounds for the trackers' queues at the end of a run: what a
// tracker has not taken by then is counted and said.
const (
	trackFlush       = 30 * time.Second
	trackFlushKilled = 10 * time.Second
)

// openTracking opens the sinks trainer.logger names (pkg/tracking): the
// console line, metrics.jsonl, TensorBoard files, W&B and MLflow runs.
// A resumed run (resumedAt ≥ 0) keeps metrics.jsonl up to that step and
// continues the same tracker runs.
func (t *Trainer) openTracking(ctx context.Context, resumedAt int) error {
	spec := t.opts.Tracking
	spec.Loggers = t.plan.Cadence.Loggers
	spec.Dir = t.plan.Dir
	spec.Project, spec.Name = t.cfgProject, t.cfgName
	spec.Config = t.cfgMap
	spec.ResumedAt = resumedAt
	spec.Now = t.now
	spec.Console = tracking.ConsoleOptions{JSON: t.opts.JSON, Out: t.opts.Log, Say: t.say,
		StepLine: func(r tracking.Row) string { return stepLine(r.Step, t.totalSteps, r.Metrics) }}
	spec.Notify = func(line string) { t.logf("%s", line) }
	var err error
	t.track, err = tracking.Open(ctx, spec)
	return err
}

// record hands one step's (or validation's) metrics to every sink.
func (t *Trainer) record(step int, m map[string]float64, kind string) {
	row := tracking.Row{Step: step, Time: t.now(), Metrics: m, Kind: kind}
	if _, ok := m["val/pass@1"]; ok {
		row.Table, t.valTable = t.valTable, nil // the validation's sample of episodes
	}
	t.track.Log(row)
}

// finishTracking flushes the sinks and ends the trackers' runs with the
// run's summary: FINISHED, KILLED after Ctrl-C, FAILED after an error.
func (t *Trainer) finishTracking(ctx context.Context, res *Result, err error) {
	if t.track == nil {
		return
	}
	st, wait := tracking.Finished, trackFlush
	switch {
	case err != nil && ctx.Err() != nil:
		st, wait = tracking.Killed, trackFlushKilled
	case err != nil:
		st = tracking.Failed
	}
	sum := tracking.Summary{Status: st, Values: map[string]float64{}}
	if res != nil {
		sum.Values["steps"] = float64(res.Steps)
		if res.last.seen {
			sum.Values["final/val/pass@1"] = res.last.passAt1
			sum.Values["final/step"] = float64(res.last.step)
		}
		if res.best.seen {
			sum.Values["best/val/pass@1"] = res.best.passAt1
			sum.Values["best/step"] = float64(res.best.step)
		}
	}
	sum.Values["wall_time_s"] = t.now().Sub(t.started).Seconds()
	fctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	t.track.Close(fctx, sum)
}

// configMap is the resolved configuration, secrets hidden, as nested
// maps: what W&B gets as config and MLflow as params.
func configMap(c any) map[string]any {
	b, err := json.Marshal(c)
	if err != nil {
		return nil
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

// stepLine is the readable summary of a step, about 100 characters: what
// a user watches (reward, accuracy, validation, entropy, KL, time).
func stepLine(step, total int, m map[string]float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d/%d reward %.3f acc %.3f", step, total, m["critic/score/mean"], m["batch/accuracy"])
	if v, ok := m["val/pass@1"]; ok {
		fmt.Fprintf(&b, " val %.3f", v)
	}
	if v, ok := m["actor/entropy"]; ok {
		fmt.Fprintf(&b, " ent %.3f", v)
	}
	if v, ok := m["actor/kl_loss"]; ok {
		fmt.Fprintf(&b, " kl %.2g", v)
	}
	if _, ok := m["actor/pg_loss"]; !ok {
		b.WriteString(" no-update")
	}
	if v, ok := m["async/staleness_mean"]; ok {
		// Both sides of asynchronous training: how stale the trained
		// groups were, and how much of the step each side waited.
		fmt.Fprintf(&b, " stale %.1f idle roll %.0f%% train %.0f%%", v, 100*m["async/rollout_idle_ratio"], 100*m["async/trainer_idle_ratio"])
		if d := m["async/dropped_stale"]; d > 0 {
			fmt.Fprintf(&b, " dropped %.0f", d)
		}
	}
	fmt.Fprintf(&b, " %.1fs", m["timing_s/step"])
	return b.String()
}

// say prints a line of text above any progress bar.
func (t *Trainer) say(line string) {
	if t.opts.Progress != nil {
		t.opts.Progress.Println(line)
		return
	}
	fmt.Fprintln(t.opts.Log, line)
}

// printVal writes a validation result (in JSON mode the step's metric
// object carries it).
func (t *Trainer) printVal(m map[string]float64) {
	if t.opts.JSON {
		return
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if strings.HasPrefix(k, "val/") {
			parts = append(parts, fmt.Sprintf("%s %.3f", strings.TrimPrefix(k, "val/"), m[k]))
		}
	}
	t.logf("validation at step %d: %s", t.step, strings.Join(parts, ", "))
}

func itoa(n int) string { return strconv.Itoa(n) }
