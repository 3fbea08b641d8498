//go:build !linux

package procgroup

import "os/exec"

// Supervise does nothing here: the supervisor needs Linux's child
// subreaper. The program still runs in a process group of its own, which
// Kill and a cancelled context kill.
func Supervise(*exec.Cmd) {}

func supervised(*exec.Cmd) bool { return false }

func killSupervised(cmd *exec.Cmd) error { return killGroup(cmd) }
