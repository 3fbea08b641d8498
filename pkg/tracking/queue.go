package tracking

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// remote is a tracker spoken to over the network. The queue calls its
// methods from one goroutine.
type remote interface {
	// name is the tracker's name in messages ("wandb").
	name() string
	// send delivers rows and events, in order. A *sendError says whether
	// to retry; any other error is retried.
	send(ctx context.Context, rows []Row, events []Event) error
	// finish ends the run on the tracker with the summary.
	finish(ctx context.Context, s Summary) error
	// maxRows is how many rows one send takes.
	maxRows() int
}

// sendError is a tracker's answer that is not a success.
type sendError struct {
	status     int           // HTTP status; 0 for a network error
	retryAfter time.Duration // the answer's Retry-After, if any
	msg        string
	body       string // the answer's text
	permanent  bool   // refused: sending the same again cannot succeed
}

func (e *sendError) Error() string { return e.msg }

// retryable says whether err is worth sending again: network errors,
// 429 and 5xx are (as the official clients retry them); other refusals
// are not.
func retryable(err error) bool {
	var se *sendError
	if errors.As(err, &se) {
		return !se.permanent
	}
	var ue *usererr.Error
	return !errors.As(err, &ue)
}

// httpError classifies a response that is not 2xx.
func httpError(tracker string, resp *http.Response, body string) *sendError {
	e := &sendError{status: resp.StatusCode}
	e.permanent = resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout
	e.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	e.body = body
	if len(body) > 300 {
		body = body[:300] + "..."
	}
	e.msg = fmt.Sprintf("%s answered %s", tracker, resp.Status)
	if body != "" {
		e.msg += ": " + body
	}
	return e
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date.
// It is capped at ten minutes.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), 10*time.Minute)
}

// closeGrace is how long Close waits for a tracker that is down.
const closeGrace = 3 * time.Second

// backoff is the wait before retry n (0-based): 1s doubling to 60s.
func backoff(n int) time.Duration {
	d := time.Second << min(n, 6)
	return min(d, time.Minute)
}

// queue holds a remote tracker's rows and events and sends them from its
// own goroutine: Log and Event only append. Past the bound the oldest
// rows are dropped (metrics.jsonl has them all) and counted.
type queue struct {
	r      remote
	bound  int
	sleep  func(context.Context, time.Duration) error
	notify func(string)

	mu       sync.Mutex
	rows     []Row
	events   []Event
	wake     chan struct{}
	closing  bool
	sum      Summary
	dropped  int // rows past the bound
	inflight int // rows[:inflight] are being sent
	refused  int // rows the tracker refused
	sent     int

	started      chan struct{} // closed when the start call returned
	startErr     error
	startTimeout time.Duration
	startBy      time.Time
	// healthy is false from a failed call until the next success (and
	// while the first call has not answered): Close then waits only
	// closeGrace for a tracker that is down.
	healthy bool

	ctx    context.Context // cancelled when Close's time is up
	cancel context.CancelFunc
	done   chan struct{}
}

// newQueue starts the queue's goroutine, whose first call is start (the
// tracker's auth check and run), bounded by spec.StartTimeout: Ready
// waits for it, so the check overlaps what the program does meanwhile.
func newQueue(r remote, spec Spec, start func(context.Context) error) *queue {
	q := &queue{r: r, bound: spec.QueueRows, sleep: spec.Sleep, notify: spec.Notify, wake: make(chan struct{}, 1), done: make(chan struct{}),
		started: make(chan struct{}), startTimeout: spec.StartTimeout, startBy: time.Now().Add(spec.StartTimeout)}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	go func() {
		sctx, cancel := context.WithTimeout(q.ctx, q.startTimeout)
		err := start(sctx)
		cancel()
		q.mu.Lock()
		q.startErr = err
		q.healthy = err == nil
		q.mu.Unlock()
		close(q.started)
		if err != nil && retryable(err) && q.ctx.Err() == nil {
			q.notify(fmt.Sprintf("warning: %s: %v; training goes on, its rows wait (up to %d) and are sent when it answers", r.name(), err, q.bound))
		}
		if err != nil && !retryable(err) {
			close(q.done) // refused: Ready reports it, nothing is sent
			return
		}
		q.run()
	}()
	return q
}

// ready waits for the start call (at most until StartTimeout from Open)
// and returns its refusal, if any.
func (q *queue) ready(ctx context.Context) error {
	t := time.NewTimer(time.Until(q.startBy))
	defer t.Stop()
	select {
	case <-q.started:
	case <-t.C:
		q.notify(fmt.Sprintf("warning: %s: no answer in %s; training goes on, its rows wait (up to %d) and are sent when it answers", q.r.name(), q.startTimeout, q.bound))
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.startErr != nil && !retryable(q.startErr) {
		return q.startErr
	}
	return nil
}

func (q *queue) Name() string { return q.r.name() }

func (q *queue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue) Log(r Row) {
	q.mu.Lock()
	if !q.closing {
		q.rows = append(q.rows, r)
		// The bound counts the rows waiting, not the ones being sent.
		if over := len(q.rows) - q.inflight - q.bound; over > 0 {
			q.rows = slices.Delete(q.rows, q.inflight, q.inflight+over)
			q.dropped += over
		}
	}
	q.mu.Unlock()
	q.poke()
}

func (q *queue) Event(e Event) {
	q.mu.Lock()
	if !q.closing && len(q.events) < q.bound {
		q.events = append(q.events, e)
	}
	q.mu.Unlock()
	q.poke()
}

// Close sends what is queued and ends the run, within ctx; what could
// not be sent by then is counted in one line.
func (q *queue) Close(ctx context.Context, s Summary) error {
	q.mu.Lock()
	if !q.closing {
		q.closing, q.sum = true, s
	}
	q.mu.Unlock()
	q.poke()
	grace := time.NewTimer(closeGrace)
	defer grace.Stop()
wait:
	for {
		select {
		case <-q.done:
			break wait
		case <-ctx.Done():
			break wait
		case <-grace.C:
			q.mu.Lock()
			down := !q.healthy
			q.mu.Unlock()
			if down {
				// A tracker that is down when the run ends is not
				// waited for: what it did not take is counted.
				break wait
			}
		}
	}
	q.cancel()
	<-q.done
	q.mu.Lock()
	defer q.mu.Unlock()
	var lost []string
	if n := len(q.rows); n > 0 {
		lost = append(lost, fmt.Sprintf("%d rows not sent before the end", n))
	}
	if q.dropped > 0 {
		lost = append(lost, fmt.Sprintf("%d rows dropped while it did not answer (more than %d queued)", q.dropped, q.bound))
	}
	if q.refused > 0 {
		lost = append(lost, fmt.Sprintf("%d rows refused", q.refused))
	}
	if len(lost) > 0 {
		q.notify(fmt.Sprintf("%s: %s; %d rows sent; metrics.jsonl has every row", q.r.name(), joinComma(lost), q.sent))
	}
	return nil
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

// run is the queue's goroutine: send, retry with backoff while the
// tracker fails, finish once closed and empty.
func (q *queue) run() {
	defer close(q.done)
	failing := "" // the reason of the current outage, "" when healthy
	refusal := "" // the last refusal reported
	attempt := 0
	for {
		q.mu.Lock()
		n := min(len(q.rows), q.r.maxRows())
		rows := append([]Row(nil), q.rows[:n]...)
		q.inflight = n
		events := append([]Event(nil), q.events...)
		closing, sum := q.closing, q.sum
		q.mu.Unlock()
		if q.ctx.Err() != nil {
			return
		}
		if len(rows) == 0 && len(events) == 0 {
			if closing {
				err := q.retry(func() error { return q.r.finish(q.ctx, sum) }, &failing, &attempt)
				if err != nil && q.ctx.Err() == nil {
					q.notify(fmt.Sprintf("%s: could not end the run: %v", q.r.name(), err))
				}
				return
			}
			select {
			case <-q.wake:
			case <-q.ctx.Done():
				return
			}
			continue
		}
		err := q.r.send(q.ctx, rows, events)
		if err != nil && retryable(err) {
			if q.ctx.Err() != nil {
				return
			}
			q.outage(err, &failing, &attempt)
			continue
		}
		q.recovered(&failing, &attempt)
		q.mu.Lock()
		q.rows = q.rows[len(rows):]
		q.inflight = 0
		q.events = q.events[min(len(events), len(q.events)):]
		if err != nil {
			q.refused += len(rows)
		} else {
			q.sent += len(rows)
		}
		q.mu.Unlock()
		if err != nil && err.Error() != refusal {
			refusal = err.Error()
			q.notify(fmt.Sprintf("warning: %s refused %d rows: %v; training goes on", q.r.name(), len(rows), err))
		}
	}
}

// retry calls f until it succeeds, is refused, or the queue's time is up.
func (q *queue) retry(f func() error, failing *string, attempt *int) error {
	for {
		err := f()
		if err == nil || !retryable(err) || q.ctx.Err() != nil {
			if err == nil {
				q.recovered(failing, attempt)
			}
			return err
		}
		q.outage(err, failing, attempt)
		if q.ctx.Err() != nil {
			return err
		}
	}
}

// outage reports the first failure of an outage and waits before the
// next try (the tracker's Retry-After when it gave one).
func (q *queue) outage(err error, failing *string, attempt *int) {
	q.mu.Lock()
	q.healthy = false
	q.mu.Unlock()
	if *failing == "" {
		*failing = err.Error()
		q.notify(fmt.Sprintf("warning: %s is not answering (%v); training goes on, its rows wait (up to %d) and are sent when it answers", q.r.name(), err, q.bound))
	}
	d := backoff(*attempt)
	var se *sendError
	if errors.As(err, &se) && se.retryAfter > 0 {
		d = se.retryAfter
	}
	*attempt++
	q.sleep(q.ctx, d)
}

func (q *queue) recovered(failing *string, attempt *int) {
	q.mu.Lock()
	q.healthy = true
	q.mu.Unlock()
	if *failing != "" {
		q.notify(fmt.Sprintf("%s answers again after %d failed tries; sending what waited", q.r.name(), *attempt))
	}
	*failing, *attempt = "", 0
}
