package backend

import (
	"context"
	"sync"
)

// Future is the result of a call that was queued and runs later. Trainers
// submit several calls (forward_backward, then optim_step) before waiting
// on any of them, as the Tinker cookbook does, so the backend is never idle
// while the caller prepares the next batch.
type Future[T any] struct {
	done chan struct{}
	once sync.Once
	val  T
	err  error
}

// NewFuture returns a pending future and the function that completes it.
// Only the first call of resolve counts.
func NewFuture[T any]() (*Future[T], func(T, error)) {
	f := &Future[T]{done: make(chan struct{})}
	return f, func(v T, err error) {
		f.once.Do(func() {
			f.val, f.err = v, err
			close(f.done)
		})
	}
}

// Resolved returns a future that is already complete.
func Resolved[T any](v T, err error) *Future[T] {
	f, resolve := NewFuture[T]()
	resolve(v, err)
	return f
}

// Result waits for the call to finish, or for ctx to end. Giving up on the
// wait does not cancel the call: it still runs, in order, on the backend.
func (f *Future[T]) Result(ctx context.Context) (T, error) {
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// Done is closed when the result is available.
func (f *Future[T]) Done() <-chan struct{} { return f.done }
