package evaluate

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// linePrefix starts every text line eval writes on stderr.
const linePrefix = "rllm: eval: "

// evalProgress reports progress: a line when the run starts, one every
// few seconds while it runs, and one at the end; JSON lines for a
// wrapper to parse when asJSON is set. Its events (start, progress,
// done, interrupted, stall) and their fields are what docs/rollouts.md
// and the CLI's scripts promise, which is why it is not pkg/progress's
// generic phase bar.
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

// onEvent counts the engine's events (rollout.EngineOptions.OnEvent).
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
	fmt.Fprintln(p.w, linePrefix+text)
}

func (p *evalProgress) start(tasks, k int, policy string) {
	p.began = time.Now()
	p.line(map[string]any{"event": "start", "tasks": tasks, "k": k, "episodes": p.total, "policy": policy},
		fmt.Sprintf("%s, sampling from %s", shape(tasks, k), policy))
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

// shape is "4 tasks × 2 attempts = 8 episodes".
func shape(tasks, k int) string {
	return fmt.Sprintf("%s × %s = %s", Plural(tasks, "task"), Plural(k, "attempt"), Plural(tasks*k, "episode"))
}

// Plural writes "1 attempt", "4 attempts".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
