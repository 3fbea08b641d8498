package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes shared by every command.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// App carries everything a command may touch of the outside world, so that
// tests run commands without os.* (k6's habit).
type App struct {
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	Getenv  func(string) string
	Environ func() []string
	// ReadFile reads user files (configs, datasets); nil means os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// StderrIsTerminal chooses readable progress over JSON lines.
	StderrIsTerminal bool
	// ctx is Run's context, so reading user files stops on Ctrl-C.
	ctx context.Context
}

// exitCoder is implemented by errors that know their exit code; packages
// below cmd/rllm mark user-fixable (config, usage) errors this way without
// importing anything from here.
type exitCoder interface{ ExitCode() int }

// usageError is a command-line mistake: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) ExitCode() int { return exitUsage }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// context is Run's context (Background outside Run).
func (a *App) context() context.Context {
	if a.ctx == nil {
		return context.Background()
	}
	return a.ctx
}

// Run executes the command line and returns the process exit code.
func (a *App) Run(ctx context.Context, args []string) int {
	a.ctx = ctx
	root := newRootCmd(a)
	root.SetArgs(args)
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	// Configuration errors come several at once, one per line.
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(a.Stderr, "rllm: "+line)
	}
	return exitCode(ctx, err)
}

func exitCode(ctx context.Context, err error) int {
	var ec exitCoder
	switch {
	case errors.As(err, &ec):
		return ec.ExitCode()
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return exitInterrupted
	}
	return exitFailure
}

func newRootCmd(a *App) *cobra.Command {
	root := &cobra.Command{
		Use:           "rllm",
		Short:         "Train LLM agents with reinforcement learning",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &usageError{msg: err.Error()}
	})
	root.AddCommand(
		newServeCmd(a),
		newSFTCmd(a),
		newTrainCmd(a),
		newValidateConfigCmd(a),
		newConfigCmd(a),
		newTokenizeCmd(a),
		newVersionCmd(a),
		newListCmd(a),
		newDataCmd(a),
		newEvalCmd(a),
	)
	return root
}
