package program

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/internal/childenv"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Sandboxes workflow.args.sandbox accepts for agent programs: "" runs the
// program on the host, as before.
var Sandboxes = []string{"", "bwrap", "docker"}

// ServeSession serves only session id of gw on a fresh Unix socket that a
// sandbox's user may connect to (the socket a Workspace's Network binds
// in); the returned func stops serving and removes it.
func ServeSession(gw *gateway.Gateway, id string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "rllm-session-")
	if err != nil {
		return "", nil, err
	}
	p := filepath.Join(dir, "gateway.sock")
	ln, err := net.Listen("unix", p)
	if err == nil {
		err = os.Chmod(dir, 0o711)
	}
	if err == nil {
		err = os.Chmod(p, 0o666)
	}
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("serving the session on a Unix socket: %w", err)
	}
	prefix := "/sessions/" + id + "/"
	h := gw.Handler()
	srv := &http.Server{ReadHeaderTimeout: 30 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, prefix) {
			http.Error(rw, "this socket serves one session: "+prefix, http.StatusNotFound)
			return
		}
		h.ServeHTTP(rw, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	return p, func() { srv.Close(); os.RemoveAll(dir) }, nil
}

var sharedBwrap struct {
	mu     sync.Mutex
	opener sandbox.Opener
	err    error
}

var sharedDocker struct {
	mu     sync.Mutex
	opener sandbox.Opener
	err    error
}

// BwrapOpener is the process-wide bwrap Opener, probed once.
func BwrapOpener(ctx context.Context) (sandbox.Opener, error) {
	sharedBwrap.mu.Lock()
	defer sharedBwrap.mu.Unlock()
	if sharedBwrap.opener == nil && sharedBwrap.err == nil {
		sharedBwrap.opener, sharedBwrap.err = sandbox.NewBwrapOpener(ctx, sandbox.Config{Backend: sandbox.BackendBwrap, Limits: sandbox.DefaultLimits})
	}
	return sharedBwrap.opener, sharedBwrap.err
}

// SandboxOpener is the process-wide Opener of workflow.args.sandbox
// (bwrap, or docker: the daemon DOCKER_HOST names, the local base image),
// opened once.
func SandboxOpener(ctx context.Context, name string) (sandbox.Opener, error) {
	if name != "docker" {
		return BwrapOpener(ctx)
	}
	sharedDocker.mu.Lock()
	defer sharedDocker.mu.Unlock()
	if sharedDocker.opener == nil && sharedDocker.err == nil {
		d, err := sandbox.OpenDocker(ctx, sandbox.Config{Backend: sandbox.BackendDocker, Limits: sandbox.DefaultLimits})
		if err != nil {
			sharedDocker.err = err
		} else {
			sharedDocker.opener = d
		}
	}
	return sharedDocker.opener, sharedDocker.err
}

// sandboxExit is a sandboxed program that did not exit 0.
type sandboxExit struct{ res sandbox.Result }

func (e *sandboxExit) Error() string { return e.res.Reason() }

// runSandboxed runs the program in a workspace (bwrap or docker) whose
// only network is its session: its directory read-only, /work and its
// home writable, the session at http://127.0.0.1:8000 inside. With a task
// env (w.tasks) the workspace is the task's container, RLLM_WORKDIR names
// the directory the task's files are in, and after the program the
// task's verifier scores the container (the outcome returned).
func (w *Program) runSandboxed(ctx context.Context, g *Gateway, sess *gateway.Session, task episode.Task, episodeID string, in []byte, stdout, stderr io.Writer) (*sandbox.NetReport, *outcome, error) {
	opener, err := SandboxOpener(ctx, w.sandbox)
	if err != nil {
		return nil, nil, err
	}
	sock, stop, err := ServeSession(g.GW, sess.ID)
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	dir := w.dir
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return nil, nil, err
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, nil, err
	}
	spec := sandbox.WorkspaceSpec{ReadOnly: []string{dir},
		Network: sandbox.Network{Socket: sock, Port: sandbox.DefaultPort},
		Limits: sandbox.Limits{WallTime: w.timeout, CPUTime: w.timeout, MemoryBytes: 16 << 30, Processes: 512,
			FileSizeBytes: 256 << 20, OutputBytes: 1 << 20}}
	var files []sandbox.File
	if w.tasks != nil {
		// The program's directory is shown in the container: it must not
		// hold the task's tests and solution.
		if td, ok := task["task_dir"].(string); ok {
			if err := apart(dir, td); err != nil {
				return nil, nil, err
			}
		}
		if opener, spec, files, err = w.tasks.Workspace(ctx, task, spec); err != nil {
			return nil, nil, err
		}
	}
	ws, err := opener.Open(ctx, spec)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the program's sandbox (workflow.args.sandbox=%s): %w", w.sandbox, err)
	}
	defer ws.Close(context.WithoutCancel(ctx))
	workDir := spec.WorkDir
	if workDir == "" {
		workDir = sandbox.WorkDir
	}
	if len(files) > 0 {
		if err := ws.CopyIn(ctx, workDir, files); err != nil {
			return nil, nil, err
		}
	}
	vars := sessionEnv(fmt.Sprintf("http://127.0.0.1:%d/sessions/%s", sandbox.DefaultPort, sess.ID), sess, episodeID)
	vars["RLLM_WORKDIR"], vars["HOME"], vars["TMPDIR"] = workDir, sandbox.HomeDir, "/tmp"
	if w.sandbox == "docker" {
		// The image's PATH (a task's tools), not the host's.
		vars["PATH"] = "$PATH"
	}
	env := childenv.FromProcess(w.passEnv, vars)
	res, err := ws.Exec(ctx, sandbox.ExecRequest{Command: w.argv, Dir: dir, Env: env, Stdin: append(in, '\n')})
	_, _ = stdout.Write(res.Stdout)
	_, _ = stderr.Write(res.Stderr)
	if err != nil {
		return res.Net, nil, err
	}
	if !res.OK() {
		return res.Net, nil, &sandboxExit{res}
	}
	if w.tasks == nil {
		return res.Net, nil, nil
	}
	reward, correct, info, err := w.tasks.Verify(ctx, ws, task)
	if err != nil {
		return res.Net, nil, err
	}
	return res.Net, &outcome{reward: reward, correct: correct, info: info}, nil
}

// apart refuses a program directory that holds the task's directory, or
// lies inside it: the container shows the program's directory, and the
// program would read the task's tests and solution there. Both paths are
// compared as the daemon binds them, every symbolic link resolved.
func apart(dir, taskDir string) error {
	d, err := resolved(dir)
	if err != nil {
		return usererr.Errorf("workflow.args.dir %s: %v", dir, err)
	}
	t, err := resolved(taskDir)
	if err != nil {
		return fmt.Errorf("the task's directory %s: %w", taskDir, err)
	}
	if within(d, t) {
		return usererr.Errorf("workflow.args.dir %s holds the task %s, whose tests and solution the program would see in its container; set workflow.args.dir to a directory with the program alone", dir, taskDir)
	}
	if within(t, d) {
		return usererr.Errorf("workflow.args.dir %s is inside the task %s, whose tests and solution the program would see in its container; set workflow.args.dir to a directory with the program alone", dir, taskDir)
	}
	return nil
}

// resolved is p absolute, with every symbolic link resolved.
func resolved(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// within reports whether p is dir or below it.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
