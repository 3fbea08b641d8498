// Package usererr is rllm's one error type for mistakes a user can fix:
// a bad config key, file, row, flag or URL. It carries the exit code the
// CLI maps it to (2 for usage and configuration), the thing it names and
// the fix, and prints as one plain sentence. It imports nothing of ours,
// so every package, leaf packages included, can return it.
package usererr

import (
	"context"
	"errors"
	"fmt"
)

// Exit codes shared by every command.
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2
	ExitInterrupted = 130
)

// Error is a user-fixable mistake.
type Error struct {
	// Code is the process exit code; 0 means ExitUsage.
	Code int
	// Subject names what is wrong: a config key, "file:line", a row, a URL.
	Subject string
	// Msg says what is wrong; Fix, when set, what would fix it.
	Msg, Fix string
	// Err is the underlying cause or kind, for errors.Is and errors.As.
	Err error
}

// Error prints "subject: msg; fix" with the empty parts left out.
func (e *Error) Error() string {
	s := e.Msg
	if e.Subject != "" {
		s = e.Subject + ": " + s
	}
	if e.Fix != "" {
		s += "; " + e.Fix
	}
	return s
}

// Unwrap exposes the cause.
func (e *Error) Unwrap() error { return e.Err }

// ExitCode is the process exit code for this error.
func (e *Error) ExitCode() int {
	if e.Code == 0 {
		return ExitUsage
	}
	return e.Code
}

// Errorf is a usage/configuration error (exit code 2) whose whole text is
// the formatted sentence. A %w verb wraps a cause.
func Errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{Msg: err.Error(), Err: errors.Unwrap(err)}
}

// Wrap marks err as user-fixable (exit code 2) without changing its text.
// A nil err stays nil.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Msg: err.Error(), Err: err}
}

// ExitCode maps an error to the process exit code, the one mapping every
// command uses: 0 for nil, the code of the *Error in the chain (the only
// error type that carries one), 130 when ctx was cancelled (Ctrl-C) and
// the error is that cancellation, 1 otherwise.
func ExitCode(ctx context.Context, err error) int {
	if err == nil {
		return ExitOK
	}
	var ue *Error
	switch {
	case errors.As(err, &ue):
		return ue.ExitCode()
	case ctx != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, ctx.Err())):
		return ExitInterrupted
	}
	return ExitFailure
}

// Is reports whether err is, or wraps, a user-fixable error.
func Is(err error) bool {
	var ue *Error
	return errors.As(err, &ue) && ue.ExitCode() == ExitUsage
}
