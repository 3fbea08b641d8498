package dataset

import (
	"fmt"
	"math/bits"
	"math/rand/v2"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// LoaderOptions configure a Loader.
type LoaderOptions struct {
	// BatchSize is the number of tasks per batch (data.train_batch_size).
	BatchSize int
	// Shuffle reorders the tasks at the start of every epoch.
	Shuffle bool
	// Seed makes the shuffles reproducible (data.seed).
	Seed uint64
	// DropLast skips the last batch of an epoch when it is short.
	DropLast bool
}

// LoaderState is where a Loader stands, small enough to save with every
// checkpoint. Restoring it makes a resumed run see exactly the batches the
// interrupted run would have seen next.
type LoaderState struct {
	Epoch int `json:"epoch"`
	// Position is how many tasks of this epoch's order were handed out.
	Position int    `json:"position"`
	Seed     uint64 `json:"seed"`
	Shuffle  bool   `json:"shuffle"`
	// NumTasks guards against resuming on a different dataset.
	NumTasks int `json:"num_tasks"`
}

// Batch is one batch of tasks. Tasks share their maps with the loader's
// task list: treat them as read-only.
type Batch struct {
	Epoch int
	// Index is the batch's position in its epoch, from 0.
	Index int
	Tasks []episode.Task
}

// Loader hands out batches of tasks epoch after epoch.
//
// Shuffling is deterministic and documented so that it can be reproduced
// anywhere: epoch e uses a math/rand/v2 PCG generator seeded with
// (Seed, e) and a Fisher–Yates shuffle of the row indexes 0..n-1 that, for
// i from n-1 down to 1, swaps i with j uniform in [0, i], drawn by Lemire's
// multiply-and-reject method on PCG.Uint64. Only PCG's output (fixed by
// the Go 1 promise for math/rand/v2) is used, so the order does not
// change with Go releases. It differs from PyTorch's randperm: the same
// seed does not give the same order as rLLM/verl.
type Loader struct {
	tasks []episode.Task
	opts  LoaderOptions
	order []int // this epoch's order of task indexes
	epoch int
	pos   int
}

// NewLoader makes a loader over tasks at the start of epoch 0.
func NewLoader(tasks []episode.Task, opts LoaderOptions) (*Loader, error) {
	if opts.BatchSize <= 0 {
		return nil, &Error{Msg: fmt.Sprintf("batch size must be at least 1, got %d", opts.BatchSize)}
	}
	if len(tasks) == 0 {
		return nil, &Error{Msg: "the dataset has no tasks"}
	}
	if opts.DropLast && opts.BatchSize > len(tasks) {
		return nil, &Error{Msg: fmt.Sprintf("batch size %d is larger than the dataset (%d tasks) and drop_last is set, so there would be no batch; lower the batch size", opts.BatchSize, len(tasks))}
	}
	l := &Loader{tasks: tasks, opts: opts, order: make([]int, len(tasks))}
	l.startEpoch(0)
	return l, nil
}

// BatchesPerEpoch is how many batches one epoch yields.
func (l *Loader) BatchesPerEpoch() int {
	n, b := len(l.tasks), l.opts.BatchSize
	if l.opts.DropLast {
		return n / b
	}
	return (n + b - 1) / b
}

// Next returns the next batch; after an epoch's last batch comes the first
// batch of the next epoch, so Next never runs out.
func (l *Loader) Next() Batch {
	if l.epochDone() {
		l.startEpoch(l.epoch + 1)
	}
	end := min(l.pos+l.opts.BatchSize, len(l.tasks))
	b := Batch{Epoch: l.epoch, Index: l.pos / l.opts.BatchSize, Tasks: make([]episode.Task, 0, end-l.pos)}
	for _, i := range l.order[l.pos:end] {
		b.Tasks = append(b.Tasks, l.tasks[i])
	}
	l.pos = end
	return b
}

func (l *Loader) epochDone() bool {
	left := len(l.tasks) - l.pos
	return left == 0 || (l.opts.DropLast && left < l.opts.BatchSize)
}

// State is where the loader stands; the next Next continues from there.
func (l *Loader) State() LoaderState {
	return LoaderState{Epoch: l.epoch, Position: l.pos, Seed: l.opts.Seed, Shuffle: l.opts.Shuffle, NumTasks: len(l.tasks)}
}

// Restore moves the loader to a saved state. The state's seed and shuffle
// setting win over the loader's options, because the point is to replay
// the interrupted run; a state saved over a dataset of another size is an
// *Error. The batch size may differ: batches continue from the position.
func (l *Loader) Restore(s LoaderState) error {
	switch {
	case s.NumTasks != len(l.tasks):
		return &Error{Msg: fmt.Sprintf("the saved dataloader state is for %d tasks but the dataset has %d; resume with the same dataset or start a new run", s.NumTasks, len(l.tasks))}
	case s.Epoch < 0 || s.Position < 0 || s.Position > len(l.tasks):
		return &Error{Msg: fmt.Sprintf("the saved dataloader state (epoch %d, position %d) is out of range for %d tasks", s.Epoch, s.Position, len(l.tasks))}
	}
	l.opts.Seed, l.opts.Shuffle = s.Seed, s.Shuffle
	l.startEpoch(s.Epoch)
	l.pos = s.Position
	return nil
}

func (l *Loader) startEpoch(epoch int) {
	l.epoch, l.pos = epoch, 0
	for i := range l.order {
		l.order[i] = i
	}
	if l.opts.Shuffle {
		shuffle(l.order, l.opts.Seed, uint64(epoch))
	}
}

// shuffle is the documented Fisher–Yates shuffle of Loader.
func shuffle(order []int, seed, epoch uint64) {
	src := rand.NewPCG(seed, epoch)
	for i := len(order) - 1; i > 0; i-- {
		j := int(uniform(src, uint64(i)+1))
		order[i], order[j] = order[j], order[i]
	}
}

// uniform draws from [0, n) without bias (Lemire, "Fast Random Integer
// Generation in an Interval", 2019).
func uniform(src *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(src.Uint64(), n)
	if lo < n {
		threshold := -n % n
		for lo < threshold {
			hi, lo = bits.Mul64(src.Uint64(), n)
		}
	}
	return hi
}
