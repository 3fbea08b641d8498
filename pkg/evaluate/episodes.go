package evaluate

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rllm-org/rllm-go/pkg/episodestore"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// CheckEpisodesPath refuses an --episodes path that is one of the inputs
// (a dataset or a config file) and, without force, an existing file that
// is not an episodes file rllm wrote: eval replaces it whole. A new file
// needs its directory to exist.
func CheckEpisodesPath(path string, data, configs []string, force bool) error {
	info, err := os.Stat(path)
	if err != nil {
		dir := filepath.Dir(path)
		if _, derr := os.Stat(dir); errors.Is(derr, fs.ErrNotExist) {
			return usererr.Errorf("--episodes %s: the directory %s does not exist; create it first", path, dir)
		}
		return nil // a new file
	}
	if info.IsDir() {
		return usererr.Errorf("--episodes %s is a directory; give a file name", path)
	}
	for _, in := range data {
		if fi, err := os.Stat(in); err == nil && os.SameFile(info, fi) {
			return usererr.Errorf("--episodes %s is also an input (--data %s); writing episodes there would destroy the dataset: choose another file", path, in)
		}
	}
	for _, in := range configs {
		if fi, err := os.Stat(in); err == nil && os.SameFile(info, fi) {
			return usererr.Errorf("--episodes %s is also an input (--config %s); choose another file", path, in)
		}
	}
	if force || info.Size() == 0 {
		return nil
	}
	ours, err := episodestore.IsEpisodesFile(path)
	if err != nil {
		return usererr.Errorf("--episodes %s exists and cannot be read (%v); choose another file", path, err)
	}
	if !ours {
		return usererr.Errorf("--episodes %s exists and does not hold episodes written by rllm; choose another file, or pass --force to replace it", path)
	}
	return nil
}
