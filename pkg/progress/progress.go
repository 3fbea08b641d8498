// Package progress reports how far long work has come: the steps of a
// training run, the episodes of a rollout phase or of a validation. It is
// a small interface with two implementations, as restic does it: a text
// bar with rate and ETA for a terminal (NewText) and JSON lines at a
// bounded rate for everything else (NewJSON). Callers own the choice; this
// package never looks at os.Stderr or the environment.
package progress

import "time"

// Progress starts counted phases and prints lines that must not be torn
// by a bar being redrawn. Implementations are safe for concurrent use.
type Progress interface {
	// Start begins a phase of total units ("steps", "episodes"); total ≤ 0
	// means unknown. Phases may nest (a rollout phase inside a run): the
	// newest unfinished one is the one shown.
	Start(name, unit string, total int64) Counter
	// Println writes one line of text above any bar (text) or as a
	// {"event":"log"} object (JSON).
	Println(msg string)
}

// Counter counts one phase's progress.
type Counter interface {
	// Add records n more units done.
	Add(n int64)
	// Describe sets a short status shown beside the count (the last step's
	// reward, say); "" clears it.
	Describe(status string)
	// Done ends the phase; further calls on the counter do nothing.
	Done()
}

// Nop reports nothing.
var Nop Progress = nop{}

type nop struct{}

func (nop) Start(string, string, int64) Counter { return nopCounter{} }
func (nop) Println(string)                      {}

type nopCounter struct{}

func (nopCounter) Add(int64)       {}
func (nopCounter) Describe(string) {}
func (nopCounter) Done()           {}

// Options tune an implementation; the zero value is fine.
type Options struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Every is the least time between two JSON progress lines of a phase
	// (start and end lines are always written); 0 means 5s. The text bar
	// redraws at most every Every/50 (100ms at the default).
	Every time.Duration
}

func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Every <= 0 {
		o.Every = 5 * time.Second
	}
	return o
}

// rate and ETA of done units out of total after elapsed; eta < 0 when it
// cannot be known yet.
func estimate(done, total int64, elapsed time.Duration) (rate float64, eta time.Duration) {
	if elapsed <= 0 || done <= 0 {
		return 0, -1
	}
	rate = float64(done) / elapsed.Seconds()
	if total <= 0 || done >= total {
		return rate, 0
	}
	return rate, time.Duration(float64(total-done) / rate * float64(time.Second))
}
