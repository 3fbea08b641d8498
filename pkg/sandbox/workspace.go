package sandbox

import (
	"context"
	"io/fs"
	"slices"
	"strings"
)

// The container lifecycle shared by every agent that works on a task in
// a sandbox: the built-in tool agent's bash tool, an agent program, a
// coding harness, and the task's verifier after them. One episode opens
// one Workspace, runs any number of commands in it one after another
// (files and, where the engine keeps them, processes persist between
// commands), reads what it needs back, and closes it; Close removes
// everything, on every exit path.
//
// Run (Backend.Run) stays the one-shot path: a fresh sandbox per command,
// used by the code rewards and the python tool.

// Workspace is one episode's long-lived sandbox: a container (docker) or
// a private directory tree mounted at WorkspaceSpec.WorkDir (bwrap). It is
// safe for concurrent use; commands may run at the same time.
type Workspace interface {
	// Exec runs one command in the workspace and waits for it to end
	// or reach its limits. A command that fails is a Result, not an
	// error; errors are the engine failing (the daemon gone, the
	// workspace closed). Cancelling ctx kills the command's processes.
	Exec(ctx context.Context, req ExecRequest) (Result, error)
	// CopyIn writes files under dir (an absolute path inside the
	// workspace), creating parents; through the engine's archive API
	// (docker) or the filesystem (bwrap), never through a command line,
	// so a file's size is bounded only by the workspace's limits.
	CopyIn(ctx context.Context, dir string, files []File) error
	// ReadFile returns the content of the file at path (absolute, inside
	// the workspace), at most max bytes of it; fs.ErrNotExist when there
	// is none.
	ReadFile(ctx context.Context, path string, max int64) ([]byte, error)
	// KillAll kills every process still running in the workspace (what
	// earlier commands left in the background) and keeps the workspace
	// open: a verifier run after it sees the files the agent left, and
	// nothing of the agent that could still change them. Docker restarts
	// the container (every process of it ends, its idle process too, and
	// a new one starts); bwrap has nothing to kill (each command is a
	// sandbox of its own).
	KillAll(ctx context.Context) error
	// ID names the workspace for messages and labels (a container id,
	// a directory).
	ID() string
	// Close kills whatever still runs in the workspace and removes it
	// (the container, its directory); calling it again does nothing.
	Close(ctx context.Context) error
}

// File is one file written into a workspace.
type File struct {
	// Name is relative to the directory it is copied into.
	Name string
	// Mode is its permission bits (0 means 0o644).
	Mode fs.FileMode
	Data []byte
}

// ExecRequest is one command run in a workspace.
type ExecRequest struct {
	// Command is the argv, looked up in the workspace's PATH.
	Command []string
	// Dir is the working directory (absolute); empty is WorkDir.
	Dir string
	// Env adds to or replaces the workspace's environment for this
	// command only, as KEY=value. In PATH, $PATH stands for the
	// workspace's own (a docker workspace's is its image's):
	// PATH=/opt/harness/bin:$PATH puts a directory first and keeps the
	// image's tools.
	Env   []string
	Stdin []byte
	// Stream, when set, is the command's stdin and stdout as they come
	// (see Request.Stream).
	Stream *Stream
	// Limits bound this command: WallTime, CPUTime and OutputBytes act
	// per command; memory, processes and disk are the workspace's
	// (WorkspaceSpec.Limits) and a command cannot raise them.
	Limits Limits
	// User runs this command as another user than the workspace's
	// (WorkspaceSpec.User): a verifier, as the image's user ("0:0" for
	// root). Docker only; bwrap refuses it.
	User string
}

// WorkspaceSpec describes the workspace to open.
type WorkspaceSpec struct {
	// Image is the docker image (a task's built image, or the local
	// base image); bwrap ignores it and shows the host's /usr read-only.
	Image string
	// WorkDir is where the workspace's writable tree is mounted and
	// commands start (a task's /app or /testbed); empty is WorkDir.
	WorkDir string
	// Limits bound the whole workspace: memory, processes, CPU and disk
	// of everything in it together; WallTime bounds its whole life.
	Limits Limits
	// Env is the environment of every command (over the backend's
	// sandbox.env), as KEY=value.
	Env []string
	// ReadOnly are host paths shown read-only at the same path (a
	// harness's npm install, the node binary).
	ReadOnly []string
	// Network is what the workspace may reach; the zero value is
	// nothing at all (loopback only).
	Network Network
	// Labels are added to the container's (docker); every workspace
	// also carries rllm's own labels (run, owner process).
	Labels map[string]string
	// User is who the workspace's commands run as (docker): "UID:GID",
	// or a name the image's /etc/passwd knows; empty is the image's
	// USER. An unprivileged user owns WorkDir (chown at open, unless
	// WorkDir is /) and HomeDir, and the image's /etc/passwd and
	// /etc/group name it (rllm) when they did not: tools that look the
	// user up (whoami, git, Node's os.userInfo) work. The container keeps
	// the image's user for ExecRequest.User, with CHOWN, DAC_OVERRIDE
	// and FOWNER (which no unprivileged process holds) so that root
	// there can still write what the user owns. bwrap refuses a User:
	// its commands run as the calling user.
	User string
}

// Network is a workspace's only way out: one host Unix socket (a gateway
// session's listener), reachable inside as http://127.0.0.1:Port. No other
// host port, no other address, no DNS.
type Network struct {
	// Socket is the host path of the Unix socket; empty means no
	// network. Both backends bind the socket alone, as a file, at
	// SocketPath inside (docker: read-only, in a read-only tmpfs; the
	// container keeps network none: loopback only), for a forwarder
	// started in the workspace to serve it on Port. Nothing of the
	// socket's host directory is in the workspace.
	Socket string
	// Port is the loopback port inside the workspace that forwards to
	// Socket; 0 picks 8000.
	Port int
}

// Opener opens workspaces: the bwrap and docker backends.
type Opener interface {
	Open(ctx context.Context, spec WorkspaceSpec) (Workspace, error)
}

// envValue is KEY's value in env (KEY=value, a later one winning).
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// expandPath is env with $PATH in its PATH replaced by path, the
// workspace's own (ExecRequest.Env).
func expandPath(env []string, path string) []string {
	out := slices.Clone(env)
	for i, kv := range out {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && strings.Contains(v, "$PATH") {
			out[i] = "PATH=" + strings.Trim(strings.ReplaceAll(v, "$PATH", path), ":")
		}
	}
	return out
}
