package sampler

import (
	"context"
	"hash/fnv"
	"sync"
)

type streamKey struct{}

// WithStream marks ctx as one sampling stream: one attempt of one
// episode. Seeded derives each request's seed from it, so a run's seeds
// do not depend on the order in which concurrent episodes reach the model.
func WithStream(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, streamKey{}, key)
}

// Stream is the stream key of ctx ("" when none).
func Stream(ctx context.Context) string {
	k, _ := ctx.Value(streamKey{}).(string)
	return k
}

// Seeded gives every request that carries a seed its own seed, derived
// from that seed, salt, the request's stream (WithStream) and its position
// in the stream, the way vLLM gives each of the n samples of a seeded
// request its own generator: runs are reproducible and the samples of a
// group stay different. Requests without a seed pass through unchanged.
func Seeded(s Sampler, salt uint64) Sampler {
	return &seeded{next: s, salt: salt, calls: map[string]uint64{}}
}

type seeded struct {
	next  Sampler
	salt  uint64
	mu    sync.Mutex
	calls map[string]uint64
}

func (s *seeded) Sample(ctx context.Context, req Request) (Response, error) {
	if req.Params.Seed != nil {
		key := Stream(ctx)
		s.mu.Lock()
		n := s.calls[key]
		s.calls[key] = n + 1
		s.mu.Unlock()
		seed := DeriveSeed(uint64(*req.Params.Seed), s.salt, key, n)
		req.Params.Seed = &seed
	}
	return s.next.Sample(ctx, req)
}

// DeriveSeed mixes a base seed, a salt, a stream key and a call index into
// a seed in [0, 2³¹), which every server accepts.
func DeriveSeed(base, salt uint64, key string, call uint64) int64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	x := splitmix(base ^ splitmix(salt^0x9e3779b97f4a7c15) ^ splitmix(h.Sum64()) ^ splitmix(call+0x632be59bd9b4e019))
	return int64(x >> 33)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Unwrap is the seeded sampler (Wrapper).
func (s *seeded) Unwrap() Sampler { return s.next }
