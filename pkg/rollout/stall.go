package rollout

import (
	"fmt"
	"sync"
	"time"
)

// DefaultStallAfter is how long a phase may go without an episode ending
// before the engine says what it is waiting for.
const DefaultStallAfter = time.Minute

// Bounder is implemented by workflows whose episodes are bounded by a key
// of their own (a program's or a harness's workflow.args.timeout_s): the
// engine names it when it reports a stall.
type Bounder interface {
	// Bound says which key ends an episode that never finishes, and its
	// value ("workflow.args.timeout_s=300 ends an episode").
	Bound() string
}

// stallWatch tracks the episodes in flight of one engine and reports,
// every After while none ends, how many run, the oldest and what bounds
// them: nothing waits on a program, a harness, a container or a service
// in silence.
type stallWatch struct {
	after time.Duration
	now   func() time.Time
	say   func(string)
	bound func() string

	mu       sync.Mutex
	running  map[string]stallEpisode
	lastEnd  time.Time
	lastSaid time.Time
}

type stallEpisode struct {
	since   time.Time
	attempt int
}

func newStallWatch(after time.Duration, say func(string), bound func() string) *stallWatch {
	return &stallWatch{after: after, now: time.Now, say: say, bound: bound, running: map[string]stallEpisode{}}
}

func (s *stallWatch) started(id string, attempt int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.running) == 0 {
		s.lastEnd = s.now() // a phase starts the clock
	}
	s.running[id] = stallEpisode{since: s.now(), attempt: attempt}
}

func (s *stallWatch) ended(id string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.running, id)
	s.lastEnd = s.now()
}

// watch reports stalls until stop is closed.
func (s *stallWatch) watch(stop <-chan struct{}) {
	if s == nil {
		return
	}
	tick := time.NewTicker(max(s.after/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if msg := s.check(); msg != "" {
				s.say(msg)
			}
		}
	}
}

// check returns the report due now, or "".
func (s *stallWatch) check() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.running) == 0 || now.Sub(s.lastEnd) < s.after || now.Sub(s.lastSaid) < s.after {
		return ""
	}
	s.lastSaid = now
	oldest, first := "", stallEpisode{}
	for id, e := range s.running {
		if oldest == "" || e.since.Before(first.since) || (e.since.Equal(first.since) && id < oldest) {
			oldest, first = id, e
		}
	}
	attempt := ""
	if first.attempt > 1 {
		attempt = fmt.Sprintf(", attempt %d", first.attempt)
	}
	running := fmt.Sprintf("%d episodes running", len(s.running))
	if len(s.running) == 1 {
		running = "1 episode running"
	}
	return fmt.Sprintf("%s and none ended for %s; the oldest, %s%s, has run %s; %s",
		running, roundDur(now.Sub(s.lastEnd)), oldest, attempt, roundDur(now.Sub(first.since)), s.bound())
}

func roundDur(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
