package dataset

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func numberedTasks(n int) []episode.Task {
	tasks := make([]episode.Task, n)
	for i := range tasks {
		tasks[i] = episode.Task{"i": i}
	}
	return tasks
}

// ids flattens batches to the task numbers they hold.
func ids(batches ...Batch) []int {
	var out []int
	for _, b := range batches {
		for _, t := range b.Tasks {
			out = append(out, t["i"].(int))
		}
	}
	return out
}

func take(l *Loader, n int) []Batch {
	out := make([]Batch, n)
	for i := range out {
		out[i] = l.Next()
	}
	return out
}

func TestLoaderEpochs(t *testing.T) {
	tests := []struct {
		n, batch     int
		shuffle      bool
		dropLast     bool
		wantBatches  int
		wantLastSize int
	}{
		{10, 3, true, false, 4, 1},
		{10, 3, true, true, 3, 3},
		{10, 5, false, false, 2, 5},
		{10, 10, true, true, 1, 10},
		{10, 25, true, false, 1, 10},
		{1, 1, true, false, 1, 1},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("n%d_b%d_shuffle%v_drop%v", tt.n, tt.batch, tt.shuffle, tt.dropLast)
		t.Run(name, func(t *testing.T) {
			l, err := NewLoader(numberedTasks(tt.n), LoaderOptions{BatchSize: tt.batch, Shuffle: tt.shuffle, Seed: 7, DropLast: tt.dropLast})
			must(t, err)
			if got := l.BatchesPerEpoch(); got != tt.wantBatches {
				t.Fatalf("BatchesPerEpoch = %d, want %d", got, tt.wantBatches)
			}
			var orders [][]int
			for epoch := range 3 {
				batches := take(l, tt.wantBatches)
				for i, b := range batches {
					if b.Epoch != epoch || b.Index != i {
						t.Fatalf("batch %d of epoch %d says epoch %d index %d", i, epoch, b.Epoch, b.Index)
					}
					want := tt.batch
					if i == len(batches)-1 {
						want = tt.wantLastSize
					}
					if len(b.Tasks) != want {
						t.Errorf("epoch %d batch %d has %d tasks, want %d", epoch, i, len(b.Tasks), want)
					}
				}
				order := ids(batches...)
				seen := map[int]bool{}
				for _, i := range order {
					if seen[i] {
						t.Fatalf("epoch %d hands out task %d twice", epoch, i)
					}
					seen[i] = true
				}
				if !tt.dropLast && len(seen) != tt.n {
					t.Fatalf("epoch %d covers %d of %d tasks", epoch, len(seen), tt.n)
				}
				if !tt.shuffle && !slices.IsSorted(order) {
					t.Errorf("unshuffled epoch %d is out of order: %v", epoch, order)
				}
				orders = append(orders, order)
			}
			if tt.shuffle && tt.n >= 10 && reflect.DeepEqual(orders[0], orders[1]) && reflect.DeepEqual(orders[1], orders[2]) {
				t.Errorf("three epochs in the same order: %v", orders[0])
			}
		})
	}
}

func TestLoaderSeeds(t *testing.T) {
	order := func(seed uint64) []int {
		l, err := NewLoader(numberedTasks(100), LoaderOptions{BatchSize: 100, Shuffle: true, Seed: seed})
		must(t, err)
		return ids(l.Next())
	}
	if a, b := order(1), order(1); !reflect.DeepEqual(a, b) {
		t.Error("the same seed gave two orders")
	}
	if a, b := order(1), order(2); reflect.DeepEqual(a, b) {
		t.Error("seeds 1 and 2 gave the same order")
	}
}

// TestLoaderResume stops a run after k batches, saves the state through
// JSON as a checkpoint would, restores it into a fresh loader built with
// other options, and checks the next batches are the uninterrupted run's.
func TestLoaderResume(t *testing.T) {
	const after = 12
	for _, opts := range []LoaderOptions{
		{BatchSize: 4, Shuffle: true, Seed: 42},
		{BatchSize: 4, Shuffle: true, Seed: 42, DropLast: true},
		{BatchSize: 3, Shuffle: false},
		{BatchSize: 10, Shuffle: true, Seed: 0},
	} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			tasks := numberedTasks(10)
			for k := range 9 { // stop at every point of the first epochs, boundaries included
				straight, err := NewLoader(tasks, opts)
				must(t, err)
				want := take(straight, k+after)[k:]

				first, err := NewLoader(tasks, opts)
				must(t, err)
				take(first, k)
				saved, err := json.Marshal(first.State())
				must(t, err)

				var state LoaderState
				must(t, json.Unmarshal(saved, &state))
				other := opts
				other.Seed, other.Shuffle = opts.Seed+99, !opts.Shuffle // the state must win
				resumed, err := NewLoader(tasks, other)
				must(t, err)
				must(t, resumed.Restore(state))
				got := take(resumed, after)
				if !reflect.DeepEqual(ids(got...), ids(want...)) {
					t.Fatalf("resumed after %d batches:\n got %v\nwant %v", k, ids(got...), ids(want...))
				}
				for i := range got {
					if got[i].Epoch != want[i].Epoch || got[i].Index != want[i].Index {
						t.Fatalf("resumed batch %d is epoch %d index %d, want %d/%d", i, got[i].Epoch, got[i].Index, want[i].Epoch, want[i].Index)
					}
				}
			}
		})
	}
}

func TestLoaderStateJSON(t *testing.T) {
	l, err := NewLoader(numberedTasks(5), LoaderOptions{BatchSize: 2, Shuffle: true, Seed: 3})
	must(t, err)
	take(l, 4)
	b, err := json.Marshal(l.State())
	must(t, err)
	if got, want := string(b), `{"epoch":1,"position":2,"seed":3,"shuffle":true,"num_tasks":5}`; got != want {
		t.Errorf("state JSON %s, want %s", got, want)
	}
}

func TestLoaderErrors(t *testing.T) {
	tests := []struct {
		name  string
		n     int
		opts  LoaderOptions
		state *LoaderState
		want  string
	}{
		{"zero batch", 5, LoaderOptions{}, nil, "batch size must be at least 1, got 0"},
		{"empty dataset", 0, LoaderOptions{BatchSize: 1}, nil, "the dataset has no tasks"},
		{"drop_last too big", 5, LoaderOptions{BatchSize: 6, DropLast: true}, nil, "batch size 6 is larger than the dataset (5 tasks) and drop_last is set, so there would be no batch; lower the batch size"},
		{"other dataset", 5, LoaderOptions{BatchSize: 2}, &LoaderState{NumTasks: 6}, "the saved dataloader state is for 6 tasks but the dataset has 5; resume with the same dataset or start a new run"},
		{"bad position", 5, LoaderOptions{BatchSize: 2}, &LoaderState{NumTasks: 5, Position: 6}, "the saved dataloader state (epoch 0, position 6) is out of range for 5 tasks"},
		{"bad epoch", 5, LoaderOptions{BatchSize: 2}, &LoaderState{NumTasks: 5, Epoch: -1}, "the saved dataloader state (epoch -1, position 0) is out of range for 5 tasks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewLoader(numberedTasks(tt.n), tt.opts)
			if tt.state != nil {
				must(t, err)
				err = l.Restore(*tt.state)
			}
			assertUserError(t, err, tt.want)
		})
	}
}

// TestUniform checks the bounded draw stays in range and is close to
// uniform; the generator is seeded, so the counts are fixed and the bound
// (6 standard deviations) only fails if the method is biased.
func TestUniform(t *testing.T) {
	src := rand.NewPCG(1, 2)
	for _, n := range []uint64{1, 2, 3, 7, 1 << 32, 1<<63 + 5} {
		for range 1000 {
			if v := uniform(src, n); v >= n {
				t.Fatalf("uniform(%d) = %d", n, v)
			}
		}
	}
	const n, draws = 6, 60000
	var counts [n]int
	for range draws {
		counts[uniform(src, n)]++
	}
	for v, c := range counts {
		if c < draws/n-600 || c > draws/n+600 {
			t.Errorf("value %d drawn %d times of %d", v, c, draws)
		}
	}
}
