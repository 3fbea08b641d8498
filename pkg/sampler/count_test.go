package sampler

import (
	"context"
	"errors"
	"testing"
)

type counting struct{ recordSeeds }

func (counting) CountPromptTokens(_ context.Context, req Request) (int, error) {
	return len(req.PromptIDs) + 100, nil
}

// loop wraps itself.
type loop struct{ recordSeeds }

func (l *loop) Unwrap() Sampler { return l }

func TestCountPromptTokens(t *testing.T) {
	ctx := context.Background()
	req := Request{PromptIDs: []int{1, 2}}
	for name, tc := range map[string]struct {
		s    Sampler
		want int
		err  error
	}{
		"counter":              {&counting{}, 102, nil},
		"through Seeded":       {Seeded(Seeded(&counting{}, 1), 2), 102, nil},
		"no counter":           {Seeded(&recordSeeds{}, 1), 0, ErrCannotCount},
		"a wrapper of itself":  {&loop{}, 0, ErrCannotCount},
		"a plain sampler only": {&recordSeeds{}, 0, ErrCannotCount},
	} {
		n, err := CountPromptTokens(ctx, tc.s, req)
		if n != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s: %d, %v; want %d, %v", name, n, err, tc.want, tc.err)
		}
	}
}
