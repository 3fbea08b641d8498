package sandbox

import (
	"context"
	"errors"
	"sync"

	"golang.org/x/sync/semaphore"
)

// Pool runs at most n requests at once on one backend; waiting requests
// start in the order they arrived (semaphore.Weighted is FIFO), so a slow
// run delays the others by at most its own limits. It is safe for
// concurrent use.
type Pool struct {
	backend Backend
	sem     *semaphore.Weighted
	n       int
	limits  Limits

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// NewPool puts backend behind a pool of n slots whose runs are bounded
// by limits (a request may only tighten them).
func NewPool(backend Backend, n int, limits Limits) *Pool {
	if n < 1 {
		n = 1
	}
	return &Pool{backend: backend, sem: semaphore.NewWeighted(int64(n)), n: n, limits: limits}
}

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("sandbox: pool closed")

// Backend is the pool's backend name.
func (p *Pool) Backend() string { return p.backend.Name() }

// Size is the number of runs at once.
func (p *Pool) Size() int { return p.n }

// Limits are the pool's limits.
func (p *Pool) Limits() Limits { return p.limits }

// Run waits for a slot (or ctx) and runs req within the pool's limits.
func (p *Pool) Run(ctx context.Context, req Request) (Result, error) {
	if err := req.Check(); err != nil {
		return Result{}, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return Result{}, ErrClosed
	}
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	if err := p.sem.Acquire(ctx, 1); err != nil {
		return Result{}, err
	}
	defer p.sem.Release(1)
	req.Limits = req.Limits.Within(p.limits)
	return p.backend.Run(ctx, req)
}

// Together waits for n slots (at most the pool's size) and calls f with
// a Runner whose runs take none: runs that talk to one another while
// they run (a code test's judge and the reply it calls) start together,
// where n gradings that each held one slot while waiting for another
// could wait for ever. f's runs are bounded by the pool's limits as Run's
// are; Together returns f's error once f returned.
func (p *Pool) Together(ctx context.Context, n int, f func(Runner) error) error {
	n = max(min(n, p.n), 1)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	if err := p.sem.Acquire(ctx, int64(n)); err != nil {
		return err
	}
	defer p.sem.Release(int64(n))
	return f(reserved{p})
}

// reserved runs on a Pool's slots that Together holds.
type reserved struct{ p *Pool }

func (r reserved) Run(ctx context.Context, req Request) (Result, error) {
	if err := req.Check(); err != nil {
		return Result{}, err
	}
	req.Limits = req.Limits.Within(r.p.limits)
	return r.p.backend.Run(ctx, req)
}

// Close waits for the runs in progress and closes the backend.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	return p.backend.Close()
}

// Opener is the pool's backend as an Opener of workspaces, false when
// the backend opens none.
func (p *Pool) Opener() (Opener, bool) {
	o, ok := p.backend.(Opener)
	return o, ok
}
