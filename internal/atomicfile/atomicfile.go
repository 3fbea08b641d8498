// Package atomicfile is rllm's one way to write a file or a directory so
// that a reader (or a resumed run after a crash) sees either the old
// content or the whole new one: write to a temporary name in the same
// directory, fsync, rename over the target, fsync the directory. It also
// holds the one permission policy for what rllm writes: files 0644 and
// directories 0755 (never world-writable), and SecretMode 0600 for the
// one kind of secret rllm writes: a token it made itself (WriteSecret).
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// Permission policy for everything rllm writes.
const (
	FileMode   os.FileMode = 0o644
	DirMode    os.FileMode = 0o755
	SecretMode os.FileMode = 0o600
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
func Create(path string) (*File, error) { return create(path, FileMode) }

func create(path string, mode os.FileMode) (*File, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, TempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return nil, err
	}
	if err := tmp.Chmod(mode); err != nil {
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

// WriteSecret writes data to path atomically with mode 0600 (readable by
// its owner only) from its first byte on: the file is never readable by
// others, not even under its temporary name.
func WriteSecret(path string, data []byte) error { return WriteFileMode(path, data, SecretMode) }

// WriteFileMode writes data to path atomically with the permission bits
// mode from its first byte on (an executable: 0o755).
func WriteFileMode(path string, data []byte, mode os.FileMode) error {
	f, err := create(path, mode)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Commit()
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
// the final path and renames the new one into place. It takes three
// renames, each a state CleanTemp recovers from after a crash:
//
//  1. the built directory becomes CommitPrefix+NAME+".new": complete, it
//     will be rolled forward;
//  2. the directory at the final path, if any, becomes
//     CommitPrefix+NAME+".old";
//  3. ".new" becomes the final path; then ".old" is removed.
//
// A crash before 1 leaves an incomplete temporary directory (removed); at
// any later point CleanTemp finishes the commit, so the final path always
// ends with the old or the new directory, never with neither.
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
	parent := filepath.Dir(d.path)
	newPath, _ := commitPaths(d.path)
	if err == nil {
		// A stale ".new" of a commit that never finished is replaced.
		if err = os.RemoveAll(newPath); err == nil {
			err = os.Rename(d.tmp, newPath)
		}
	}
	if err != nil {
		os.RemoveAll(d.tmp)
		return fmt.Errorf("writing %s: %w", d.path, err)
	}
	if err := syncDir(parent); err != nil {
		return err
	}
	if crashAt("new") {
		return errCrash
	}
	return finishCommit(d.path, crashAt)
}

// CommitPrefix starts the names Dir.Commit gives a directory between its
// renames: CommitPrefix+NAME+".new" and CommitPrefix+NAME+".old".
const CommitPrefix = ".rllm-commit-"

func commitPaths(path string) (newPath, oldPath string) {
	base := filepath.Join(filepath.Dir(path), CommitPrefix+filepath.Base(path))
	return base + ".new", base + ".old"
}

// finishCommit completes a commit whose ".new" directory exists: the
// current directory goes to ".old", ".new" into place, ".old" away.
func finishCommit(path string, crash func(string) bool) error {
	newPath, oldPath := commitPaths(path)
	parent := filepath.Dir(path)
	if _, err := os.Lstat(path); err == nil {
		if _, err := os.Lstat(oldPath); err == nil {
			// An ".old" already there is older still: path is newer.
			if err := os.RemoveAll(oldPath); err != nil {
				return fmt.Errorf("writing %s: %w", path, err)
			}
		}
		if err := os.Rename(path, oldPath); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		if err := syncDir(parent); err != nil {
			return err
		}
	}
	if crash("old") {
		return errCrash
	}
	if err := os.Rename(newPath, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := syncDir(parent); err != nil {
		return err
	}
	if crash("renamed") {
		return errCrash
	}
	if err := os.RemoveAll(oldPath); err != nil {
		return fmt.Errorf("removing the replaced %s: %w", oldPath, err)
	}
	return nil
}

// crashAt, in tests, stops Commit at a point as a crash would.
var crashAt = func(string) bool { return false }

var errCrash = errors.New("atomicfile: simulated crash")

// Abort removes the temporary directory.
func (d *Dir) Abort() {
	if d.done {
		return
	}
	d.done = true
	os.RemoveAll(d.tmp)
}

// CleanTemp finishes what a killed process left directly under dir: a
// directory commit interrupted between its renames is completed (its new
// directory was whole, see Dir.Commit), and temporary files and
// directories are removed. It returns how many entries it removed or
// recovered.
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
		name, ok := strings.CutPrefix(e.Name(), CommitPrefix)
		if !ok {
			continue
		}
		switch {
		case strings.HasSuffix(name, ".new"):
			// Roll forward: the new directory was complete.
			if err := finishCommit(filepath.Join(dir, strings.TrimSuffix(name, ".new")), func(string) bool { return false }); err != nil {
				return n, err
			}
			n++
		case strings.HasSuffix(name, ".old"):
			target := filepath.Join(dir, strings.TrimSuffix(name, ".old"))
			newPath, oldPath := commitPaths(target)
			if _, err := os.Lstat(newPath); err == nil {
				continue // its ".new" entry finishes it
			}
			if _, err := os.Lstat(target); errors.Is(err, os.ErrNotExist) {
				// Nothing replaced it: put it back.
				if err := os.Rename(oldPath, target); err != nil {
					return n, err
				}
			} else if err := os.RemoveAll(oldPath); err != nil {
				return n, err
			}
			n++
		}
	}
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

// Move puts a finished file written elsewhere in place (a download kept
// under another name so that it can be resumed): its data is synced, it
// is renamed over path, and the rename is made durable.
func Move(from, path string) error {
	if err := syncFile(from); err != nil {
		return err
	}
	if err := os.Rename(from, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// MoveUnsynced renames a finished file over path without syncing its
// data or the rename: a reader sees the old file or the whole new one,
// but after a crash path may be missing, short or hold zeros. It is for
// a file whose content is checked before every use (a content-addressed
// blob checked against its hash), so that what a crash leaves is found
// and fetched again; anything read without such a check goes through
// Move or Write, which make it durable first.
func MoveUnsynced(from, path string) error { return os.Rename(from, path) }

// Symlink makes path a symbolic link to target, replacing whatever link
// was there in one step (a link under a name of its own, renamed over
// path): a reader sees the old link or the new one, never none.
func Symlink(target, path string) error {
	tmp := fmt.Sprintf("%s.%d.%d.tmp", path, os.Getpid(), symlinkSeq.Add(1))
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

var symlinkSeq atomic.Uint64
