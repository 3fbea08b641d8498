package sandbox

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeBackend records the order and concurrency of runs.
type fakeBackend struct {
	mu      sync.Mutex
	order   []string
	running atomic.Int32
	peak    atomic.Int32
	gate    chan struct{}
	limits  []Limits
}

func (f *fakeBackend) Name() string { return "fake" }
func (f *fakeBackend) Close() error { return nil }
func (f *fakeBackend) Run(ctx context.Context, req Request) (Result, error) {
	n := f.running.Add(1)
	defer f.running.Add(-1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	f.mu.Lock()
	f.order = append(f.order, req.Command[0])
	f.limits = append(f.limits, req.Limits)
	f.mu.Unlock()
	if f.gate != nil {
		<-f.gate
	}
	return Result{}, nil
}

// TestPoolBounds: a pool of one runs one request at a time and serves
// every waiting caller. The order (first come, first served) is
// semaphore.Weighted's documented guarantee and is not re-tested here,
// since goroutines reach the queue in no order a test could fix.
func TestPoolBounds(t *testing.T) {
	f := &fakeBackend{gate: make(chan struct{})}
	p := NewPool(f, 1, DefaultLimits)
	var wg sync.WaitGroup
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Run(context.Background(), Request{Command: []string{n}}); err != nil {
				t.Error(err)
			}
		}()
	}
	for range names {
		f.gate <- struct{}{}
	}
	wg.Wait()
	if f.peak.Load() != 1 {
		t.Errorf("%d runs at once in a pool of 1", f.peak.Load())
	}
	if len(f.order) != len(names) {
		t.Errorf("served %v", f.order)
	}
}

func TestPoolTightensLimitsOnly(t *testing.T) {
	f := &fakeBackend{}
	p := NewPool(f, 2, small)
	p.Run(context.Background(), Request{Command: []string{"x"}, Limits: Limits{WallTime: time.Hour, CPUTime: 100 * time.Millisecond}})
	got := f.limits[0]
	if got.WallTime != small.WallTime || got.CPUTime != 100*time.Millisecond || got.MemoryBytes != small.MemoryBytes {
		t.Fatalf("limits %+v", got)
	}
	p.Close()
	if _, err := p.Run(context.Background(), Request{Command: []string{"x"}}); err != ErrClosed {
		t.Fatalf("after Close: %v", err)
	}
}

func TestPoolWaitHonoursContext(t *testing.T) {
	f := &fakeBackend{gate: make(chan struct{})}
	p := NewPool(f, 1, DefaultLimits)
	go p.Run(context.Background(), Request{Command: []string{"holder"}})
	for f.running.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Run(ctx, Request{Command: []string{"waiter"}}); err != context.DeadlineExceeded {
		t.Fatalf("err %v", err)
	}
	close(f.gate)
}

// TestPoolLimitsAboveDefaults: sandbox.limits larger than the defaults
// act (a backend fills only zero fields from DefaultLimits; it used to
// lower the configured 2 MiB of output to the default 1 MiB).
func TestPoolLimitsAboveDefaults(t *testing.T) {
	lim := small
	lim.OutputBytes = 2 * DefaultLimits.OutputBytes
	p := NewPool(backendFor(t, BackendUnsafeHost), 1, lim)
	const n = 1_500_000
	res, err := p.Run(context.Background(), Request{Command: []string{"head", "-c", strconv.Itoa(n), "/dev/zero"}})
	if err != nil || res.Limit != LimitNone || len(res.Stdout) != n {
		t.Fatalf("limit %q, %d bytes of stdout, err %v; want all %d bytes within output_kb %d", res.Limit, len(res.Stdout), err, n, lim.OutputBytes>>10)
	}
}
