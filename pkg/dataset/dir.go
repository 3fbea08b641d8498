package dataset

import (
	"context"
	"os"
	"sync"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// DirFormat reads a dataset that is a directory rather than a file (a
// directory of tasks in the Harbor format: pkg/tasks/harbor registers
// one). ReadAll and Load take such a directory wherever a dataset file is
// expected (data.train_files, rllm eval --data).
type DirFormat struct {
	// Name names the format in messages.
	Name string
	// Is reports whether dir is a dataset of this format.
	Is func(dir string) bool
	// Read returns its rows; errors name the file and line at fault.
	Read func(ctx context.Context, dir string) ([]episode.Task, error)
}

var dirFormats struct {
	mu  sync.Mutex
	all []DirFormat
}

// RegisterDirFormat makes ReadAll read directories of format f. Call it
// from init().
func RegisterDirFormat(f DirFormat) {
	dirFormats.mu.Lock()
	defer dirFormats.mu.Unlock()
	dirFormats.all = append(dirFormats.all, f)
}

// readDir reads path with the directory format that recognises it; ok is
// false when path is not a directory or no format does.
func readDir(ctx context.Context, path string) (rows []episode.Task, ok bool, err error) {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return nil, false, nil
	}
	dirFormats.mu.Lock()
	all := append([]DirFormat(nil), dirFormats.all...)
	dirFormats.mu.Unlock()
	for _, f := range all {
		if f.Is(path) {
			rows, err := f.Read(ctx, path)
			return rows, true, err
		}
	}
	return nil, false, nil
}
