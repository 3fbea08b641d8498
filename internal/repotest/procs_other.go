//go:build !unix

package repotest

import "os"

// exists reports whether pid names a process.
func exists(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	p.Release()
	return true
}
