package main

import "golang.org/x/sys/unix"

// makeUndumpable clears the process's dumpable flag: its /proc/PID files
// (environ, mem, fd, maps...) then belong to root and ptrace is refused,
// so a program rllm runs as the same user (an agent program, an exec env,
// code a model wrote) cannot read rllm's environment, TINKER_API_KEY
// included, although its own environment is clean. Root reads them
// anyway (docs/gateway.md). Children get the flag back at exec.
func makeUndumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
