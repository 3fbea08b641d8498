package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// MaxTreeBytes bounds what ReadTree reads: a workspace's seed files, a
// task's tests or solution.
const MaxTreeBytes = 64 << 20

// ReadTree reads every regular file under the host directory dir (at most
// MaxTreeBytes in all), keeping their permission bits, as Files to copy
// into a workspace (Workspace.CopyIn).
func ReadTree(dir string) ([]File, error) {
	var files []File
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if total += fi.Size(); total > MaxTreeBytes {
			return fmt.Errorf("%s holds more than %d MiB of files", dir, MaxTreeBytes>>20)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files = append(files, File{Name: filepath.ToSlash(rel), Mode: fi.Mode().Perm(), Data: b})
		return nil
	})
	return files, err
}
