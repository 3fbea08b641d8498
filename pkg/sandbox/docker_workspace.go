package sandbox

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/rllm-org/rllm-go/internal/childenv"
)

// DefaultWorkspaceLife is a workspace's life when its spec sets no
// WallTime.
const DefaultWorkspaceLife = time.Hour

// warmIdleMax is how long a warm container may wait in the pool; its
// idle process ends (and the container stops) after its life plus this.
const warmIdleMax = 10 * time.Minute

// diskCheckEvery is how often a workspace's writable layer is measured
// (Docker.diskEvery's default).
const diskCheckEvery = time.Second

// containerSpec is one container as the backend creates it.
type containerSpec struct {
	Image   string
	WorkDir string
	// Limits are complete (no zero field).
	Limits Limits
	// Life bounds the container's whole life.
	Life   time.Duration
	Env    []string
	Binds  []string
	Labels map[string]string
	// ReadOnlyRoot: the root is read-only, WorkDir a tmpfs volume of
	// WorkDirBytes (the archive API writes into a volume of a running
	// container, not into a tmpfs mount) and /tmp a tmpfs; else the
	// root is the container's own writable layer, bounded by
	// Limits.DiskBytes.
	ReadOnlyRoot bool
	WorkDirBytes int64
	// Volumes are the image's VOLUME paths: each is a tmpfs volume of
	// Limits.DiskBytes holding the image's content there (charged to
	// the container's memory), not an anonymous volume on the daemon's
	// disk, which the writable layer's measure never counts.
	Volumes []string
	// User is the container's user ("": the image's).
	User string
	// CommandUser is who Exec runs commands as (WorkspaceSpec.User:
	// resolved to UID:GID when the workspace opens); "" is User.
	CommandUser string
	// Socket and Port: the host's socket is bound, as a file and
	// read-only, at SocketPath, and each command runs behind the
	// forwarder (bound read-only at ForwarderPath), which relays
	// 127.0.0.1:Port in the container to it. Both are in a read-only
	// tmpfs of their own (runDir): nothing of the socket's host
	// directory is in the container.
	Socket string
	Port   int
	// ProcessMemory bounds each command's address space by
	// Limits.MemoryBytes too (RLIMIT_AS, set by the exec wrapper: the
	// container's own init cannot start under it), as bwrap does, so an
	// allocation fails (MemoryError, bad_alloc) before the container's
	// OOM killer picks a process: a batch harness sees which test
	// allocated. One-shot runs set it; workspaces do not (node and the
	// JVM reserve far more address space than they use).
	ProcessMemory bool
}

// key identifies the containers a warm pool may hand out for s.
func (s containerSpec) key() string {
	labels := slices.Sorted(maps.Keys(s.Labels))
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%+v|%s|%s|%t|%d|%s|%s|", s.Image, s.WorkDir, s.Limits, strings.Join(s.Env, "\x00"), strings.Join(s.Binds, "\x00"),
		s.ReadOnlyRoot, s.WorkDirBytes, s.User, s.Socket)
	fmt.Fprintf(&b, "%s|", strings.Join(s.Volumes, "\x00"))
	for _, k := range labels {
		fmt.Fprintf(&b, "%s=%s\x00", k, s.Labels[k])
	}
	return b.String()
}

// Open opens a long-lived workspace: a container of spec.Image with no
// network (or, with spec.Network.Socket, that socket alone bound
// read-only at SocketPath), its own writable layer bounded by
// spec.Limits.DiskBytes, memory, processes and CPU of spec.Limits for the
// whole container, every capability dropped but root's CHOWN,
// DAC_OVERRIDE and FOWNER (workspaceCaps) and no-new-privileges, alive
// for spec.Limits.WallTime (DefaultWorkspaceLife when zero). Commands run
// as spec.User (else the image's user), through the exec API.
func (d *Docker) Open(ctx context.Context, spec WorkspaceSpec) (Workspace, error) {
	image := spec.Image
	if image == "" {
		image = d.image
	}
	ic, err := d.ImageConfig(ctx, image)
	if err != nil {
		return nil, err
	}
	s, err := d.workspaceSpec(spec, image, ic.Env)
	if err != nil {
		return nil, err
	}
	for _, v := range ic.Volumes {
		if v != "/" && !slices.ContainsFunc(s.Binds, func(b string) bool { return bindTarget(b) == v }) {
			s.Volumes = append(s.Volumes, v)
		}
	}
	return d.open(ctx, s)
}

// workspaceSpec is the container of spec on image, whose own environment
// is imageEnv. Its environment, a later layer winning: the sandbox's
// defaults (DefaultEnv), the image's (its PATH and the rest of its ENV),
// sandbox.env, then spec.Env.
func (d *Docker) workspaceSpec(spec WorkspaceSpec, image string, imageEnv []string) (containerSpec, error) {
	dir := spec.WorkDir
	if dir == "" {
		dir = WorkDir
	}
	if !path.IsAbs(dir) || path.Clean(dir) != dir {
		return containerSpec{}, fmt.Errorf("sandbox: workspace directory %q must be a clean absolute path", dir)
	}
	life := spec.Limits.WallTime
	if life <= 0 {
		life = DefaultWorkspaceLife
	}
	env := childEnvOver(childEnvOver(childEnvOver(childenv.List(DefaultEnv), imageEnv), d.userEnv), spec.Env)
	binds := slices.Clone(d.binds)
	for _, p := range spec.ReadOnly {
		if !filepath.IsAbs(p) {
			return containerSpec{}, fmt.Errorf("sandbox: read-only path %q must be absolute", p)
		}
		binds = append(binds, p+":"+p+":ro")
	}
	s := containerSpec{Image: image, WorkDir: dir, Limits: spec.Limits.OrDefaults(), Life: life, Env: env, Binds: binds, Labels: spec.Labels,
		CommandUser: spec.User}
	if spec.Network.Socket != "" {
		if !filepath.IsAbs(spec.Network.Socket) {
			return containerSpec{}, fmt.Errorf("sandbox: network socket %q must be an absolute host path", spec.Network.Socket)
		}
		fw, err := forwarder()
		if err != nil {
			return containerSpec{}, err
		}
		// The daemon reads the binary as root: no staging needed.
		s.Binds = append(s.Binds, fw+":"+ForwarderPath+":ro")
		s.Socket, s.Port = spec.Network.Socket, spec.Network.Port
		if s.Port == 0 {
			s.Port = DefaultPort
		}
	}
	return s, nil
}

// runDir holds the session's socket and the forwarder in a container
// (SocketPath, ForwarderPath).
const runDir = "/run/rllm"

// daemonReadonlyPaths are the paths the Docker daemon makes read-only
// in every container by default (moby's oci defaults); setting
// HostConfig.ReadonlyPaths replaces them, so they are named again.
var daemonReadonlyPaths = []string{"/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// childEnvOver is base with each KEY=value of over replacing base's KEY.
func childEnvOver(base, over []string) []string {
	out := slices.Clone(base)
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		out = append(out, kv)
	}
	return out
}

// open takes a warm container for s, or creates one, and starts its
// life.
func (d *Docker) open(ctx context.Context, s containerSpec) (*dockerWorkspace, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	id, ok := d.warm.take(s)
	if !ok {
		var err error
		if id, err = d.create(ctx, s); err != nil {
			return nil, err
		}
	}
	w := &dockerWorkspace{d: d, id: id, spec: s, dead: make(chan struct{}), stop: make(chan struct{})}
	if s.CommandUser != "" {
		user, err := w.setUser(ctx, s.CommandUser)
		if err != nil {
			d.remove(id)
			return nil, err
		}
		w.user = user
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.remove(id)
		return nil, ErrClosed
	}
	d.live[id] = w
	d.mu.Unlock()
	w.life = time.AfterFunc(s.Life, func() { w.die(LimitWallTime) })
	if !s.ReadOnlyRoot {
		go w.watchDisk()
	}
	return w, nil
}

// create creates and starts a container for s; a container that cannot
// start is removed.
func (d *Docker) create(ctx context.Context, s containerSpec) (string, error) {
	l := s.Limits
	pids := int64(l.Processes)
	labels := d.owner.labels()
	maps.Copy(labels, s.Labels)
	maps.Copy(labels, d.owner.labels()) // a spec cannot pass for another owner
	yes := true
	idle := strconv.FormatInt(int64((s.Life+warmIdleMax)/time.Second)+1, 10)
	cfg := &container.Config{
		Image: s.Image, User: s.User, WorkingDir: s.WorkDir, Env: s.Env, Labels: labels,
		Cmd: []string{"sleep", idle}, NetworkDisabled: s.Socket == "",
	}
	host := &container.HostConfig{
		NetworkMode: "none", ReadonlyRootfs: s.ReadOnlyRoot, CapDrop: []string{"ALL"}, CapAdd: workspaceCaps(s),
		SecurityOpt: []string{"no-new-privileges"}, Binds: slices.Clone(s.Binds), Init: &yes,
		Resources: container.Resources{
			Memory: l.MemoryBytes, MemorySwap: l.MemoryBytes, PidsLimit: &pids, NanoCPUs: l.MilliCPUs * 1_000_000,
			Ulimits: []*container.Ulimit{
				{Name: "fsize", Soft: l.FileSizeBytes, Hard: l.FileSizeBytes},
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
	}
	// Nothing of the host is writable inside: the files the daemon
	// binds for the container's names (/etc/hosts, /etc/hostname,
	// /etc/resolv.conf, in the daemon's directory and outside every
	// disk limit) are read-only, as are the daemon's own read-only paths.
	host.ReadonlyPaths = append(slices.Clone(daemonReadonlyPaths), "/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
	host.Tmpfs = map[string]string{}
	if s.Socket != "" {
		// The socket as a file, read-only (a Unix socket is still
		// connected to through a read-only mount), in a read-only tmpfs:
		// it cannot be replaced, and its directory takes no file.
		host.Binds = append(host.Binds, s.Socket+":"+SocketPath+":ro")
		host.Tmpfs[runDir] = "ro,size=64k,mode=755"
	}
	if s.ReadOnlyRoot {
		host.Tmpfs["/tmp"] = fmt.Sprintf("rw,size=%d,mode=1777", l.FileSizeBytes)
		host.Mounts = []mount.Mount{{
			Type: mount.TypeVolume, Target: s.WorkDir,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true, Labels: labels, DriverConfig: &mount.Driver{
				Name: "local", Options: map[string]string{"type": "tmpfs", "device": "tmpfs", "o": fmt.Sprintf("size=%d,mode=1777", max(s.WorkDirBytes, 1<<20))},
			}},
		}}
	}
	for _, v := range s.Volumes {
		host.Mounts = append(host.Mounts, mount.Mount{
			Type: mount.TypeVolume, Target: v,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true, Labels: labels, DriverConfig: &mount.Driver{
				Name: "local", Options: map[string]string{"type": "tmpfs", "device": "tmpfs", "o": fmt.Sprintf("size=%d", l.DiskBytes)},
			}},
		})
	}
	cctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	created, err := d.cli.ContainerCreate(cctx, client.ContainerCreateOptions{Config: cfg, HostConfig: host})
	if err != nil {
		if isNotFound(err) {
			return "", fmt.Errorf("sandbox: docker: the daemon has no image %s (%s)", s.Image, dockerImageKey)
		}
		return "", errDaemon("create a container of "+s.Image, err)
	}
	if _, err := d.cli.ContainerStart(cctx, created.ID, client.ContainerStartOptions{}); err != nil {
		d.remove(created.ID)
		return "", errDaemon("start a container of "+s.Image, err)
	}
	if err := d.fillVolumes(cctx, s, created.ID); err != nil {
		d.remove(created.ID)
		return "", err
	}
	return created.ID, nil
}

// fillVolumes copies the image's content at each of s.Volumes into the
// started container id's tmpfs volume there (a tmpfs volume gets no
// copy of its own: the daemon fills it while the container is created,
// and it is empty again once mounted), from a container of the image
// that is created, never started, and removed.
func (d *Docker) fillVolumes(ctx context.Context, s containerSpec, id string) error {
	if len(s.Volumes) == 0 {
		return nil
	}
	src, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: s.Image, Labels: d.owner.labels(),
		Cmd: []string{"true"}, NetworkDisabled: true}, HostConfig: &container.HostConfig{NetworkMode: "none"}})
	if err != nil {
		return errDaemon("create a container of "+s.Image+" to read its volumes", err)
	}
	defer d.remove(src.ID)
	for _, v := range s.Volumes {
		from, err := d.cli.CopyFromContainer(ctx, src.ID, client.CopyFromContainerOptions{SourcePath: v + "/."})
		if err != nil {
			if isNotFound(err) {
				continue
			}
			return errDaemon("read the image's "+v, err)
		}
		_, err = d.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: v, Content: from.Content})
		from.Content.Close()
		if err != nil {
			return errDaemon("copy the image's "+v+" into its volume", err)
		}
	}
	return nil
}

// bindTarget is the path a bind (SOURCE:TARGET[:MODE]) mounts at.
func bindTarget(b string) string {
	_, rest, _ := strings.Cut(b, ":")
	target, _, _ := strings.Cut(rest, ":")
	return path.Clean(target)
}

// workspaceCaps are the capabilities a long-lived workspace's root keeps
// (none for one-shot runs): enough to own the working directory over to
// an unprivileged user (WorkspaceSpec.User) and, as the verifier, to
// read and write what that user left. A process of any other user holds
// no capability (the exec API clears them), and no-new-privileges keeps
// setuid files from granting any.
func workspaceCaps(s containerSpec) []string {
	if s.ReadOnlyRoot {
		return nil
	}
	return []string{"CHOWN", "DAC_OVERRIDE", "FOWNER"}
}

// remove removes container id and its volumes, bounded in time.
func (d *Docker) remove(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	_, err := d.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !isNotFound(err) {
		return errDaemon("remove container "+shortID(id), err)
	}
	return nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// dockerWorkspace is one open container.
type dockerWorkspace struct {
	d    *Docker
	id   string
	spec containerSpec
	life *time.Timer
	// user is who commands run as (UID:GID; "" is the container's user).
	user string

	deadOnce sync.Once
	dead     chan struct{} // closed when the container was killed for a limit
	why      Limit

	closeOnce sync.Once
	closeErr  error
	stop      chan struct{} // closed by Close
	closed    atomic.Bool
}

// ID is the container's short id.
func (w *dockerWorkspace) ID() string { return shortID(w.id) }

// die kills the container because it passed limit.
func (w *dockerWorkspace) die(limit Limit) {
	w.deadOnce.Do(func() {
		w.why = limit
		close(w.dead)
		ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
		defer cancel()
		_, _ = w.d.cli.ContainerKill(ctx, w.id, client.ContainerKillOptions{Signal: "KILL"})
	})
}

// ended says why the workspace can take no more commands, nil while it
// can.
func (w *dockerWorkspace) ended() error {
	if w.closed.Load() {
		return fmt.Errorf("sandbox: docker: workspace %s is closed", w.ID())
	}
	select {
	case <-w.dead:
		return fmt.Errorf("sandbox: docker: workspace %s ended: %s", w.ID(), Result{Limit: w.why}.Reason())
	default:
		return nil
	}
}

// watchDisk kills the workspace when its writable layer passes the disk
// limit.
func (w *dockerWorkspace) watchDisk() {
	t := time.NewTicker(w.d.diskEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.dead:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
		insp, err := w.d.cli.ContainerInspect(ctx, w.id, client.ContainerInspectOptions{Size: true})
		cancel()
		if err != nil {
			continue
		}
		if rw := insp.Container.SizeRw; rw != nil && *rw > w.spec.Limits.DiskBytes {
			w.die(LimitDisk)
			return
		}
	}
}

// Close removes the container (killing what runs in it); again, nothing.
func (w *dockerWorkspace) Close(ctx context.Context) error {
	w.closeOnce.Do(func() {
		w.closed.Store(true)
		w.life.Stop()
		close(w.stop)
		w.closeErr = w.d.remove(w.id)
		w.d.mu.Lock()
		delete(w.d.live, w.id)
		w.d.mu.Unlock()
	})
	return w.closeErr
}

// closeLater closes the workspace in the background; the backend's Close
// waits for it.
func (w *dockerWorkspace) closeLater() {
	w.d.removing.Add(1)
	go func() {
		defer w.d.removing.Done()
		_ = w.Close(context.Background())
	}()
}

// execToken is the environment variable that marks every process one
// command starts, so a command that outlives its time is killed with all
// it started (children inherit the environment).
const execToken = "RLLM_EXEC"

// limitWrapper sets the command's CPU limit (soft, and the hard one a
// second later, as prlimitArgs) and, when $3 is not 0, its address space
// in KiB, then execs it.
const limitWrapper = `ulimit -H -t "$1" 2>/dev/null; ulimit -S -t "$2" 2>/dev/null; [ "$3" = 0 ] || ulimit -v "$3" 2>/dev/null; shift 3; exec "$@"`

// killScript kills every process whose environment holds the token $1,
// a few rounds, so children forked meanwhile go too.
const killScript = `for round in 1 2 3 4 5; do found=; for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = "$$" ] && continue; ` +
	`if grep -qa "` + execToken + `=$1" "$d/environ" 2>/dev/null; then kill -9 "$p" 2>/dev/null; found=1; fi; done; [ -z "$found" ] && exit 0; done`

// Exec runs one command through the exec API. Its wall time, CPU time
// and output are req.Limits' (the workspace's for a zero field); past
// them every process the command started is killed.
func (w *dockerWorkspace) Exec(ctx context.Context, req ExecRequest) (Result, error) {
	if len(req.Command) == 0 || req.Command[0] == "" {
		return Result{}, errors.New("sandbox: empty command")
	}
	if err := w.ended(); err != nil {
		return Result{}, err
	}
	dir := req.Dir
	if dir == "" {
		dir = w.spec.WorkDir
	}
	if !path.IsAbs(dir) {
		return Result{}, fmt.Errorf("sandbox: command directory %q must be absolute", dir)
	}
	l := req.Limits.Or(w.spec.Limits)
	user := req.User
	if user == "" {
		user = w.user
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	cpu := int64((l.CPUTime + time.Second - 1) / time.Second)
	as := int64(0)
	if w.spec.ProcessMemory {
		as = l.MemoryBytes >> 10
	}
	argv := append([]string{"sh", "-c", limitWrapper, "sh", strconv.FormatInt(cpu+1, 10), strconv.FormatInt(cpu, 10), strconv.FormatInt(as, 10)}, req.Command...)
	env := append(expandPath(req.Env, envValue(w.spec.Env, "PATH")), execToken+"="+token)
	report := ""
	if w.spec.Socket != "" {
		// The container's network namespace is loopback only; the
		// forwarder relays 127.0.0.1:Port to the session's socket while
		// the command runs, then reports what the kernel refused.
		report = "/tmp/.rllm-net-" + token + ".json"
		argv = append(forwardArgs(SocketPath, w.spec.Port, "--report-file", report), argv...)
	}

	cctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	ex, err := w.d.cli.ExecCreate(cctx, w.id, client.ExecCreateOptions{
		Cmd: argv, Env: env, WorkingDir: dir, User: user, AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		cancel()
		if e := w.ended(); e != nil {
			return Result{}, e
		}
		if strings.Contains(err.Error(), "is not running") {
			return Result{}, w.idleEnded(err)
		}
		return Result{}, errDaemon("exec in "+w.ID(), err)
	}
	att, err := w.d.cli.ExecAttach(cctx, ex.ID, client.ExecAttachOptions{})
	cancel()
	if err != nil {
		// The container may have stopped between the exec's creation and
		// its start (the daemon then answers 500).
		if !w.running(ctx) {
			return Result{}, w.idleEnded(err)
		}
		return Result{}, errDaemon("start an exec in "+w.ID(), err)
	}
	defer att.Close()
	start := time.Now()

	var outputHit atomic.Bool
	over := make(chan struct{})
	var overOnce sync.Once
	overflow := func() { outputHit.Store(true); overOnce.Do(func() { close(over) }) }
	stdout := &capWriter{limit: l.OutputBytes, over: overflow}
	stderr := &capWriter{limit: l.OutputBytes, over: overflow}
	var out io.Writer = stdout
	if req.Stream != nil {
		out = req.Stream.Out
	}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out, stderr, att.Reader)
		copied <- err
	}()
	go func() {
		if req.Stream != nil {
			_, _ = io.Copy(att.Conn, req.Stream.In)
		} else if len(req.Stdin) > 0 {
			_, _ = att.Conn.Write(req.Stdin)
		}
		_ = att.CloseWrite()
	}()
	wall := time.NewTimer(l.WallTime)
	defer wall.Stop()

	res := Result{}
	var stopped Limit
	var cause error
	select {
	case err := <-copied:
		if err != nil {
			cause = err
		}
	case <-wall.C:
		stopped = LimitWallTime
	case <-over:
		stopped = LimitOutput
	case <-w.dead:
		stopped = w.why
	case <-w.stop:
		return Result{}, w.ended()
	case <-ctx.Done():
		cause = ctx.Err()
	}
	if stopped != LimitNone || cause != nil {
		kerr := w.kill(token, user)
		if kerr != nil && stopped != w.why {
			// Its processes could not all be found and killed in time (a
			// fork bomb holding every pid): the container's restart ends
			// them, with everything else left running in it.
			kerr = w.KillAll(context.WithoutCancel(ctx))
		}
		_ = att.Conn.Close()
		select {
		case <-copied:
		case <-time.After(5 * time.Second):
		}
		res.Time = time.Since(start)
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		if stopped == LimitNone {
			if e := w.ended(); e != nil {
				return Result{}, e
			}
			return Result{}, errDaemon("read the output of "+w.ID(), cause)
		}
		if kerr != nil && stopped != w.why {
			return Result{}, fmt.Errorf("sandbox: docker: a command in %s passed its limit (%s) and could not be killed: %w", w.ID(), Result{Limit: stopped}.Reason(), kerr)
		}
		res.Stdout, res.Stderr, res.ExitCode, res.Limit = stdout.bytes(), stderr.bytes(), 137, stopped
		return res, nil
	}
	res.Time = time.Since(start)
	res.Stdout, res.Stderr = stdout.bytes(), stderr.bytes()
	code, err := w.exitCode(ctx, ex.ID)
	if err != nil {
		if e := w.ended(); e != nil {
			if w.why != LimitNone {
				res.ExitCode, res.Limit = 137, w.why
				return res, nil
			}
			return Result{}, e
		}
		return Result{}, err
	}
	res.ExitCode = code
	select {
	case <-w.dead:
		// The container was killed for a limit (dead is closed before
		// the kill): the stream's end may have been seen first.
		if code != 0 {
			res.Limit = w.why
			return res, nil
		}
	default:
	}
	if code == 137 && w.oomKilled(ctx) {
		res.Limit = LimitMemory
	}
	if report != "" {
		if res.Net, err = w.netReport(ctx, report); err != nil {
			return res, err
		}
	}
	Classify(&res, 0, l)
	return res, nil
}

// netReport reads the forwarder's report of one command.
func (w *dockerWorkspace) netReport(ctx context.Context, p string) (*NetReport, error) {
	b, err := w.ReadFile(ctx, p, 64<<10)
	if err != nil {
		return nil, fmt.Errorf("sandbox: the network forwarder left no report in %s: %w", w.ID(), err)
	}
	var nr NetReport
	if err := json.Unmarshal(b, &nr); err != nil {
		return nil, fmt.Errorf("sandbox: the network forwarder's report in %s: %w", w.ID(), err)
	}
	if nr.Error != "" {
		return nil, fmt.Errorf("sandbox: the network forwarder failed in %s: %s", w.ID(), nr.Error)
	}
	return &nr, nil
}

// exitCode waits (bounded) for the exec's process to be reported ended
// and returns its status.
func (w *dockerWorkspace) exitCode(ctx context.Context, execID string) (int, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, dockerTimeout)
		insp, err := w.d.cli.ExecInspect(cctx, execID, client.ExecInspectOptions{})
		cancel()
		if err != nil {
			return 0, errDaemon("inspect an exec in "+w.ID(), err)
		}
		if !insp.Running {
			return insp.ExitCode, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("sandbox: docker: the daemon still reports a finished command in %s as running", w.ID())
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// idleEnded is the error of a command sent to a container whose idle
// process has ended.
func (w *dockerWorkspace) idleEnded(err error) error {
	return fmt.Errorf("sandbox: docker: the container %s of %s is not running: its idle process ended (an image needs sh and sleep): %w", w.ID(), w.spec.Image, err)
}

// running reports whether the daemon says the container runs (true when
// it cannot tell).
func (w *dockerWorkspace) running(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dockerTimeout)
	defer cancel()
	insp, err := w.d.cli.ContainerInspect(cctx, w.id, client.ContainerInspectOptions{})
	return err != nil || insp.Container.State == nil || insp.Container.State.Running
}

// oomKilled reports whether the container reached its memory limit:
// the daemon's OOMKilled flag (set when the kernel killed the container's
// first process), or a peak usage at the limit (cgroup v1's max_usage; the
// kernel killed a process the exec API started). Both last for the
// container's life, so in a long-lived workspace a later kill -9 may be
// taken for the memory limit too.
func (w *dockerWorkspace) oomKilled(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dockerTimeout)
	defer cancel()
	insp, err := w.d.cli.ContainerInspect(cctx, w.id, client.ContainerInspectOptions{})
	if err == nil && insp.Container.State != nil && insp.Container.State.OOMKilled {
		return true
	}
	st, err := w.d.cli.ContainerStats(cctx, w.id, client.ContainerStatsOptions{})
	if err != nil {
		return false
	}
	defer st.Body.Close()
	var stats container.StatsResponse
	if err := json.NewDecoder(io.LimitReader(st.Body, 1<<20)).Decode(&stats); err != nil {
		return false
	}
	m := stats.MemoryStats
	return m.Limit > 0 && m.MaxUsage >= m.Limit || m.Stats["oom_kill"] > 0
}

// kill kills every process of one command (by its token), through an
// exec of its own as the command's user (who may read its processes'
// environment and signal them), bounded in time.
func (w *dockerWorkspace) kill(token, user string) error {
	return w.runKiller(context.Background(), "kill a command in "+w.ID(), user, killScript, token)
}

// KillAll restarts the container: every process in it ends (the
// container's init is killed, and the kernel kills the rest of its PID
// namespace with it: the idle process, whatever ptraced or replaced it,
// whatever forked, detached or waits), then it starts again with a new
// idle process. The files stay.
func (w *dockerWorkspace) KillAll(ctx context.Context) error {
	if err := w.ended(); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dockerTimeout)
	defer cancel()
	// A restart empties the image's VOLUMEs (tmpfs volumes): what they
	// hold is kept on the host across it and put back.
	saved, err := w.saveVolumes(cctx)
	defer func() {
		for _, f := range saved {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err != nil {
		return err
	}
	now := 0
	if _, err := w.d.cli.ContainerRestart(cctx, w.id, client.ContainerRestartOptions{Signal: "KILL", Timeout: &now}); err != nil {
		if e := w.ended(); e != nil {
			return e
		}
		return errDaemon("restart "+w.ID(), err)
	}
	for i, v := range w.spec.Volumes {
		if _, err := saved[i].Seek(0, io.SeekStart); err != nil {
			return err
		}
		if _, err := w.d.cli.CopyToContainer(cctx, w.id, client.CopyToContainerOptions{DestinationPath: v, Content: saved[i]}); err != nil {
			return errDaemon("put "+v+" back into "+w.ID()+" after its restart", err)
		}
	}
	return nil
}

// saveVolumes copies what each of the image's VOLUMEs holds into a
// temporary host file (a tar), bounded by the workspace's disk limit.
func (w *dockerWorkspace) saveVolumes(ctx context.Context) ([]*os.File, error) {
	var saved []*os.File
	for _, v := range w.spec.Volumes {
		f, err := os.CreateTemp("", "rllm-volume-*.tar")
		if err != nil {
			return saved, err
		}
		saved = append(saved, f)
		from, err := w.d.cli.CopyFromContainer(ctx, w.id, client.CopyFromContainerOptions{SourcePath: v + "/."})
		if err != nil {
			return saved, errDaemon("keep "+v+" of "+w.ID()+" across its restart", err)
		}
		limit := w.spec.Limits.DiskBytes + 64<<20 // the volume's tmpfs, and tar's headers
		n, err := io.Copy(f, io.LimitReader(from.Content, limit+1))
		from.Content.Close()
		if err != nil {
			return saved, errDaemon("keep "+v+" of "+w.ID()+" across its restart", err)
		}
		if n > limit {
			return saved, fmt.Errorf("sandbox: docker: %s of %s holds more than its disk limit of %d MiB", v, w.ID(), w.spec.Limits.DiskBytes>>20)
		}
	}
	return saved, nil
}

// ErrNoSuchUser is the error of a workspace whose WorkspaceSpec.User the
// image does not know.
var ErrNoSuchUser = errors.New("no such user")

// setupScript runs as root when a workspace of another user opens: $1
// is the user (UID:GID or a name), $2 the working directory, $3 the home.
// It prints the user as UID:GID; an unprivileged one owns the working
// directory (what it did not own already: unchanged files are not copied
// up) and the home, and is named in /etc/passwd and /etc/group when they
// did not name it.
const setupScript = `u=$1; dir=$2; home=$3
case $u in *:*) uid=${u%%:*}; gid=${u#*:};; *) uid=$(id -u "$u" 2>/dev/null) && gid=$(id -g "$u" 2>/dev/null) || { echo "the image has no user $u" >&2; exit 3; };; esac
case "$uid" in ''|*[!0-9]*) echo "$u is not a user (UID:GID or a name)" >&2; exit 3;; esac
case "$gid" in ''|*[!0-9]*) echo "$u is not a user (UID:GID or a name)" >&2; exit 3;; esac
if [ "$uid" != 0 ]; then
  mkdir -p "$home" && chown "$uid:$gid" "$home" || exit 4
  if [ "$dir" != / ]; then
    mkdir -p "$dir" || exit 4
    find "$dir" \( ! -user "$uid" -o ! -group "$gid" \) -exec chown -h "$uid:$gid" {} + 2>/dev/null || chown -R -h "$uid:$gid" "$dir" || exit 4
  fi
  grep -q "^[^:]*:[^:]*:$uid:" /etc/passwd 2>/dev/null || echo "rllm:x:$uid:$gid:rllm agent:$home:/bin/sh" >> /etc/passwd 2>/dev/null
  grep -q "^[^:]*:[^:]*:$gid:" /etc/group 2>/dev/null || echo "rllm:x:$gid:" >> /etc/group 2>/dev/null
fi
echo "$uid:$gid"`

// setUser makes the workspace's commands run as user (setupScript) and
// returns it as UID:GID.
func (w *dockerWorkspace) setUser(ctx context.Context, user string) (string, error) {
	if uid, _, ok := numericUser(user); ok && uid == 0 {
		return user, nil // root: nothing to own over
	}
	var out string
	var code int
	var err error
	for try := 0; ; try++ {
		out, code, err = w.rootExec(ctx, "set up user "+user+" in "+w.ID(), setupScript, user, w.spec.WorkDir, HomeDir)
		// A daemon under load may not know the task of a container it
		// has just started; it does a moment later.
		if err == nil || try == 2 || !strings.Contains(err.Error(), "not found") || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return "", err
	}
	if code == 3 {
		return "", fmt.Errorf("sandbox: docker: the workspace of %s cannot run as %q: %s (%w)", w.spec.Image, user, clipOut(out), ErrNoSuchUser)
	}
	if code != 0 {
		return "", fmt.Errorf("sandbox: docker: the workspace of %s cannot run as %q: %s", w.spec.Image, user, clipOut(out))
	}
	id := strings.TrimSpace(out)
	if i := strings.LastIndexByte(id, '\n'); i >= 0 {
		id = id[i+1:]
	}
	if _, _, ok := numericUser(id); !ok {
		return "", fmt.Errorf("sandbox: docker: the workspace of %s cannot run as %q: %s", w.spec.Image, user, clipOut(out))
	}
	return id, nil
}

// rootExec runs a script as root through an exec of its own (not Exec's
// wrapper), bounded in time, and returns its output (stdout and stderr
// together, at most 64 KiB) and exit status.
func (w *dockerWorkspace) rootExec(ctx context.Context, what, script string, args ...string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dockerTimeout)
	defer cancel()
	ex, err := w.d.cli.ExecCreate(ctx, w.id, client.ExecCreateOptions{Cmd: append([]string{"sh", "-c", script, "sh"}, args...),
		User: "0:0", AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", 0, errDaemon(what, err)
	}
	att, err := w.d.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return "", 0, errDaemon(what, err)
	}
	defer att.Close()
	out := &capWriter{limit: 64 << 10, over: func() {}}
	if _, err := stdcopy.StdCopy(out, out, att.Reader); err != nil {
		return "", 0, errDaemon(what, err)
	}
	code, err := w.exitCode(ctx, ex.ID)
	return string(out.bytes()), code, err
}

func clipOut(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// runKiller runs a kill script through an exec of its own as user ("":
// the container's), not Exec's wrapper, whose processes it would count;
// bounded in time.
func (w *dockerWorkspace) runKiller(ctx context.Context, what, user, script string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	// Attached to its output, the stream ends when the script does (not
	// attached, it would end at once, the script still running).
	ex, err := w.d.cli.ExecCreate(ctx, w.id, client.ExecCreateOptions{Cmd: append([]string{"sh", "-c", script, "sh"}, args...),
		User: user, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return errDaemon(what, err)
	}
	att, err := w.d.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return errDaemon(what, err)
	}
	defer att.Close()
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, att.Reader); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errDaemon(what, ctx.Err())
	}
}

// CopyIn uploads files under dir through the archive API, creating dir
// and the files' directories when missing; files are owned by the
// workspace's user (WorkspaceSpec.User, else the container's).
func (w *dockerWorkspace) CopyIn(ctx context.Context, dir string, files []File) error {
	if err := w.ended(); err != nil {
		return err
	}
	if !path.IsAbs(dir) || path.Clean(dir) != dir {
		return fmt.Errorf("sandbox: copy into %q: the directory must be a clean absolute path", dir)
	}
	for _, f := range files {
		if !validFileName(f.Name) {
			return fmt.Errorf("sandbox: file name %q must be a relative path inside %s", f.Name, dir)
		}
	}
	// The deepest directory that exists: the archive is extracted there,
	// with entries for the directories that do not exist yet (an entry
	// for an existing directory would reset its mode).
	base := dir
	var missing []string
	for {
		st, err := w.stat(ctx, base)
		if err == nil {
			if !st.Mode.IsDir() {
				return fmt.Errorf("sandbox: copy into %s: %s is not a directory", dir, base)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || base == "/" {
			return err
		}
		missing = append(missing, base)
		base = path.Dir(base)
	}
	rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, base), "/") }
	var dirs []string
	for i := len(missing) - 1; i >= 0; i-- {
		dirs = append(dirs, rel(missing[i]))
	}
	seen := map[string]bool{}
	for _, f := range files {
		for sub := path.Dir(f.Name); sub != "."; sub = path.Dir(sub) {
			seen[sub] = true
		}
	}
	for _, sub := range slices.Sorted(maps.Keys(seen)) {
		full := path.Join(dir, sub)
		if len(missing) == 0 {
			if _, err := w.stat(ctx, full); err == nil {
				continue
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		dirs = append(dirs, rel(full))
	}
	owner := w.spec.User
	if w.user != "" {
		owner = w.user
	}
	uid, gid, numeric := numericUser(owner)
	upload := func(copyUIDGID bool) error {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeTar(pw, dirs, files, rel(dir), uid, gid)) }()
		cctx, cancel := context.WithTimeout(ctx, dockerTimeout)
		defer cancel()
		_, err := w.d.cli.CopyToContainer(cctx, w.id, client.CopyToContainerOptions{DestinationPath: base, Content: pr, CopyUIDGID: copyUIDGID})
		pr.CloseWithError(errors.New("upload ended"))
		return err
	}
	// A numeric user owns the files by the archive's headers; the
	// image's own user by the daemon's lookup (which some daemons cannot
	// do: then root owns them).
	err := upload(!numeric)
	if err != nil && !numeric && strings.Contains(err.Error(), "getent") {
		err = upload(false)
	}
	if err != nil {
		if e := w.ended(); e != nil {
			return e
		}
		return errDaemon(fmt.Sprintf("copy %d files into %s:%s", len(files), w.ID(), dir), err)
	}
	return nil
}

// numericUser parses a container user of the form UID:GID.
func numericUser(user string) (uid, gid int, ok bool) {
	u, g, found := strings.Cut(user, ":")
	if !found {
		return 0, 0, false
	}
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	return uid, gid, err1 == nil && err2 == nil
}

// writeTar writes the archive CopyIn uploads: the directories, then the
// files under prefix.
func writeTar(out io.Writer, dirs []string, files []File, prefix string, uid, gid int) error {
	tw := tar.NewWriter(out)
	now := time.Now()
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, Uid: uid, Gid: gid, ModTime: now}); err != nil {
			return err
		}
	}
	for _, f := range files {
		mode := int64(f.Mode.Perm())
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(prefix, f.Name), Mode: mode, Uid: uid, Gid: gid, Size: int64(len(f.Data)), ModTime: now}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// stat is the archive API's stat of p; fs.ErrNotExist when there is none.
func (w *dockerWorkspace) stat(ctx context.Context, p string) (container.PathStat, error) {
	cctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	st, err := w.d.cli.ContainerStatPath(cctx, w.id, client.ContainerStatPathOptions{Path: p})
	if err != nil {
		if isNotFound(err) {
			return container.PathStat{}, fmt.Errorf("sandbox: %s:%s: %w", w.ID(), p, fs.ErrNotExist)
		}
		return container.PathStat{}, errDaemon("stat "+p+" in "+w.ID(), err)
	}
	return st.Stat, nil
}

// ReadFile reads at most max bytes of the file at p through the archive
// API, following symbolic links.
func (w *dockerWorkspace) ReadFile(ctx context.Context, p string, max int64) ([]byte, error) {
	if err := w.ended(); err != nil {
		return nil, err
	}
	for range 8 {
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("sandbox: read %q: the path must be absolute", p)
		}
		cctx, cancel := context.WithTimeout(ctx, dockerTimeout)
		res, err := w.d.cli.CopyFromContainer(cctx, w.id, client.CopyFromContainerOptions{SourcePath: p})
		if err != nil {
			cancel()
			if isNotFound(err) {
				return nil, fmt.Errorf("sandbox: %s:%s: %w", w.ID(), p, fs.ErrNotExist)
			}
			return nil, errDaemon("read "+p+" in "+w.ID(), err)
		}
		data, link, err := firstFile(res.Content, max)
		res.Content.Close()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("sandbox: read %s in %s: %w", p, w.ID(), err)
		}
		if link == "" {
			return data, nil
		}
		if !path.IsAbs(link) {
			link = path.Join(path.Dir(p), link)
		}
		p = link
	}
	return nil, fmt.Errorf("sandbox: read %s in %s: too many symbolic links", p, w.ID())
}

// firstFile reads the first entry of a tar stream: a regular file's first
// max bytes, or a symbolic link's target.
func firstFile(r io.Reader, max int64) (data []byte, link string, err error) {
	tr := tar.NewReader(r)
	h, err := tr.Next()
	if err != nil {
		return nil, "", fmt.Errorf("the daemon sent no file (%w)", err)
	}
	switch h.Typeflag {
	case tar.TypeSymlink:
		return nil, h.Linkname, nil
	case tar.TypeReg:
		data, err := io.ReadAll(io.LimitReader(tr, max))
		return data, "", err
	case tar.TypeDir:
		return nil, "", errors.New("is a directory")
	}
	return nil, "", fmt.Errorf("is not a regular file (tar type %q)", h.Typeflag)
}
