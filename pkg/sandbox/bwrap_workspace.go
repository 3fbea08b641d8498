//go:build linux

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// bwrapOpener opens bwrap workspaces: a host directory bound writable at
// WorkDir, a private home at HomeDir, the rest of the tree read-only (the
// host's /usr, what WorkspaceSpec.ReadOnly names, sandbox.bind_ro), a
// fresh tmpfs /tmp per command, and for a Network a forwarder in the
// command's own network namespace (see ForwardMain). Each Exec is a fresh
// bubblewrap sandbox over the same directories: files persist between
// commands, processes do not.
type bwrapOpener struct{ b *bwrap }

// NewBwrapOpener probes bubblewrap (as sandbox.backend=bwrap does) and
// returns its Opener.
func NewBwrapOpener(ctx context.Context, c Config) (Opener, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	be, err := newBwrap(ctx, c)
	if err != nil {
		return nil, err
	}
	return &bwrapOpener{b: be.(*bwrap)}, nil
}

type bwrapWorkspace struct {
	b      *bwrap
	spec   WorkspaceSpec
	dir    string // the host directory holding work and home
	work   string // host side of spec.WorkDir
	home   string // host side of HomeDir
	limits Limits
	fw     string // the forwarder binary, when there is a network

	ctx    context.Context // cancelled by Close: every Exec stops
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	runs   sync.WaitGroup
}

// checkWorkDir refuses a WorkDir that would hide what a sandbox needs.
func checkWorkDir(dir string) error {
	clean := path.Clean(dir)
	if !path.IsAbs(dir) || clean != dir || dir == "/" {
		return fmt.Errorf("sandbox: workspace directory %q must be an absolute, clean path other than /", dir)
	}
	for _, p := range []string{"/usr", "/proc", "/dev", "/run/rllm", "/tmp", "/bin", "/lib", "/etc", HomeDir} {
		if dir == p || strings.HasPrefix(dir, p+"/") || strings.HasPrefix(p, dir+"/") {
			return fmt.Errorf("sandbox: workspace directory %q overlaps %s; use a directory of its own (/work, /app, /testbed)", dir, p)
		}
	}
	return nil
}

func (o *bwrapOpener) Open(ctx context.Context, spec WorkspaceSpec) (Workspace, error) {
	if spec.WorkDir == "" {
		spec.WorkDir = WorkDir
	}
	if err := checkWorkDir(spec.WorkDir); err != nil {
		return nil, err
	}
	if spec.User != "" {
		return nil, fmt.Errorf("sandbox: bwrap runs a workspace's commands as the calling user, not as %q; use the docker backend for a workspace of another user", spec.User)
	}
	for _, p := range spec.ReadOnly {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("sandbox: read-only path %q must be absolute", p)
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("sandbox: read-only path: %w", err)
		}
		if o.b.asUser != nil {
			if d := reachableByNobody(p); d != "" {
				return nil, fmt.Errorf("sandbox: %s cannot be shown in the sandbox: its sandboxed user (nobody; rllm runs as root) cannot pass %s; keep it under a directory others may traverse (/usr/local, /opt, /var/cache)", p, d)
			}
		}
	}
	w := &bwrapWorkspace{b: o.b, spec: spec, limits: spec.Limits.OrDefaults()}
	if n := spec.Network; n.Socket != "" {
		fi, err := os.Stat(n.Socket)
		if err != nil {
			return nil, fmt.Errorf("sandbox: network socket: %w", err)
		}
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("sandbox: network socket %s is not a Unix socket", n.Socket)
		}
		if n.Port < 0 || n.Port > 65535 {
			return nil, fmt.Errorf("sandbox: network port %d is not a TCP port", n.Port)
		}
		if w.fw, err = forwarder(); err != nil {
			return nil, err
		}
		if o.b.asUser != nil {
			if w.fw, err = stagedForwarder(w.fw); err != nil {
				return nil, err
			}
			if d := reachableByNobody(n.Socket); d != "" {
				return nil, fmt.Errorf("sandbox: the network socket %s is behind %s, which the sandbox's user (nobody) cannot pass", n.Socket, d)
			}
		}
	}
	dir, err := os.MkdirTemp("", "rllm-workspace-")
	if err != nil {
		return nil, err
	}
	w.dir, w.work, w.home = dir, filepath.Join(dir, "work"), filepath.Join(dir, "home")
	// The sandbox's user (nobody when rllm runs as root) must reach the
	// two directories it writes.
	err = os.Chmod(dir, 0o711)
	for _, d := range []string{w.work, w.home} {
		if err == nil {
			err = os.Mkdir(d, 0o755)
		}
		if err == nil && o.b.asUser != nil {
			err = os.Chown(d, nobody, nobody)
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("sandbox: making the workspace: %w", err)
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w, nil
}

func (w *bwrapWorkspace) ID() string { return w.dir }

// KillAll has nothing to kill: each command runs in a PID namespace of
// its own, and the kernel kills everything left in it when the command
// ends (bwrap --unshare-pid), so nothing outlives a command.
func (w *bwrapWorkspace) KillAll(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("sandbox: the workspace is closed")
	}
	return nil
}

// hostPath maps an absolute path inside the workspace to the host
// directory that holds it and the path relative to it.
func (w *bwrapWorkspace) hostPath(p string) (root, rel string, err error) {
	clean := path.Clean(p)
	if !path.IsAbs(p) {
		return "", "", fmt.Errorf("sandbox: %q is not an absolute path", p)
	}
	for _, m := range [][2]string{{w.spec.WorkDir, w.work}, {HomeDir, w.home}} {
		if clean == m[0] {
			return m[1], ".", nil
		}
		if r, ok := strings.CutPrefix(clean, m[0]+"/"); ok {
			return m[1], r, nil
		}
	}
	return "", "", fmt.Errorf("sandbox: %s is outside the workspace's writable directories (%s, %s)", p, w.spec.WorkDir, HomeDir)
}

func (w *bwrapWorkspace) begin() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("sandbox: the workspace is closed")
	}
	w.runs.Add(1)
	return nil
}

func (w *bwrapWorkspace) CopyIn(ctx context.Context, dir string, files []File) error {
	if err := w.begin(); err != nil {
		return err
	}
	defer w.runs.Done()
	base, rel, err := w.hostPath(dir)
	if err != nil {
		return err
	}
	// os.Root resolves every name inside base: a symlink the sandbox
	// left cannot point a write at the host.
	root, err := os.OpenRoot(base)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !validFileName(f.Name) {
			return fmt.Errorf("sandbox: file name %q must be a relative path", f.Name)
		}
		name := path.Join(rel, f.Name)
		mode := f.Mode.Perm()
		if mode == 0 {
			mode = 0o644
		}
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
			if err := w.own(root, d); err != nil {
				return err
			}
		}
		if err := root.WriteFile(name, f.Data, mode); err != nil {
			return err
		}
		if err := root.Chmod(name, mode); err != nil {
			return err
		}
		if w.b.asUser != nil {
			if err := root.Lchown(name, nobody, nobody); err != nil {
				return err
			}
		}
	}
	return nil
}

// own gives d and its parents up to the root to the sandbox's user.
func (w *bwrapWorkspace) own(root *os.Root, d string) error {
	if w.b.asUser == nil {
		return nil
	}
	for ; d != "." && d != "/"; d = path.Dir(d) {
		if err := root.Lchown(d, nobody, nobody); err != nil {
			return err
		}
	}
	return nil
}

func (w *bwrapWorkspace) ReadFile(ctx context.Context, p string, max int64) ([]byte, error) {
	if err := w.begin(); err != nil {
		return nil, err
	}
	defer w.runs.Done()
	base, rel, err := w.hostPath(p)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(base)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("sandbox: %s is not a regular file", p)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

func (w *bwrapWorkspace) Exec(ctx context.Context, req ExecRequest) (Result, error) {
	if len(req.Command) == 0 || req.Command[0] == "" {
		return Result{}, errors.New("sandbox: empty command")
	}
	if req.User != "" {
		return Result{}, fmt.Errorf("sandbox: bwrap runs commands as the calling user, not as %q", req.User)
	}
	if err := w.begin(); err != nil {
		return Result{}, err
	}
	defer w.runs.Done()
	dir := req.Dir
	if dir == "" {
		dir = w.spec.WorkDir
	}
	if !path.IsAbs(dir) {
		return Result{}, fmt.Errorf("sandbox: working directory %q must be absolute", dir)
	}
	l := w.limits
	if req.Limits.WallTime > 0 {
		l.WallTime = req.Limits.WallTime
	}
	if req.Limits.CPUTime > 0 {
		l.CPUTime = req.Limits.CPUTime
	}
	if req.Limits.OutputBytes > 0 {
		l.OutputBytes = req.Limits.OutputBytes
	}
	status, statusW, err := os.Pipe()
	if err != nil {
		return Result{}, err
	}
	defer status.Close()
	// The files handed to bwrap: fd 3 its status, 4 the forwarder's
	// report.
	extra := []*os.File{statusW}
	defer func() {
		for _, f := range extra {
			f.Close()
		}
	}()
	fd := func(f *os.File) string {
		extra = append(extra, f)
		return strconv.Itoa(2 + len(extra))
	}
	var report *os.File
	reportFD := ""
	if w.fw != "" {
		r, rw, err := os.Pipe()
		if err != nil {
			return Result{}, err
		}
		report = r
		defer report.Close()
		reportFD = fd(rw)
	}
	argv := append([]string(nil), w.b.prefix...)
	argv = append(argv, "--bind", w.work, w.spec.WorkDir, "--bind", w.home, HomeDir)
	// /tmp first: a read-only path under the host's /tmp is bound over it.
	argv = append(argv, "--size", strconv.FormatInt(l.FileSizeBytes, 10), "--tmpfs", "/tmp")
	for _, p := range w.spec.ReadOnly {
		argv = append(argv, "--ro-bind", p, p)
	}
	if w.fw != "" {
		argv = append(argv, "--ro-bind", w.fw, ForwarderPath, "--bind", w.spec.Network.Socket, SocketPath)
	}
	// Everything else (the root and the directories bwrap made in it) is
	// read-only; the binds and tmpfs above stay as they are.
	argv = append(argv, "--remount-ro", "/", "--chdir", dir, "--clearenv")
	base := envList(w.b.env, w.spec.Env)
	for _, kv := range envList(base, expandPath(req.Env, envValue(base, "PATH"))) {
		k, v, _ := strings.Cut(kv, "=")
		argv = append(argv, "--setenv", k, v)
	}
	argv = append(argv, "--json-status-fd", "3")
	if w.fw != "" {
		port := w.spec.Network.Port
		if port == 0 {
			port = DefaultPort
		}
		argv = append(argv, forwardArgs(SocketPath, port, "--report-fd", reportFD)...)
	}
	argv = append(argv, prlimitArgs(w.b.prlimit, l)...)
	argv = append(argv, req.Command...)

	started := make(chan bool, 1)
	go func() { started <- readStarted(status) }()
	var rep chan NetReport
	if report != nil {
		rep = make(chan NetReport, 1)
		go func() {
			var nr NetReport
			_ = json.NewDecoder(io.LimitReader(report, 64<<10)).Decode(&nr)
			rep <- nr
		}()
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-w.ctx.Done():
			stop()
		case <-runCtx.Done():
		}
	}()
	// bwrap's monitor and PID 1, and the forwarder's threads, share the
	// cgroup's pids limit with the command.
	own := 2
	if w.fw != "" {
		own += 16
	}
	res, st, err := runProcess(runCtx, procRun{argv: argv, dir: "/", stdin: req.Stdin, stream: req.Stream, extra: extra, limits: l, asUser: w.b.asUser, own: own})
	for _, f := range extra {
		f.Close() // the report's reader sees its end
	}
	if err != nil {
		if w.ctx.Err() != nil && ctx.Err() == nil {
			return res, errors.New("sandbox: the workspace was closed while the command ran")
		}
		return res, err
	}
	if !<-started && res.Limit == LimitNone {
		return res, fmt.Errorf("bwrap could not start the sandbox: %s", lastLine(res.Stderr))
	}
	if rep != nil {
		nr := <-rep
		if nr.Error != "" {
			return res, fmt.Errorf("sandbox: the network forwarder failed: %s", nr.Error)
		}
		res.Net = &nr
	}
	Classify(&res, cpuTime(st), l)
	return res, nil
}

// envList merges KEY=value lists, later ones replacing earlier values;
// the result is sorted by key.
func envList(lists ...[]string) []string {
	m := map[string]string{}
	for _, l := range lists {
		for _, kv := range l {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				m[k] = v
			}
		}
	}
	keys := make(map[string]bool, len(m))
	for k := range m {
		keys[k] = true
	}
	out := make([]string, 0, len(m))
	for _, k := range sortedKeys(keys) {
		out = append(out, k+"="+m[k])
	}
	return out
}

func (w *bwrapWorkspace) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	w.cancel()
	w.runs.Wait()
	if err := os.RemoveAll(w.dir); err != nil {
		// A directory the sandbox made unwritable (chmod 0500) stops
		// RemoveAll when rllm is not root: open it up and try again.
		_ = filepath.WalkDir(w.dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o700)
			}
			return nil
		})
		return os.RemoveAll(w.dir)
	}
	return nil
}
