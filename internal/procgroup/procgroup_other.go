//go:build !unix

package procgroup

import "os/exec"

func setGroup(*exec.Cmd) {}

func killGroup(cmd *exec.Cmd) error { return cmd.Process.Kill() }
