//go:build unix

package repotest

import "syscall"

// exists reports whether pid names a process (a zombie included).
func exists(pid int) bool { return syscall.Kill(pid, 0) != syscall.ESRCH }
