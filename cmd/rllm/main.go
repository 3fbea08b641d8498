// Command rllm trains LLM agents with reinforcement learning.
package main

import (
	"os"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

func main() {
	// Inside a sandbox, rllm re-executed as its network forwarder.
	if len(os.Args) > 1 && os.Args[1] == sandbox.ForwardCommand {
		os.Exit(sandbox.ForwardMain(os.Args[2:], os.Stderr))
	}
	if exe, err := os.Executable(); err == nil {
		sandbox.SetSelf(exe)
	}
	if err := makeUndumpable(); err != nil {
		// Not fatal: rllm works, but a same-user program could read its
		// environment through /proc.
		os.Stderr.WriteString("rllm: warning: cannot make the process non-dumpable (" + err.Error() + "); programs running as your user can read rllm's environment through /proc\n")
	}
	app := &App{
		Stdin:   os.Stdin,
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
		Getenv:  os.Getenv,
		Environ: os.Environ,
		// A character device is a terminal; pipes and files are not.
		StderrIsTerminal: isCharDevice(os.Stderr),
	}
	os.Exit(runWithSignals(app, os.Args[1:], os.Exit))
}

func isCharDevice(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
