package progress

import (
	"io"
	"math"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/internal/jsonline"
)

// NewJSON reports progress as one JSON object per line on w:
//
//	{"event":"progress","phase":"rollout","unit":"episodes","done":12,"total":64,"rate":3.1,"eta_s":16.8,"elapsed_s":3.9}
//
// with event "start" when a phase begins and "done" when it ends, and
// progress lines at most once per Options.Every per phase in between.
// Println writes {"event":"log","message":...}.
func NewJSON(w io.Writer, opts Options) Progress {
	return &jsonProgress{w: w, opts: opts.withDefaults()}
}

type jsonProgress struct {
	mu   sync.Mutex // serializes lines
	w    io.Writer
	opts Options
}

func (p *jsonProgress) emit(v any) {
	b, err := jsonline.Marshal(v)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.w.Write(b)
}

func (p *jsonProgress) Println(msg string) {
	p.emit(struct {
		Event   string `json:"event"`
		Message string `json:"message"`
	}{"log", msg})
}

func (p *jsonProgress) Start(name, unit string, total int64) Counter {
	now := p.opts.Now()
	c := &jsonCounter{p: p, name: name, unit: unit, total: max(total, 0), began: now, last: now}
	c.emit("start", now)
	return c
}

type jsonCounter struct {
	p           *jsonProgress
	mu          sync.Mutex
	name, unit  string
	status      string
	total, done int64
	began, last time.Time
	finished    bool
}

type jsonLine struct {
	Event   string   `json:"event"`
	Phase   string   `json:"phase"`
	Unit    string   `json:"unit"`
	Done    int64    `json:"done"`
	Total   int64    `json:"total,omitempty"`
	Rate    float64  `json:"rate"`
	ETA     *float64 `json:"eta_s,omitempty"`
	Elapsed float64  `json:"elapsed_s"`
	Status  string   `json:"status,omitempty"`
}

// emit writes a line; c.mu is held.
func (c *jsonCounter) emit(event string, now time.Time) {
	elapsed := now.Sub(c.began)
	rate, eta := estimate(c.done, c.total, elapsed)
	l := jsonLine{Event: event, Phase: c.name, Unit: c.unit, Done: c.done, Total: c.total,
		Rate: round3(rate), Elapsed: round3(elapsed.Seconds()), Status: c.status}
	if eta >= 0 && c.total > 0 && event != "done" {
		e := round3(eta.Seconds())
		l.ETA = &e
	}
	c.last = now
	c.p.emit(l)
}

func (c *jsonCounter) Add(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return
	}
	c.done += n
	if c.total > 0 && c.done >= c.total {
		return // the done line follows
	}
	if now := c.p.opts.Now(); now.Sub(c.last) >= c.p.opts.Every {
		c.emit("progress", now)
	}
}

func (c *jsonCounter) Describe(status string) {
	c.mu.Lock()
	c.status = status
	c.mu.Unlock()
}

func (c *jsonCounter) Done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return
	}
	c.finished = true
	c.emit("done", c.p.opts.Now())
}

func round3(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*1000) / 1000
}
