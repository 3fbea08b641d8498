package sandbox

import (
	"context"
	"sync"
	"time"
)

// warmPool keeps started containers waiting for the next runs and
// workspaces, per container shape (containerSpec.key): taking one starts
// its replacement behind it, so while the current episodes run the next
// ones' containers are being created and started. A shape's queue holds
// at most size containers, and the pool at most warmShapes×size, so
// shapes used once (a task's image) do not pile up; a container that
// waited past half its idle allowance is removed rather than handed out.
type warmPool struct {
	d    *Docker
	size int

	mu      sync.Mutex
	ready   map[string][]warmContainer
	filling map[string]int
	closed  bool
	wg      sync.WaitGroup
}

type warmContainer struct {
	id string
	at time.Time
}

// warmShapes bounds the shapes the pool keeps containers for.
const warmShapes = 4

func newWarmPool(d *Docker, size int) *warmPool {
	return &warmPool{d: d, size: max(size, 0), ready: map[string][]warmContainer{}, filling: map[string]int{}}
}

// take hands out a warm container of shape s when one waits, and starts
// the queue's refill either way.
func (p *warmPool) take(s containerSpec) (string, bool) {
	if p.size == 0 {
		return "", false
	}
	k := s.key()
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := "", false
	for len(p.ready[k]) > 0 {
		c := p.ready[k][0]
		p.ready[k] = p.ready[k][1:]
		if time.Since(c.at) < warmIdleMax/2 {
			id, ok = c.id, true
			break
		}
		go p.d.remove(c.id)
	}
	if len(p.ready[k]) == 0 {
		delete(p.ready, k)
	}
	p.refill(k, s)
	return id, ok
}

// refill starts containers of shape s until its queue (waiting and being
// started) is full, within the pool's bound. p.mu is held.
func (p *warmPool) refill(k string, s containerSpec) {
	total := 0
	for _, q := range p.ready {
		total += len(q)
	}
	for _, n := range p.filling {
		total += n
	}
	for !p.closed && len(p.ready[k])+p.filling[k] < p.size && total < warmShapes*p.size {
		total++
		p.filling[k]++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
			id, err := p.d.create(ctx, s)
			cancel()
			p.mu.Lock()
			if p.filling[k]--; p.filling[k] == 0 {
				delete(p.filling, k)
			}
			closed := p.closed
			if err == nil && !closed {
				p.ready[k] = append(p.ready[k], warmContainer{id: id, at: time.Now()})
			}
			p.mu.Unlock()
			// A failed start leaves the next take to start a cold one.
			if err == nil && closed {
				_ = p.d.remove(id)
			}
		}()
	}
}

// close stops the refills and removes the waiting containers.
func (p *warmPool) close(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	var ids []string
	for _, q := range p.ready {
		for _, c := range q {
			ids = append(ids, c.id)
		}
	}
	p.ready = map[string][]warmContainer{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.d.remove(id) }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
