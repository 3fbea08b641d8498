package config

import (
	"fmt"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Origin says which layer set a value, precisely enough for a user to go
// and change it.
type Origin struct {
	// Layer is one of "default", "file", "env", "set", "arg", "api".
	Layer string `json:"layer"`
	// Source is the file path, the variable name or the override as typed.
	Source string `json:"source"`
	// Line is the 1-based line in Source when it is a file.
	Line int `json:"line,omitempty"`
}

func (o Origin) String() string {
	switch o.Layer {
	case "default", "file":
		if o.Line > 0 {
			return fmt.Sprintf("%s:%d", o.Source, o.Line)
		}
		return o.Source
	case "env":
		return "environment variable " + o.Source
	case "set":
		return "--set " + o.Source
	case "arg":
		return "argument " + o.Source
	case "api":
		return "override " + o.Source
	}
	return o.Source
}

// newError is one configuration problem: which key, where it was set,
// and what is wrong with it (the message says how to fix it). A problem
// in a file is named "file:line: key: msg"; one from an override or a
// variable "key: msg (from where)".
func newError(key string, o Origin, msg string) *usererr.Error {
	inFile := o.Layer == "file" || o.Layer == "default"
	var subject []string
	if inFile || (key == "" && o.Layer != "") {
		subject = append(subject, o.String())
	}
	if key != "" {
		subject = append(subject, key)
	}
	if key != "" && o.Layer != "" && !inFile {
		msg += " (from " + o.String() + ")"
	}
	return &usererr.Error{Subject: strings.Join(subject, ": "), Msg: msg}
}

// KeyError is the error about key set at o, worded as Load words its own
// (for callers that check values Load cannot, such as component args).
func KeyError(key string, o Origin, msg string) *usererr.Error { return newError(key, o, msg) }

// Errors is every problem found in one load, reported together (one per
// line) so a user fixes them in one go. Each is a *usererr.Error, which
// carries the exit code (2); Unwrap lets usererr.ExitCode find it.
type Errors []*usererr.Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap exposes each problem to errors.As and errors.Is.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

func (es *Errors) add(key string, o Origin, format string, args ...any) {
	*es = append(*es, newError(key, o, fmt.Sprintf(format, args...)))
}
