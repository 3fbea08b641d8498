package catalog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// LockFile is the registry's lock, in its directory: every change to a
// dataset.json (register, rm) holds it, so two writers never lose each
// other's splits (Hugging Face's cache locks the same way, a .lock file).
const LockFile = ".lock"

// lockWait bounds how long a writer waits for another.
var lockWait = 2 * time.Minute

// lock takes the registry's lock, waiting for another writer (at most
// lockWait, or until ctx ends); the returned function releases it.
func (c *Catalog) lock(ctx context.Context) (func(), error) {
	if err := os.MkdirAll(c.Dir, atomicfile.DirMode); err != nil {
		return nil, usererr.Errorf("cannot create the dataset registry %s: %v; check data.datasets_dir", c.Dir, err)
	}
	path := filepath.Join(c.Dir, LockFile)
	deadline := time.Now().Add(lockWait)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		f, err := openLock(path)
		if err == nil {
			ok, lerr := tryLock(f)
			if lerr != nil {
				f.Close()
				return nil, fmt.Errorf("locking %s: %w", path, lerr)
			}
			if ok {
				return func() {
					unlockFile(f)
					if lockRemovesFile {
						os.Remove(path)
					}
					f.Close()
				}, nil
			}
			f.Close()
		} else if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("opening the registry lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			return nil, usererr.Errorf("the dataset registry %s is locked by another rllm dataset command (%s) for more than %s; wait for it, or remove %s if no rllm command is running", c.Dir, path, lockWait, path)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
	}
}

func openLock(path string) (*os.File, error) {
	flags := os.O_RDWR | os.O_CREATE
	if lockRemovesFile {
		flags |= os.O_EXCL
	}
	return os.OpenFile(path, flags, atomicfile.FileMode)
}
