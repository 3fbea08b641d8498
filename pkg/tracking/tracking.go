// Package tracking sends a run's metrics where its users watch them:
// the console, metrics.jsonl, TensorBoard event files, Weights & Biases
// and MLflow, all behind one interface (Sink). The trainer hands a Set
// one row per step; local sinks write it at once, and every remote sink
// sits behind its own bounded queue (queue.go) so that a tracker that is
// slow, down or refusing never slows or stops training.
//
// The package reads no environment variable: the program reads WANDB_*,
// MLFLOW_* and ~/.netrc and passes the values in Spec.
package tracking

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/internal/ctxsleep"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// The logger names trainer.logger takes.
const (
	Console     = "console"
	JSONLines   = "jsonl"
	TensorBoard = "tensorboard"
	WandB       = "wandb"
	MLflow      = "mlflow"
)

// Names are every logger name, in the order the docs list them.
var Names = []string{Console, JSONLines, TensorBoard, WandB, MLflow}

// Row is one step's metrics: the record metrics.jsonl gets, and every
// other sink with it.
type Row struct {
	Step    int
	Time    time.Time
	Metrics map[string]float64
	// Kind says what the row is: a training step (""), a validation
	// without a step (KindValidation), an evaluation or an SFT step; the
	// console prints each its own way.
	Kind string
	// Table, when set, is a table logged with the row (a sample of
	// validation episodes): W&B stores it as a table file; the other
	// sinks ignore it.
	Table *Table
}

// Table is a small table of values (strings and numbers) under a key.
type Table struct {
	Key     string
	Columns []string
	Rows    [][]any
}

// Row kinds.
const (
	KindStep       = ""
	KindValidation = "validation"
	KindEval       = "eval"
)

// Event is a warning the run noticed (a stall, a collapse): an event line
// of metrics.jsonl, a console line, a line of W&B's console log.
type Event struct {
	Step    int
	Time    time.Time
	Kind    string
	Message string
}

// Status is how a run ended.
type Status string

const (
	Finished Status = "FINISHED"
	Failed   Status = "FAILED"
	Killed   Status = "KILLED" // interrupted (Ctrl-C)
)

// Summary is what the run says at its end: the W&B run summary, MLflow
// tags, the run's status.
type Summary struct {
	Status Status
	// Values are the summary's numbers (final and best validation,
	// steps, wall time) by key.
	Values map[string]float64
}

// Sink receives a run's rows. Log and Event never block for long (a
// remote sink queues); Close flushes within ctx and ends the run.
type Sink interface {
	Name() string
	Log(Row)
	Event(Event)
	Close(ctx context.Context, s Summary) error
}

// Spec is what Open needs to open the sinks trainer.logger names.
type Spec struct {
	// Loggers are trainer.logger's names.
	Loggers []string
	// Dir is the run directory: metrics.jsonl, tensorboard/, and the
	// trackers' run ids (tracking.json) live there.
	Dir string
	// Project and Name are trainer.project_name and
	// trainer.experiment_name: the tracker's project and run name unless
	// the tracker's settings say otherwise.
	Project, Name string
	// Config is the resolved configuration (secrets already hidden), as
	// nested maps: W&B's config, MLflow's params.
	Config map[string]any
	// ResumedAt is the step a resumed run continues after, -1 for a fresh
	// run: metrics.jsonl keeps the records up to it, the trackers
	// continue their runs and replace what the run redoes.
	ResumedAt int
	// JSONLFile is the file name in Dir for logger jsonl (MetricsFile
	// when empty).
	JSONLFile string

	Console ConsoleOptions
	WandB   WandBSettings
	MLflow  MLflowSettings

	// Notify receives the lines about the trackers themselves (a warning
	// when one fails, one when it recovers, what was not sent); nil
	// discards them.
	Notify func(line string)
	// HTTP is the client of the remote trackers; nil means a client with
	// a 30-second timeout.
	HTTP *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Sleep waits between retries; nil means a real wait. Tests pass one
	// that only advances a fake clock.
	Sleep func(ctx context.Context, d time.Duration) error
	// QueueRows bounds the rows a remote sink holds while its tracker
	// does not answer (default 10000); past it the oldest are dropped,
	// counted and reported at the end.
	QueueRows int
	// StartTimeout bounds the first call to each remote tracker (its auth
	// check) before training goes on without it (default 10s).
	StartTimeout time.Duration
	// Hostname and PID name the TensorBoard event file (defaults:
	// "localhost" and 0).
	Hostname string
	PID      int
}

// MetricsFile is the default name of the jsonl logger's file.
const MetricsFile = "metrics.jsonl"

func (s *Spec) defaults() {
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Sleep == nil {
		s.Sleep = ctxsleep.Sleep
	}
	if s.HTTP == nil {
		s.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	if s.Notify == nil {
		s.Notify = func(string) {}
	}
	if s.QueueRows <= 0 {
		s.QueueRows = 10000
	}
	if s.StartTimeout <= 0 {
		s.StartTimeout = 10 * time.Second
	}
	if s.JSONLFile == "" {
		s.JSONLFile = MetricsFile
	}
	if s.Hostname == "" {
		s.Hostname = "localhost"
	}
	if s.Console.Out == nil {
		s.Console.Out = io.Discard
	}
}

// Set is the open sinks of a run. Its methods may be called from one
// goroutine (the trainer's).
type Set struct {
	sinks  []Sink
	jsonl  *jsonlSink
	closed bool
	// The queues' lines wait here and are printed on the caller's
	// goroutine (Log, Event, Close), never from a queue's.
	notify  func(string)
	mu      sync.Mutex
	pending []string
}

func (set *Set) note(line string) {
	set.mu.Lock()
	set.pending = append(set.pending, line)
	set.mu.Unlock()
}

// drain prints the lines the queues left.
func (set *Set) drain() {
	set.mu.Lock()
	p := set.pending
	set.pending = nil
	set.mu.Unlock()
	for _, l := range p {
		set.notify(l)
	}
}

// Open opens the sinks spec.Loggers names, refusing settings that cannot
// work. Each remote tracker is asked once, from its queue, who the key
// belongs to; Ready reports the answer.
func Open(ctx context.Context, spec Spec) (*Set, error) {
	spec.defaults()
	set := &Set{notify: spec.Notify}
	spec.Notify = set.note
	defer set.drain()
	fail := func(err error) (*Set, error) {
		set.abort()
		return nil, err
	}
	var st *stateFile
	if slices.Contains(spec.Loggers, WandB) || slices.Contains(spec.Loggers, MLflow) {
		var err error
		if st, err = loadState(spec.Dir); err != nil {
			return nil, err
		}
	}
	for _, name := range Names {
		if !slices.Contains(spec.Loggers, name) {
			continue
		}
		var (
			s   Sink
			err error
		)
		switch name {
		case Console:
			s = newConsole(spec.Console)
		case JSONLines:
			var j *jsonlSink
			j, err = openJSONL(spec)
			set.jsonl, s = j, j
		case TensorBoard:
			s, err = openTensorBoard(spec, spec.ResumedAt)
		case WandB:
			s, err = openWandB(ctx, spec, st, slices.Contains(spec.Loggers, TensorBoard))
		case MLflow:
			s, err = openMLflow(ctx, spec, st)
		}
		if err != nil {
			return fail(err)
		}
		if s != nil {
			set.sinks = append(set.sinks, s)
		}
	}
	for _, name := range spec.Loggers {
		if !slices.Contains(Names, name) {
			return fail(fmt.Errorf("trainer.logger: %q is not a logger; use %v", name, Names))
		}
	}
	return set, nil
}

// Check refuses, without sending anything, the tracker settings Open
// would refuse before its first call: a tracker without its key or URL,
// a mode or URL that is not one (rllm validate-config).
func Check(loggers []string, w WandBSettings, m MLflowSettings) error {
	if slices.Contains(loggers, WandB) {
		switch w.Mode {
		case "", "online", "run":
			if _, err := checkWandB(w); err != nil {
				return err
			}
		case "disabled", "dryrun", "offline":
		default:
			return usererr.Errorf("WANDB_MODE: %q is not a mode; use online, offline or disabled", w.Mode)
		}
	}
	if slices.Contains(loggers, MLflow) {
		if _, err := checkMLflow(m); err != nil {
			return err
		}
	}
	return nil
}

// abort closes what Open opened before an error, sending nothing more.
func (set *Set) abort() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, s := range set.sinks {
		s.Close(ctx, Summary{Status: Failed})
	}
}

// Ready waits until every remote tracker answered its first call (the
// key checked, the run created), at most StartTimeout from Open, so the
// check overlaps what the program does meanwhile. A refused key is a
// usage error naming the tracker and the variable; a tracker that does
// not answer in time is warned about and the run goes on.
func (set *Set) Ready(ctx context.Context) error {
	if set == nil {
		return nil
	}
	defer set.drain()
	for _, s := range set.sinks {
		if q, ok := s.(*queue); ok {
			if err := q.ready(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// Kept are the validation rows a resumed run's metrics.jsonl kept (step
// order), for the run's summary; none without logger jsonl.
func (set *Set) Kept() []Row {
	if set == nil || set.jsonl == nil {
		return nil
	}
	return set.jsonl.kept
}

// Log hands a row to every sink.
func (set *Set) Log(r Row) {
	if set == nil {
		return
	}
	for _, s := range set.sinks {
		s.Log(r)
	}
	set.drain()
}

// Event hands a warning to every sink.
func (set *Set) Event(e Event) {
	if set == nil {
		return
	}
	for _, s := range set.sinks {
		s.Event(e)
	}
	set.drain()
}

// Close flushes every sink within ctx (each remote one gets what is left
// of it) and ends the run with sum. Closing twice does nothing.
func (set *Set) Close(ctx context.Context, sum Summary) error {
	if set == nil || set.closed {
		return nil
	}
	set.closed = true
	errs := make([]error, len(set.sinks))
	done := make(chan int, len(set.sinks))
	for i, s := range set.sinks {
		go func() {
			errs[i] = s.Close(ctx, sum)
			done <- i
		}()
	}
	for range set.sinks {
		<-done
	}
	set.drain()
	return errors.Join(errs...)
}
