package progress

import (
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/schollz/progressbar/v3"
)

// NewText draws a bar for a terminal on w (github.com/schollz/progressbar/v3):
//
//	rollout  42% |████████            | (27/64 episodes, 5.2 episodes/s) [5s:7s]
//
// with the count, the rate and the elapsed and remaining time. Only the
// newest unfinished phase is drawn; when it ends, the phase it interrupted
// is drawn again. Println clears the bar, writes the line and redraws.
func NewText(w io.Writer, opts Options) Progress {
	return &textProgress{w: w, opts: opts.withDefaults()}
}

type textProgress struct {
	w    io.Writer
	opts Options
	wmu  sync.Mutex // serializes writes to w

	mu    sync.Mutex // guards stack
	stack []*textCounter
}

// gate forwards a bar's output to w only while its phase is the one shown.
type gate struct {
	p       *textProgress
	visible atomic.Bool
}

func (g *gate) Write(b []byte) (int, error) {
	if !g.visible.Load() {
		return len(b), nil
	}
	g.p.wmu.Lock()
	defer g.p.wmu.Unlock()
	return g.p.w.Write(b)
}

type textCounter struct {
	p    *textProgress
	name string
	// mu serializes calls on bar: progressbar's Clear reads its state
	// without the bar's own lock.
	mu       sync.Mutex
	bar      *progressbar.ProgressBar
	gate     *gate
	finished atomic.Bool
}

func (p *textProgress) Start(name, unit string, total int64) Counter {
	if total <= 0 {
		total = -1
	}
	g := &gate{p: p}
	c := &textCounter{p: p, name: name, gate: g}
	opts := []progressbar.Option{}
	if unit == "bytes" {
		// Downloads: sizes and rates in kB/MB, not counts of bytes.
		opts = append(opts, progressbar.OptionShowBytes(true))
	}
	c.bar = progressbar.NewOptions64(total, append(opts,
		progressbar.OptionSetWriter(g),
		progressbar.OptionSetDescription(name),
		progressbar.OptionSetWidth(20),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString(unit),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(p.opts.Every/50),
		progressbar.OptionSpinnerType(14),
		// No spinner goroutine: every redraw happens under c.mu.
		progressbar.OptionSetSpinnerChangeInterval(0),
	)...)
	p.mu.Lock()
	if n := len(p.stack); n > 0 {
		top := p.stack[n-1]
		top.mu.Lock()
		top.bar.Clear()
		top.gate.visible.Store(false)
		top.mu.Unlock()
	}
	p.stack = append(p.stack, c)
	g.visible.Store(true)
	p.mu.Unlock()
	c.redraw()
	return c
}

func (p *textProgress) Println(msg string) {
	p.mu.Lock()
	var top *textCounter
	if n := len(p.stack); n > 0 {
		top = p.stack[n-1]
	}
	p.mu.Unlock()
	if top == nil {
		p.wmu.Lock()
		io.WriteString(p.w, strings.TrimRight(msg, "\n")+"\n")
		p.wmu.Unlock()
		return
	}
	top.mu.Lock()
	defer top.mu.Unlock()
	top.bar.Clear()
	p.wmu.Lock()
	io.WriteString(p.w, strings.TrimRight(msg, "\n")+"\n")
	p.wmu.Unlock()
	if !top.finished.Load() {
		top.bar.RenderBlank()
	}
}

// redraw draws the bar again (after a line or a nested phase hid it).
func (c *textCounter) redraw() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.finished.Load() {
		c.bar.RenderBlank()
	}
}

func (c *textCounter) Add(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.finished.Load() {
		c.bar.Add64(n)
	}
}

func (c *textCounter) Describe(status string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished.Load() {
		return
	}
	if status == "" {
		c.bar.Describe(c.name)
	} else {
		c.bar.Describe(c.name + " " + status)
	}
}

func (c *textCounter) Done() {
	c.mu.Lock()
	if c.finished.Swap(true) {
		c.mu.Unlock()
		return
	}
	c.bar.Clear()
	c.gate.visible.Store(false)
	// Finish (not Exit) also stops the spinner goroutine of a bar of
	// unknown length; its output goes nowhere now.
	c.bar.Finish()
	c.mu.Unlock()
	p := c.p
	p.mu.Lock()
	for i, x := range p.stack {
		if x == c {
			p.stack = append(p.stack[:i], p.stack[i+1:]...)
			break
		}
	}
	var top *textCounter
	if n := len(p.stack); n > 0 {
		top = p.stack[n-1]
		top.gate.visible.Store(true)
	}
	p.mu.Unlock()
	if top != nil {
		top.redraw()
	}
}
