package frozenlake

import (
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// Options shape a generated FrozenLake dataset.
type Options struct {
	MinSize, MaxSize int
	MinP, MaxP       float64
}

// DefaultOptions are rLLM's FrozenLake dataset ranges: sizes 2 to 10,
// frozen-cell probability 0.6 to 0.85.
var DefaultOptions = Options{MinSize: 2, MaxSize: 10, MinP: 0.6, MaxP: 0.85}

// Generate returns n task rows (seed, size, p) drawn with seed; each row
// is one solvable lake when the env builds it.
func Generate(n int, seed uint64, o Options) ([]episode.Task, error) {
	if o.MinSize < 2 || o.MaxSize < o.MinSize || o.MaxSize > 64 || !(o.MinP > 0) || o.MaxP < o.MinP || o.MaxP > 1 {
		return nil, fmt.Errorf("frozenlake options %+v: need 2 ≤ min size ≤ max size ≤ 64 and 0 < min p ≤ max p ≤ 1", o)
	}
	rng := rand.New(rand.NewPCG(seed, 0x66726f7a)) // "froz"
	out := make([]episode.Task, n)
	for i := range out {
		size := o.MinSize + rng.IntN(o.MaxSize-o.MinSize+1)
		p := o.MinP + rng.Float64()*(o.MaxP-o.MinP)
		p = float64(int(p*1000)) / 1000 // keep rows readable
		out[i] = episode.Task{
			"id":          "frozenlake-" + strconv.Itoa(i),
			"seed":        rng.IntN(1 << 31),
			"size":        size,
			"p":           p,
			"data_source": "frozenlake",
		}
	}
	return out, nil
}
