// Package atomicfile is rllm's one way to write a file or a directory so
// that a reader (or a resumed run after a crash) sees either the old
// content or the whole new one: write to a temporary name in the same
// directory, fsync, rename over the target, fsync the directory. It also
// holds the one permission policy for what rllm writes: files 0644 and
// directories 0755 (never world-writable; secrets are never written).
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Permission policy for everything rllm writes.
const (
	FileMode os.FileMode = 0o644
	DirMode  os.FileMode = 0o755
)

// TempPrefix starts the name of every temporary file or directory, so a
// run that was killed can find and remove its leftovers (CleanTemp).
const TempPrefix = ".rllm-tmp-"

// File is a file being written; Commit publishes it, Abort discards it.
// Exactly one of the two must be called (Abort after Commit is a no-op,
// so `defer f.Abort()` is the idiom).
type File struct {
	*os.File
	path string
	done bool
}

// Create starts writing path. Parent directories are created.
func Create(path string) (*File, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, TempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return nil, err
	}
	if err := tmp.Chmod(FileMode); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, err
	}
	return &File{File: tmp, path: path}, nil
}

// Path is the final path the file will have.
func (f *File) Path() string { return f.path }

// Commit flushes the file to disk and renames it over the target.
func (f *File) Commit() error {
	if f.done {
		return errors.New("atomicfile: commit after commit or abort")
	}
	f.done = true
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), f.path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	return syncDir(filepath.Dir(f.path))
}

// Abort discards the file; the target is left untouched.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.Close()
	os.Remove(f.Name())
}

// WriteFile writes data to path atomically.
func WriteFile(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write writes what fill produces to path atomically; on an error from
// fill, path is left untouched.
func Write(path string, fill func(io.Writer) error) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := fill(f); err != nil {
		return err
	}
	return f.Commit()
}

// Dir is a directory being built; Commit renames it to its final path.
type Dir struct {
	tmp, path string
	done      bool
}

// CreateDir starts building the directory path under a temporary name in
// the same parent. Files go into TempPath().
func CreateDir(path string) (*Dir, error) {
	parent := filepath.Dir(path)
	if err := os.MkdirAll(parent, DirMode); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(parent, TempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(tmp, DirMode); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	return &Dir{tmp: tmp, path: path}, nil
}

// TempPath is where the directory's files are written until Commit.
func (d *Dir) TempPath() string { return d.tmp }

// Commit syncs the directory's files, replaces any directory already at
// the final path and renames the new one into place.
func (d *Dir) Commit() error {
	if d.done {
		return errors.New("atomicfile: commit after commit or abort")
	}
	d.done = true
	err := filepath.WalkDir(d.tmp, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		return syncFile(p)
	})
	if err == nil {
		err = syncDir(d.tmp)
	}
	if err == nil {
		if _, serr := os.Stat(d.path); serr == nil {
			old := d.tmp + ".old"
			if err = os.Rename(d.path, old); err == nil {
				defer os.RemoveAll(old)
			}
		}
	}
	if err == nil {
		err = os.Rename(d.tmp, d.path)
	}
	if err != nil {
		os.RemoveAll(d.tmp)
		return fmt.Errorf("writing %s: %w", d.path, err)
	}
	return syncDir(filepath.Dir(d.path))
}

// Abort removes the temporary directory.
func (d *Dir) Abort() {
	if d.done {
		return
	}
	d.done = true
	os.RemoveAll(d.tmp)
}

// CleanTemp removes the temporary files and directories that a killed
// process left directly under dir, and returns how many it removed.
func CleanTemp(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), TempPrefix) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir makes a rename in dir durable. Some filesystems refuse to sync
// a directory; that is not an error worth failing a write over.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) && !isUnsupported(err) {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

func isUnsupported(err error) bool {
	var pe *os.PathError
	return errors.As(err, &pe) && (strings.Contains(pe.Err.Error(), "not supported") || strings.Contains(pe.Err.Error(), "invalid argument"))
}
