package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/rllm-org/rllm-go/internal/childenv"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Docker is the docker backend, through the Docker Engine API. Run gives
// each request a container of its own (a one-shot workspace: network
// none, read-only root, the work directory a size-bounded tmpfs volume
// the request's files are uploaded into through the archive API, /tmp a
// tmpfs, all capabilities dropped, no-new-privileges, uid 65534, memory,
// pids and CPU of the request), removed afterwards. Open gives a tool
// agent, a program or a verifier a long-lived workspace (workspace.go).
// Every container carries rllm's labels; the containers of an rllm that
// died without removing them are removed when the next one opens the
// backend (owner.go).
type Docker struct {
	cli   *client.Client
	image string
	env   []string
	// userEnv is sandbox.env alone (workspaces layer it over their
	// image's environment).
	userEnv []string
	binds   []string
	owner   *owner

	mu       sync.Mutex
	live     map[string]*dockerWorkspace // open workspaces by container id
	closed   bool
	warm     *warmPool
	removing sync.WaitGroup // removals of one-shot containers under way
	// diskEvery is how often workspaces' disk use is measured.
	diskEvery time.Duration
}

// dockerTimeout bounds one control call to the daemon (create, start,
// copy, inspect, remove): a daemon that accepts and never answers ends
// the call with an error instead of holding an episode forever.
const dockerTimeout = 60 * time.Second

// dockerPingTimeout bounds the probe of the daemon at start.
const dockerPingTimeout = 5 * time.Second

// dockerImageKey is the config key naming the image.
const dockerImageKey = "sandbox.docker.image"

func newDocker(ctx context.Context, c Config) (Backend, error) {
	d, err := OpenDocker(ctx, c)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// OpenDocker connects to the Docker daemon (DOCKER_HOST, or the default
// socket), checks that the image exists (c.DockerImage, or BaseImage when
// empty), and removes the containers that rllm processes no longer alive
// left behind. No daemon is a user error naming sandbox.backend; no image
// one naming sandbox.docker.image.
func OpenDocker(ctx context.Context, c Config) (*Docker, error) {
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, errUnavailable(BackendDocker, "the Docker client cannot be set up: "+err.Error())
	}
	pctx, cancel := context.WithTimeout(ctx, dockerPingTimeout)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, errUnavailable(BackendDocker, "no Docker daemon answers ("+err.Error()+")")
	}
	image := c.DockerImage
	if image == "" {
		image = BaseImage()
	}
	if err := checkImage(pctx, cli, image); err != nil {
		cli.Close()
		return nil, err
	}
	d := &Docker{cli: cli, image: image, env: c.environ(), userEnv: childenv.List(c.Env), owner: self(), live: map[string]*dockerWorkspace{}, diskEvery: diskCheckEvery}
	for _, p := range c.BindRO {
		d.binds = append(d.binds, p+":"+p+":ro")
	}
	d.warm = newWarmPool(d, c.DockerWarm)
	sctx, scancel := context.WithTimeout(ctx, dockerTimeout)
	defer scancel()
	_ = sweepOnce(sctx, cli)
	register(d)
	return d, nil
}

// checkImage says, as a user error naming sandbox.docker.image, that the
// daemon lacks image (rllm pulls nothing: images come from a registry the
// user pulls from, a build, or scripts/docker-setup.sh).
func checkImage(ctx context.Context, cli *client.Client, image string) error {
	_, err := cli.ImageInspect(ctx, image)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return errUnavailable(BackendDocker, fmt.Sprintf("the Docker daemon cannot inspect image %s (%v)", image, err))
	}
	fix := "docker pull or docker build it, or set " + dockerImageKey + " to an image the daemon has"
	if image == BaseImage() {
		fix = "build the local base image with scripts/docker-setup.sh (Debian packages, no registry), or set " + dockerImageKey + " to an image the daemon has"
	}
	return &usererr.Error{Subject: dockerImageKey, Msg: fmt.Sprintf("the Docker daemon has no image %s", image), Fix: fix}
}

// Name is the backend's sandbox.backend value.
func (d *Docker) Name() string { return BackendDocker }

// Image is the image Run uses (sandbox.docker.image).
func (d *Docker) Image() string { return d.image }

// Close removes the backend's warm containers and every workspace still
// open, then closes the client.
func (d *Docker) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	open := make([]*dockerWorkspace, 0, len(d.live))
	for _, w := range d.live {
		open = append(open, w)
	}
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	d.warm.close(ctx)
	var errs []error
	for _, w := range open {
		errs = append(errs, w.Close(ctx))
	}
	done := make(chan struct{})
	go func() { d.removing.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	unregister(d)
	errs = append(errs, d.cli.Close())
	return errors.Join(errs...)
}

// Run runs req in a one-shot workspace: the files uploaded into WorkDir,
// the command executed with req's stdin, the container removed after.
func (d *Docker) Run(ctx context.Context, req Request) (Result, error) {
	l, err := req.start()
	if err != nil {
		return Result{}, err
	}
	var total int64
	for _, c := range req.Files {
		total += int64(len(c))
	}
	w, err := d.open(ctx, d.runSpec(l, total))
	if err != nil {
		return Result{}, err
	}
	// The container is removed behind the result (Close waits for the
	// removals still under way).
	defer w.closeLater()
	if len(req.Files) > 0 {
		files := make([]File, 0, len(req.Files))
		for _, name := range req.sortedFiles() {
			files = append(files, File{Name: name, Data: req.Files[name]})
		}
		if err := w.CopyIn(ctx, WorkDir, files); err != nil {
			return Result{}, err
		}
	}
	return w.Exec(ctx, ExecRequest{Command: req.Command, Stdin: req.Stdin, Stream: req.Stream, Limits: l})
}

// runSpec is the one-shot container of a request with limits l and
// total bytes of files.
func (d *Docker) runSpec(l Limits, total int64) containerSpec {
	return containerSpec{
		Image: d.image, WorkDir: WorkDir, Limits: l, Life: l.WallTime + 30*time.Second, Env: d.env, Binds: d.binds,
		ReadOnlyRoot: true, ProcessMemory: true, User: "65534:65534", WorkDirBytes: 2*l.FileSizeBytes + ceilPow2(total),
	}
}

// ceilPow2 is the least power of two at least n (1 MiB at least): runs
// whose files differ a little in size share one container shape, and so
// the warm pool's containers.
func ceilPow2(n int64) int64 {
	p := int64(1 << 20)
	for p < n {
		p <<= 1
	}
	return p
}

// errDaemon wraps an error of the daemon with what was being done, and
// says plainly when the daemon went away.
func errDaemon(doing string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("sandbox: docker: %s: %w", doing, err)
	}
	if daemonGone(err) {
		return fmt.Errorf("sandbox: docker: %s: the Docker daemon stopped answering (%w)", doing, err)
	}
	return fmt.Errorf("sandbox: docker: %s: %w", doing, err)
}

// daemonGone reports an error of a daemon that is not there any more: no
// connection, or one it closed in the middle.
func daemonGone(err error) bool {
	return client.IsErrConnectionFailed(err) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// isNotFound reports the daemon's "no such" answers.
func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }

// trimLog keeps the last n lines of a log.
func trimLog(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
