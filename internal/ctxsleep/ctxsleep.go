// Package ctxsleep waits for a duration or until a context is done,
// whichever comes first: the one way retry loops, pollers and fakes pause.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d and returns nil, or returns ctx.Err() as soon as ctx is
// done. A d of zero or less does not wait; it returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
