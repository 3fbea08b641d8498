package config

import (
	"fmt"
	"strings"
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

// Error is one configuration problem: which key, where it was set, and
// what is wrong with it (the message says how to fix it).
type Error struct {
	Key    string
	Origin Origin
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	inFile := e.Origin.Layer == "file" || e.Origin.Layer == "default"
	if inFile || (e.Key == "" && e.Origin.Layer != "") {
		fmt.Fprintf(&b, "%s: ", e.Origin)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, "%s: ", e.Key)
	}
	b.WriteString(e.Msg)
	if e.Key != "" && e.Origin.Layer != "" && !inFile {
		fmt.Fprintf(&b, " (from %s)", e.Origin)
	}
	return b.String()
}

// ExitCode marks configuration errors as usage errors (exit code 2).
func (e *Error) ExitCode() int { return 2 }

// Errors is every problem found in one load, reported together so a user
// fixes them in one go.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// ExitCode marks configuration errors as usage errors (exit code 2).
func (es Errors) ExitCode() int { return 2 }

func (es *Errors) add(key string, o Origin, format string, args ...any) {
	*es = append(*es, &Error{Key: key, Origin: o, Msg: fmt.Sprintf(format, args...)})
}

func (es Errors) err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}
