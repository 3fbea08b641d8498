// Package sandbox runs untrusted code (a model's program, a test harness,
// a code-interpreter call) inside an existing sandbox engine and never on
// the host: bubblewrap (backend bwrap, the default where it is installed)
// or a Docker container (backend docker, through the Docker Engine API).
// The unsafe-host backend runs on the host with the same rlimits and is
// only ever used when a user names it.
//
// Every run gets a fresh work directory holding the request's files, the
// request's stdin and nothing of the host's environment; CPU time,
// memory, processes, file size and output are bounded, the wall time is
// enforced by killing the whole process tree, and the result says which
// limit, if any, ended the run. A Pool bounds how many runs execute at
// once and serves waiting runs first come, first served.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"
)

// Logger receives the sandbox's notes (once per process: which limits
// bound each process rather than the whole sandbox).
var Logger = slog.Default()

// Backend names (sandbox.backend).
const (
	BackendAuto       = "auto"
	BackendBwrap      = "bwrap"
	BackendDocker     = "docker"
	BackendUnsafeHost = "unsafe-host"
)

// Backends lists the values sandbox.backend accepts.
var Backends = []string{BackendAuto, BackendBwrap, BackendDocker, BackendUnsafeHost}

// WorkDir is the work directory inside the sandbox: the request's files
// are written there and the command starts there.
const WorkDir = "/work"

// Limits bound one run. A zero field takes the pool's default
// (sandbox.limits.*); Request.Limits can only tighten what the user
// configured, never loosen it (see Limits.Within).
type Limits struct {
	// WallTime kills the whole process tree when it passes.
	WallTime time.Duration
	// CPUTime is RLIMIT_CPU (whole seconds, rounded up): the process
	// gets SIGXCPU, then SIGKILL a second later.
	CPUTime time.Duration
	// MemoryBytes bounds the memory of the whole run, every process
	// together (a cgroup, where one can be made: see NewCgroup), and
	// the address space of each process (RLIMIT_AS).
	MemoryBytes int64
	// Processes bounds the processes and threads of the whole run at
	// once (a cgroup's pids.max), and RLIMIT_NPROC.
	Processes int
	// FileSizeBytes is RLIMIT_FSIZE, the largest file a process may
	// write; it also sizes the work directory's tmpfs (bwrap, docker).
	FileSizeBytes int64
	// OutputBytes caps stdout and stderr each; a run that writes more
	// is killed and reported with LimitOutput.
	OutputBytes int64
	// DiskBytes bounds what a docker workspace writes into its own
	// container layer, all files together (WorkspaceSpec.Limits; checked
	// every second, the workspace is killed past it). No config key: a
	// task's limits set it.
	DiskBytes int64
	// MilliCPUs is the CPU share of a docker container in thousandths
	// of a CPU (1000: one CPU).
	MilliCPUs int64
}

// DefaultLimits are sandbox.limits' defaults (configs/default.yaml).
var DefaultLimits = Limits{
	WallTime:      30 * time.Second,
	CPUTime:       10 * time.Second,
	MemoryBytes:   1 << 30,
	Processes:     64,
	FileSizeBytes: 16 << 20,
	OutputBytes:   1 << 20,
	DiskBytes:     1 << 30,
	MilliCPUs:     1000,
}

// Within returns l with every zero field taken from max and every field
// larger than max's lowered to it.
func (l Limits) Within(max Limits) Limits {
	return l.merge(max, func(v, m int64) int64 {
		if v <= 0 || (m > 0 && v > m) {
			return m
		}
		return v
	})
}

// OrDefaults returns l with every zero field taken from DefaultLimits;
// a field set above its default keeps its value (sandbox.limits may
// raise any limit).
func (l Limits) OrDefaults() Limits {
	return l.Or(DefaultLimits)
}

// Or returns l with every zero field taken from o.
func (l Limits) Or(o Limits) Limits {
	return l.merge(o, func(v, d int64) int64 {
		if v <= 0 {
			return d
		}
		return v
	})
}

// merge combines each field of l with the same field of o by pick.
func (l Limits) merge(o Limits, pick func(v, o int64) int64) Limits {
	return Limits{
		WallTime:      time.Duration(pick(int64(l.WallTime), int64(o.WallTime))),
		CPUTime:       time.Duration(pick(int64(l.CPUTime), int64(o.CPUTime))),
		MemoryBytes:   pick(l.MemoryBytes, o.MemoryBytes),
		Processes:     int(pick(int64(l.Processes), int64(o.Processes))),
		FileSizeBytes: pick(l.FileSizeBytes, o.FileSizeBytes),
		OutputBytes:   pick(l.OutputBytes, o.OutputBytes),
		DiskBytes:     pick(l.DiskBytes, o.DiskBytes),
		MilliCPUs:     pick(l.MilliCPUs, o.MilliCPUs),
	}
}

// Check reports the first limit that is not positive, by its key under
// sandbox.limits.
func (l Limits) Check() error {
	for _, f := range []struct {
		key   string
		value int64
	}{
		{"wall_time_s", int64(l.WallTime)},
		{"cpu_time_s", int64(l.CPUTime)},
		{"memory_mb", l.MemoryBytes},
		{"processes", int64(l.Processes)},
		{"file_size_mb", l.FileSizeBytes},
		{"output_kb", l.OutputBytes},
	} {
		if f.value <= 0 {
			return fmt.Errorf("%s must be positive", f.key)
		}
	}
	return nil
}

// Request is one run: a command started in WorkDir with Files written
// there first and Stdin on its standard input.
type Request struct {
	// Command is the argv; Command[0] is looked up in the sandbox's
	// PATH (sandbox.env.PATH).
	Command []string
	// Files maps a path relative to WorkDir to its content.
	Files map[string][]byte
	Stdin []byte
	// Stream, when set, makes stdin and stdout a conversation with the
	// program instead of Stdin and Result.Stdout (Stdin must be empty).
	Stream *Stream
	// Limits tighten the pool's limits for this run (zero: the pool's).
	Limits Limits
}

// Stream is a run's standard input and output as they come: a program
// that answers messages (the code rewards' reply and judge harnesses)
// talks with its caller while it runs.
type Stream struct {
	// In is copied to the program's stdin as it is read; its end (EOF)
	// closes the program's stdin.
	In io.Reader
	// Out receives the program's stdout as it is written, until the run
	// ends; none of it is kept in Result.Stdout, and OutputBytes does not
	// bound it (the reader bounds what it takes). Stderr is as without a
	// stream.
	Out io.Writer
}

// start begins every backend's Run: it checks the request and returns
// the limits the run gets: the request's (which the pool has already
// bounded by sandbox.limits), with DefaultLimits for any left zero.
func (r Request) start() (Limits, error) {
	if err := r.Check(); err != nil {
		return Limits{}, err
	}
	return r.Limits.OrDefaults(), nil
}

// Check validates the request's shape (not its content, which is
// untrusted and runs whatever it is).
func (r Request) Check() error {
	if len(r.Command) == 0 || r.Command[0] == "" {
		return errors.New("sandbox: empty command")
	}
	if r.Stream != nil && (r.Stream.In == nil || r.Stream.Out == nil || len(r.Stdin) > 0) {
		return errors.New("sandbox: a stream needs In and Out, and no Stdin besides")
	}
	for name := range r.Files {
		if !validFileName(name) {
			return fmt.Errorf("sandbox: file name %q must be a relative path inside the work directory", name)
		}
	}
	return nil
}

func validFileName(name string) bool {
	if name == "" || strings.HasPrefix(name, "/") || strings.ContainsAny(name, "\x00") {
		return false
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return true
}

// sortedFiles lists the request's file names, parents before children.
func (r Request) sortedFiles() []string {
	names := make([]string, 0, len(r.Files))
	for n := range r.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Limit names the limit that ended a run.
type Limit string

// The limits a run can hit. LimitNone: the program ended by itself.
const (
	LimitNone      Limit = ""
	LimitWallTime  Limit = "wall_time"
	LimitCPUTime   Limit = "cpu_time"
	LimitMemory    Limit = "memory"
	LimitProcesses Limit = "processes"
	LimitFileSize  Limit = "file_size"
	LimitOutput    Limit = "output"
	LimitDisk      Limit = "disk"
)

// Result is what a run gave. A program that fails (non-zero exit, a
// signal, a limit) is a Result, not an error: errors are reserved for
// the sandbox itself failing to run it.
type Result struct {
	// ExitCode is the program's exit status; a program killed by
	// signal N reports 128+N, as a shell does.
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	// Time is the wall time from start to the end of the whole tree.
	Time time.Duration
	// Limit is the limit that ended the run, if any. Memory is the
	// cgroup's count of processes it killed for memory, where the run
	// has a cgroup; processes, the cgroup's count of refused forks in a
	// run that failed. Otherwise memory, processes and file size are
	// inferred from the program's own error (an allocation, fork or
	// write that failed) and may be missed when the program hides it.
	Limit Limit
	// Net is what a workspace's network forwarder counted (nil without
	// a network): the connections it relayed and those the sandbox
	// refused.
	Net *NetReport
}

// OK reports a run that exited 0 within its limits.
func (r Result) OK() bool { return r.ExitCode == 0 && r.Limit == LimitNone }

// Reason is a one-line explanation of a run that was not OK: the limit
// hit, or the exit status and the last line of stderr.
func (r Result) Reason() string {
	switch r.Limit {
	case LimitWallTime:
		return "time limit exceeded (wall time)"
	case LimitCPUTime:
		return "time limit exceeded (CPU time)"
	case LimitMemory:
		return "memory limit exceeded"
	case LimitProcesses:
		return "process limit exceeded"
	case LimitFileSize:
		return "file size limit exceeded"
	case LimitOutput:
		return "output limit exceeded"
	case LimitDisk:
		return "disk limit exceeded"
	}
	if r.ExitCode == 0 {
		return ""
	}
	msg := fmt.Sprintf("exit status %d", r.ExitCode)
	if r.ExitCode > 128 && r.ExitCode < 128+65 {
		msg = fmt.Sprintf("killed by signal %d", r.ExitCode-128)
	}
	if l := lastLine(r.Stderr); l != "" {
		msg += ": " + l
	}
	return msg
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if len(l) > 200 {
		l = l[:200] + "…"
	}
	return l
}

// Runner runs requests: a backend, or a Pool in front of one.
type Runner interface {
	// Run executes req to its end or its limits and returns what it
	// gave. Cancelling ctx kills the run (Run returns ctx's error).
	Run(ctx context.Context, req Request) (Result, error)
}

// Backend is one sandbox engine.
type Backend interface {
	Runner
	// Name is the backend's sandbox.backend value.
	Name() string
	// Close releases what the backend holds (a client connection).
	Close() error
}
