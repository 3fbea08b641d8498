package sampler

import (
	"context"
	"testing"
)

type recordSeeds struct{ seeds []int64 }

func (r *recordSeeds) Sample(_ context.Context, req Request) (Response, error) {
	if req.Params.Seed != nil {
		r.seeds = append(r.seeds, *req.Params.Seed)
	}
	return Response{}, nil
}

func TestSeededDerivesDistinctReproducibleSeeds(t *testing.T) {
	base := int64(1)
	req := Request{Params: Params{Seed: &base}}
	run := func(order []string) map[string][]int64 {
		rec := &recordSeeds{}
		s := Seeded(rec, 7)
		got := map[string][]int64{}
		for _, key := range order {
			rec.seeds = nil
			s.Sample(WithStream(context.Background(), key), req)
			got[key] = append(got[key], rec.seeds...)
		}
		return got
	}
	a := run([]string{"t:0#1", "t:1#1", "t:0#1", "t:1#1"})
	b := run([]string{"t:1#1", "t:1#1", "t:0#1", "t:0#1"}) // another interleaving
	for _, key := range []string{"t:0#1", "t:1#1"} {
		if len(a[key]) != 2 || a[key][0] != b[key][0] || a[key][1] != b[key][1] {
			t.Errorf("%s: seeds %v and %v depend on the interleaving", key, a[key], b[key])
		}
		if a[key][0] == a[key][1] {
			t.Errorf("%s: two turns got the same seed", key)
		}
	}
	if a["t:0#1"][0] == a["t:1#1"][0] {
		t.Error("two samples of one group got the same seed")
	}
	if base != 1 {
		t.Error("the caller's seed was modified")
	}
	for _, s := range append(a["t:0#1"], a["t:1#1"]...) {
		if s < 0 || s >= 1<<31 {
			t.Errorf("seed %d out of [0, 2^31)", s)
		}
	}
	// Unseeded requests pass through unchanged.
	rec := &recordSeeds{}
	Seeded(rec, 7).Sample(context.Background(), Request{})
	if len(rec.seeds) != 0 {
		t.Error("an unseeded request got a seed")
	}
}
