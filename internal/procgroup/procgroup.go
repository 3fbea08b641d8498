// Package procgroup starts the programs rllm runs (exec environments,
// stdio MCP servers, agent programs, sandboxes) so that none outlives
// rllm or blocks it: each starts in its own process group, the whole
// group is killed when its context ends or Kill is called (a wrapper
// such as `sh run.sh`, `uv run` or `npm start` leaves the real program a
// grandchild), and Wait is bounded even when a descendant still holds
// the child's stdout or stderr open. Supervise goes further (Linux): the
// program runs under a small supervisor, so that nothing it starts
// outlives it or rllm, even a rllm killed by SIGKILL and a grandchild
// that left the group.
package procgroup

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// DefaultWaitDelay is how long Wait waits, once the child has exited or
// been killed, for the pipes its descendants may still hold open.
const DefaultWaitDelay = 2 * time.Second

// Command is exec.CommandContext for a child in a process group of its
// own: cancelling ctx kills the whole group, and Wait returns at most
// DefaultWaitDelay after the child exits or is killed (set cmd.WaitDelay
// to change it).
func Command(ctx context.Context, name string, arg ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, arg...)
	Configure(cmd, 0)
	cmd.Cancel = func() error { return Kill(cmd) }
	return cmd
}

// Configure makes cmd (not yet started) start in a process group of its
// own, and bounds Wait to waitDelay (0: DefaultWaitDelay) after the child
// exits or is killed. A cmd made with exec.Command has no context: stop
// it with Kill.
func Configure(cmd *exec.Cmd, waitDelay time.Duration) {
	if waitDelay <= 0 {
		waitDelay = DefaultWaitDelay
	}
	setGroup(cmd)
	cmd.WaitDelay = waitDelay
}

// Kill sends SIGKILL to cmd's whole process group (on systems without
// process groups, to the process). It is safe to call before Start, after
// Wait and more than once.
func Kill(cmd *exec.Cmd) error {
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	if supervised(cmd) {
		return killSupervised(cmd)
	}
	return killGroup(cmd)
}

// Tail is an io.Writer that keeps the last bytes written to it (a child's
// stderr): it never blocks and never grows past its limit, whatever the
// child writes, one line of a gigabyte included. It is safe for
// concurrent use.
type Tail struct {
	mu    sync.Mutex
	limit int
	buf   []byte
	total int64
}

// NewTail keeps the last limit bytes (at least 1).
func NewTail(limit int) *Tail {
	if limit < 1 {
		limit = 1
	}
	return &Tail{limit: limit}
}

// Write keeps the end of p; it always reports the whole of p written.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// String is what the tail holds.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Total is the number of bytes ever written.
func (t *Tail) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// Lines returns up to n of the last non-empty lines held, oldest first;
// a carriage return (a progress bar redrawn in place) ends a line too.
func (t *Tail) Lines(n int) []string {
	s := strings.ReplaceAll(t.String(), "\r", "\n")
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// LastLine is the last non-empty line held, or "".
func (t *Tail) LastLine() string {
	if l := t.Lines(1); len(l) == 1 {
		return l[0]
	}
	return ""
}

// maxLogLine bounds one line as LineLog logs it; the rest of a longer
// line is counted, not logged.
const maxLogLine = 2000

// LineLog is a child's stderr as log lines: every byte goes to Tail (the
// end kept for crash messages), and each non-blank line is handed to Log,
// cut at 2,000 bytes (of a line redrawn with \r, a progress bar, only
// the last drawing). Write never blocks on anything but Log.
type LineLog struct {
	Tail *Tail
	Log  func(line string)

	mu      sync.Mutex
	line    []byte
	dropped int
}

func (w *LineLog) Write(p []byte) (int, error) {
	if w.Tail != nil {
		w.Tail.Write(p)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range p {
		switch c {
		case '\n':
			w.flushLocked()
			continue
		case '\r':
			w.line, w.dropped = w.line[:0], 0
			continue
		}
		if len(w.line) < maxLogLine {
			w.line = append(w.line, c)
		} else {
			w.dropped++
		}
	}
	return len(p), nil
}

// Flush logs a last line that has no newline.
func (w *LineLog) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
}

func (w *LineLog) flushLocked() {
	if len(bytes.TrimSpace(w.line)) > 0 {
		msg := string(w.line)
		if w.dropped > 0 {
			msg += fmt.Sprintf("… (%d more bytes)", w.dropped)
		}
		w.Log(msg)
	}
	w.line, w.dropped = w.line[:0], 0
}
