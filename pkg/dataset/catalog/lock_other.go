//go:build !unix

package catalog

import "os"

// Without flock the lock is the lock file's existence: tryLock is called
// on a file the caller created with O_EXCL (see lock), so holding the file
// is holding the lock; unlocking removes it. A writer killed while
// holding it leaves the file, which the lock error names.
func tryLock(*os.File) (bool, error) { return true, nil }

func unlockFile(*os.File) error { return nil }

const lockRemovesFile = true
