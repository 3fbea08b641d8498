package sandbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// docker runs each request in a container of its own through the Docker
// Engine API: network none, read-only root, tmpfs work directory and
// /tmp, all capabilities dropped, no-new-privileges, uid 65534, memory,
// pids and the rlimits of the request, removed afterwards. The request's
// files reach the container inside its command (base64, decoded by sh
// before the program starts), so no copy into a tmpfs that is not yet
// mounted is needed; the image needs sh and base64 (coreutils).
type docker struct {
	cli   *client.Client
	image string
	env   []string
	binds []string
}

// dockerPingTimeout bounds the probe of the daemon at start.
const dockerPingTimeout = 5 * time.Second

func newDocker(ctx context.Context, c Config) (Backend, error) {
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
		image = DefaultDockerImage
	}
	d := &docker{cli: cli, image: image, env: c.environ()}
	for _, p := range c.BindRO {
		d.binds = append(d.binds, p+":"+p+":ro")
	}
	return d, nil
}

func (d *docker) Name() string { return BackendDocker }

func (d *docker) Close() error { return d.cli.Close() }

// dockerScript writes the files and execs the command ("$@").
func dockerScript(req Request) string {
	var b strings.Builder
	b.WriteString("set -e\n")
	for _, name := range req.sortedFiles() {
		if i := strings.LastIndex(name, "/"); i > 0 {
			fmt.Fprintf(&b, "mkdir -p '%s'\n", name[:i])
		}
		fmt.Fprintf(&b, "printf %%s '%s' | base64 -d > '%s'\n", base64.StdEncoding.EncodeToString(req.Files[name]), name)
	}
	b.WriteString("exec \"$@\"\n")
	return b.String()
}

func (d *docker) Run(ctx context.Context, req Request) (Result, error) {
	l, err := req.start()
	if err != nil {
		return Result{}, err
	}
	for name := range req.Files {
		if strings.ContainsRune(name, '\'') {
			return Result{}, fmt.Errorf("sandbox: docker: file name %q contains a quote", name)
		}
	}
	var total int64
	for _, c := range req.Files {
		total += int64(len(c))
	}
	pids := int64(l.Processes)
	cpu := int64((l.CPUTime + time.Second - 1) / time.Second)
	created, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image: d.image, User: fmt.Sprintf("%d:%d", 65534, 65534), WorkingDir: WorkDir, Env: d.env,
			Cmd:         append([]string{"sh", "-c", dockerScript(req), "sh"}, req.Command...),
			AttachStdin: true, AttachStdout: true, AttachStderr: true, OpenStdin: true, StdinOnce: true,
			NetworkDisabled: true,
		},
		HostConfig: &container.HostConfig{
			NetworkMode: "none", ReadonlyRootfs: true, CapDrop: []string{"ALL"},
			SecurityOpt: []string{"no-new-privileges"}, Binds: d.binds,
			Tmpfs: map[string]string{
				WorkDir: fmt.Sprintf("rw,exec,size=%d,mode=1777", 2*l.FileSizeBytes+total),
				"/tmp":  fmt.Sprintf("rw,size=%d,mode=1777", l.FileSizeBytes),
			},
			Resources: container.Resources{
				Memory: l.MemoryBytes, MemorySwap: l.MemoryBytes, PidsLimit: &pids, NanoCPUs: 1e9,
				Ulimits: []*container.Ulimit{
					{Name: "cpu", Soft: cpu, Hard: cpu + 1},
					{Name: "fsize", Soft: l.FileSizeBytes, Hard: l.FileSizeBytes},
					{Name: "core", Soft: 0, Hard: 0},
				},
			},
		},
	})
	if err != nil {
		return Result{}, fmt.Errorf("sandbox: docker: create a container of %s: %w", d.image, err)
	}
	id := created.ID
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = d.cli.ContainerRemove(rctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}()
	att, err := d.cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return Result{}, fmt.Errorf("sandbox: docker: attach: %w", err)
	}
	defer att.Close()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var outputHit, wallHit atomic.Bool
	over := func() { outputHit.Store(true); cancel() }
	stdout := &capWriter{limit: l.OutputBytes, over: over}
	stderr := &capWriter{limit: l.OutputBytes, over: over}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, att.Reader)
		copied <- err
	}()
	start := time.Now()
	if _, err := d.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return Result{}, fmt.Errorf("sandbox: docker: start: %w", err)
	}
	go func() {
		_, _ = att.Conn.Write(req.Stdin)
		_ = att.CloseWrite()
	}()
	timer := time.AfterFunc(l.WallTime, func() { wallHit.Store(true); cancel() })
	defer timer.Stop()
	wait := d.cli.ContainerWait(runCtx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	res := Result{}
	select {
	case w := <-wait.Result:
		res.ExitCode = int(w.StatusCode)
		select {
		case <-copied:
		case <-time.After(2 * time.Second):
		}
	case err := <-wait.Error:
		if !errors.Is(err, context.Canceled) || ctx.Err() != nil || (!wallHit.Load() && !outputHit.Load()) {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			return Result{}, fmt.Errorf("sandbox: docker: wait: %w", err)
		}
		kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, _ = d.cli.ContainerKill(kctx, id, client.ContainerKillOptions{Signal: "KILL"})
		kcancel()
		res.ExitCode = 137
	}
	res.Time = time.Since(start)
	timer.Stop()
	res.Stdout, res.Stderr = stdout.bytes(), stderr.bytes()
	switch {
	case outputHit.Load():
		res.Limit = LimitOutput
	case wallHit.Load():
		res.Limit = LimitWallTime
	case res.ExitCode == 137:
		// The cgroup's OOM killer or the CPU rlimit's SIGKILL.
		insp, err := d.cli.ContainerInspect(context.WithoutCancel(ctx), id, client.ContainerInspectOptions{})
		if err == nil && insp.Container.State != nil && insp.Container.State.OOMKilled {
			res.Limit = LimitMemory
		}
	}
	Classify(&res, 0, l)
	return res, nil
}
