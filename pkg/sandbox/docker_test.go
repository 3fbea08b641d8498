package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// requireDockerEnv, when set to 1 (.ci/run sets it once
// scripts/docker-setup.sh has succeeded), turns the docker tests' skips
// into failures: CI runs them for real.
const requireDockerEnv = "RLLM_REQUIRE_DOCKER"

// dockerFor opens the docker backend on the daemon of DOCKER_HOST with the
// local base image (BaseImage, as scripts/docker-setup.sh tags it). It
// skips, saying why, where no daemon answers or the image is absent, unless
// RLLM_REQUIRE_DOCKER=1.
func dockerFor(t testing.TB, c Config) *Docker {
	t.Helper()
	c.Backend = BackendDocker
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := OpenDocker(ctx, c)
	if err != nil {
		var ue *usererr.Error
		if errors.As(err, &ue) && os.Getenv(requireDockerEnv) != "1" {
			t.Skipf("the docker backend is not exercised here (%v); scripts/docker-setup.sh sets it up", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func dockerSmall(t testing.TB) *Docker {
	t.Helper()
	return dockerFor(t, Config{Limits: small})
}

// TestDockerRun: the one-shot path, files uploaded through the archive
// API, stdin, stdout, stderr and the exit status; the program runs as an
// unprivileged user that can write its work directory (it used to fail
// with "cannot create harness.py: Permission denied").
func TestDockerRun(t *testing.T) {
	d := dockerSmall(t)
	res := run(t, d, Request{Command: []string{"sh", "-c", "cat; echo err >&2; cat sub/dir/f.txt; echo new > harness.py && cat harness.py; id -u; exit 3"},
		Stdin: []byte("in\n"), Files: map[string][]byte{"sub/dir/f.txt": []byte("file\n"), "main.py": []byte("print(1)\n")}})
	if res.ExitCode != 3 || string(res.Stdout) != "in\nfile\nnew\n65534\n" || string(res.Stderr) != "err\n" || res.Limit != LimitNone {
		t.Fatalf("got %+v (stdout %q stderr %q)", res, res.Stdout, res.Stderr)
	}
	res = run(t, d, py("print(open('main.py').read().strip())\n"))
	if !res.OK() || string(res.Stdout) != "print(open('main.py').read().strip())\n" {
		t.Fatalf("python: %+v (%s) stdout %q", res, res.Reason(), res.Stdout)
	}
}

// TestDockerLargeFile: a file far past the ~96 KiB that fitted in one
// sh -c argument arrives whole (it failed with "argument list too long").
func TestDockerLargeFile(t *testing.T) {
	d := dockerSmall(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	big = append(big, 0, 1, 255)
	res := run(t, d, Request{Command: []string{"sh", "-c", "wc -c < tests.json; cksum < tests.json"}, Files: map[string][]byte{"tests.json": big}})
	want := fmt.Sprintf("%d\n", len(big))
	if !res.OK() || !strings.HasPrefix(string(res.Stdout), want) {
		t.Fatalf("got %+v (%s) stdout %q, want %q first", res, res.Reason(), res.Stdout, want)
	}
}

// TestHostileDocker runs the bad programs of TestHostileBwrap in docker
// containers: each ends with its limit, and nothing reaches the host.
func TestHostileDocker(t *testing.T) {
	d := dockerSmall(t)
	port, reached := repotest.HostListener(t)
	marker := filepath.Join(os.TempDir(), fmt.Sprintf("rllm-docker-escape-%d", os.Getpid()))
	defer os.Remove(marker)
	// A busy machine may take long for one CPU second: the CPU-bound
	// loop gets a wall time far above its CPU time.
	longWall := small
	longWall.WallTime = 5 * time.Minute
	shortWall := small
	shortWall.WallTime = 2 * time.Second
	tests := []struct {
		name   string
		code   string
		limit  Limit
		limits Limits
	}{
		{"fork bomb", "import os\nwhile True:\n    os.fork()\n", LimitProcesses, Limits{}},
		{"endless allocation", "x = []\nwhile True:\n    x.append(bytearray(1 << 24))\n", LimitMemory, Limits{}},
		{"infinite loop", "while True:\n    pass\n", LimitCPUTime, longWall},
		{"1 GB print", "import sys\nb = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(b)\n", LimitOutput, Limits{}},
		{"sleep past the timeout", "import time\ntime.sleep(60)\n", LimitWallTime, shortWall},
		{"big file", "open('f', 'w').write('x' * (4 << 20))\n", LimitFileSize, Limits{}},
		{"write host /tmp", fmt.Sprintf("open(%q, 'w').write('escaped')\n", marker), LimitNone, Limits{}},
		{"write the root", "open('/etc/x', 'w').write('x')\n", LimitNone, Limits{}},
		{"tcp connect", fmt.Sprintf("import socket\ns = socket.create_connection(('127.0.0.1', %d), timeout=2)\nprint('connected')\n", port), LimitNone, Limits{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := py(tc.code)
			req.Limits = tc.limits
			res := run(t, d, req)
			if res.Limit != tc.limit {
				t.Errorf("limit %q, want %q (exit %d, stderr %q)", res.Limit, tc.limit, res.ExitCode, tail(res.Stderr))
			}
			if tc.name != "write host /tmp" && res.OK() {
				t.Errorf("the program succeeded: stdout %q", tail(res.Stdout))
			}
			if int64(len(res.Stdout)) > small.OutputBytes || int64(len(res.Stderr)) > small.OutputBytes {
				t.Errorf("output kept past the cap: %d, %d", len(res.Stdout), len(res.Stderr))
			}
		})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the container wrote %s on the host", marker)
	}
	if reached() {
		t.Error("the container reached a listener on the host's 127.0.0.1")
	}
}

// TestDockerCancel: cancelling the context ends Run with the context's
// error and removes the container.
func TestDockerCancel(t *testing.T) {
	d := dockerSmall(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := d.Run(ctx, Request{Command: []string{"sleep", "30"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the context's", err)
	}
	d.removing.Wait()
	if n := ownContainers(t, d); n != 0 {
		t.Fatalf("%d containers of this run remain", n)
	}
}

// ownContainers counts the containers of this process on the daemon.
func ownContainers(t testing.TB, d *Docker) int {
	t.Helper()
	list, err := d.cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelRun+"="+d.owner.run)})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

func openWS(t *testing.T, d *Docker, spec WorkspaceSpec) Workspace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := d.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	return w
}

func execWS(t *testing.T, w Workspace, req ExecRequest) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := w.Exec(ctx, req)
	if err != nil {
		t.Fatalf("Exec %v: %v", req.Command, err)
	}
	return res
}

// TestDockerWorkspace: files and processes persist between commands;
// CopyIn creates directories and takes a file of any size; ReadFile reads
// back, bounded, and says fs.ErrNotExist; Close removes the container.
func TestDockerWorkspace(t *testing.T) {
	d := dockerSmall(t)
	w := openWS(t, d, WorkspaceSpec{WorkDir: "/app", Env: []string{"A=1"}, Labels: map[string]string{"org.rllm.task": "t1"}})
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), 300<<10)
	if err := w.CopyIn(ctx, "/app/src/pkg", []File{{Name: "a.py", Data: []byte("print('a')\n")}, {Name: "deep/b.txt", Data: big}, {Name: "run.sh", Mode: 0o755, Data: []byte("#!/bin/sh\necho ran $A $B\n")}}); err != nil {
		t.Fatal(err)
	}
	res := execWS(t, w, ExecRequest{Command: []string{"sh", "-c", "pwd; python3 src/pkg/a.py; wc -c < src/pkg/deep/b.txt; src/pkg/run.sh; echo kept > state"}, Env: []string{"B=2"}})
	if !res.OK() || string(res.Stdout) != "/app\na\n307200\nran 1 2\n" {
		t.Fatalf("got %+v (%s) stdout %q stderr %q", res, res.Reason(), res.Stdout, res.Stderr)
	}
	res = execWS(t, w, ExecRequest{Command: []string{"cat", "state"}, Dir: "/app"})
	if string(res.Stdout) != "kept\n" {
		t.Fatalf("state not kept: %q", res.Stdout)
	}
	got, err := w.ReadFile(ctx, "/app/src/pkg/deep/b.txt", 10)
	if err != nil || string(got) != "xxxxxxxxxx" {
		t.Fatalf("ReadFile: %q %v", got, err)
	}
	if _, err := w.ReadFile(ctx, "/app/none", 10); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadFile of a missing file: %v", err)
	}
	// A file the command wrote, through a symbolic link.
	execWS(t, w, ExecRequest{Command: []string{"sh", "-c", "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && ln -s /logs/verifier/reward.txt /app/r"}})
	if got, err := w.ReadFile(ctx, "/app/r", 100); err != nil || string(got) != "1\n" {
		t.Fatalf("ReadFile through a link: %q %v", got, err)
	}
	// CopyIn into an existing system directory keeps its mode.
	if err := w.CopyIn(ctx, "/tmp", []File{{Name: "x", Data: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	res = execWS(t, w, ExecRequest{Command: []string{"stat", "-c", "%a", "/tmp"}})
	if string(res.Stdout) != "1777\n" {
		t.Fatalf("/tmp's mode is now %q", res.Stdout)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := w.Exec(ctx, ExecRequest{Command: []string{"true"}}); err == nil {
		t.Fatal("Exec after Close succeeded")
	}
	if n := ownContainers(t, d); n != 0 {
		t.Fatalf("%d containers remain after Close", n)
	}
}

// TestDockerWorkspaceLimits: a command past its wall time is killed with
// what it started (a background child included), and the workspace goes
// on; memory, processes and disk are the workspace's.
func TestDockerWorkspaceLimits(t *testing.T) {
	d := dockerSmall(t)
	d.diskEvery = 100 * time.Millisecond
	lim := small
	lim.WallTime = 0
	lim.DiskBytes = 8 << 20
	w := openWS(t, d, WorkspaceSpec{Limits: lim})
	short := Limits{WallTime: 2 * time.Second}
	res := execWS(t, w, ExecRequest{Command: []string{"sh", "-c", "(sleep 300; echo late) & sleep 300"}, Limits: short})
	if res.Limit != LimitWallTime {
		t.Fatalf("limit %q, want wall_time: %+v", res.Limit, res)
	}
	res = execWS(t, w, ExecRequest{Command: []string{"sh", "-c", "ps -eo args | grep -c '^sleep 300' || true"}})
	if strings.TrimSpace(string(res.Stdout)) != "0" {
		t.Fatalf("processes of the killed command remain: %q %q", res.Stdout, res.Stderr)
	}
	res = execWS(t, w, ExecRequest{Command: []string{"python3", "-c", "import os\nwhile True: os.fork()"}})
	if res.Limit != LimitProcesses {
		t.Fatalf("fork bomb: limit %q (%s)", res.Limit, res.Reason())
	}
	// Fill the disk: many files each within the file size limit.
	res = execWS(t, w, ExecRequest{Command: []string{"sh", "-c", "i=0; while :; do i=$((i+1)); head -c 1000000 /dev/zero > /fill$i || exit 1; done"}, Limits: Limits{WallTime: 10 * time.Minute}})
	if res.Limit != LimitDisk {
		t.Fatalf("disk: limit %q (%s)", res.Limit, res.Reason())
	}
	if _, err := w.Exec(context.Background(), ExecRequest{Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "disk limit exceeded") {
		t.Fatalf("Exec after the disk limit: %v", err)
	}
}

// TestDockerWorkspaceLife: the workspace's WallTime ends it, and the
// command running then reports it.
func TestDockerWorkspaceLife(t *testing.T) {
	d := dockerSmall(t)
	lim := small
	lim.WallTime = 3 * time.Second
	w := openWS(t, d, WorkspaceSpec{Limits: lim})
	// On a busy machine the life may end before the command starts:
	// then Exec says why the workspace ended.
	res, err := w.Exec(context.Background(), ExecRequest{Command: []string{"sleep", "600"}, Limits: Limits{WallTime: 10 * time.Minute}})
	if err != nil && !strings.Contains(err.Error(), "ended: time limit exceeded (wall time)") || err == nil && res.Limit != LimitWallTime {
		t.Fatalf("limit %q, err %v", res.Limit, err)
	}
	if _, err := w.Exec(context.Background(), ExecRequest{Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "ended") {
		t.Fatalf("Exec after the workspace's life: %v", err)
	}
}

// TestDockerImageMissing: a daemon that answers without the image is a
// user error naming the image and sandbox.docker.image (the suite used to
// fail here, and validate-config said valid).
func TestDockerImageMissing(t *testing.T) {
	dockerSmall(t) // skips where no daemon answers
	_, err := OpenDocker(context.Background(), Config{DockerImage: "rllm-no-such-image:0", Limits: small})
	var ue *usererr.Error
	if !errors.As(err, &ue) || ue.Subject != "sandbox.docker.image" || !strings.Contains(err.Error(), "rllm-no-such-image:0") {
		t.Fatalf("err %v", err)
	}
}

// TestDockerBuildImage: a context builds once, its tag is the context's
// hash and is reused; a Dockerfile that fails names the directory and the
// end of the build log.
func TestDockerBuildImage(t *testing.T) {
	d := dockerSmall(t)
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("environment/Dockerfile", "FROM "+BaseImage()+"\nWORKDIR /app\nCOPY src/ /app/\nRUN echo built > /app/stamp\n")
	write("src/hello.py", "print('hello from the image')\n")
	write("src/secret.txt", "not for the image\n")
	write(".dockerignore", "src/secret.txt\n")
	ctx := context.Background()
	tag, err := d.BuildImage(ctx, dir, filepath.Join(dir, "environment/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tag, BuiltImageRepo+":") {
		t.Fatalf("tag %q", tag)
	}
	t.Cleanup(func() { d.cli.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{Force: true}) })
	insp, err := d.cli.ImageInspect(ctx, tag)
	if err != nil || insp.Config == nil || insp.Config.Labels[LabelContext] == "" || insp.Config.Labels["org.rllm.build.owner.pid"] != d.owner.pid || insp.Config.Labels[LabelOwnerPID] != "" {
		t.Fatalf("image %s: %v (labels %v)", tag, err, insp.Config)
	}
	again, err := d.BuildImage(ctx, dir, filepath.Join(dir, "environment/Dockerfile"))
	if err != nil || again != tag {
		t.Fatalf("second build: %q %v, want %q", again, err, tag)
	}
	if insp2, _ := d.cli.ImageInspect(ctx, tag); insp2.ID != insp.ID {
		t.Fatalf("the image was built again: %s then %s", insp.ID, insp2.ID)
	}
	// Another process's build of the same context takes the tag: the
	// image left without one is removed.
	write("environment/Dockerfile", "FROM "+BaseImage()+"\nWORKDIR /app\nCOPY src/ /app/\nRUN echo built > /app/stamp\nRUN echo other > /app/other\n")
	if err := runBuild(ctx, d.cli, dir, "environment/Dockerfile", tag, insp.Config.Labels[LabelContext]); err != nil {
		t.Fatal(err)
	}
	if _, err := d.cli.ImageInspect(ctx, insp.ID); !isNotFound(err) {
		t.Fatalf("the superseded image %s: %v", insp.ID, err)
	}
	w := openWS(t, d, WorkspaceSpec{Image: tag, WorkDir: "/app"})
	res := execWS(t, w, ExecRequest{Command: []string{"sh", "-c", "python3 hello.py; cat stamp; ls"}})
	if string(res.Stdout) != "hello from the image\nbuilt\nhello.py\nother\nstamp\n" {
		t.Fatalf("in the built image: %+v stdout %q stderr %q", res, res.Stdout, res.Stderr)
	}

	write("environment/Dockerfile", "FROM "+BaseImage()+"\nRUN echo preparing the repo && echo broken-step-output >&2 && exit 3\n")
	_, err = d.BuildImage(ctx, dir, filepath.Join(dir, "environment/Dockerfile"))
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "preparing the repo") || !strings.Contains(err.Error(), "returned a non-zero code: 3") {
		t.Fatalf("failed build: %v", err)
	}
	if _, err := d.BuildImage(ctx, dir, filepath.Join(dir, "nowhere/Dockerfile")); err == nil || !strings.Contains(err.Error(), "no Dockerfile") {
		t.Fatalf("missing Dockerfile: %v", err)
	}
}

// TestDockerSweep: the containers of a process that is gone (its pid
// free, or taken by a process started at another time) are removed; this
// process's own, and those of another host, are not.
func TestDockerSweep(t *testing.T) {
	d := dockerSmall(t)
	ctx := context.Background()
	me := d.owner
	create := func(labels map[string]string) string {
		t.Helper()
		cfgLabels := map[string]string{"org.rllm.test": t.Name()}
		for k, v := range labels {
			cfgLabels[k] = v
		}
		created, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: d.image, Cmd: []string{"sleep", "60"}, Labels: cfgLabels}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.remove(created.ID) })
		return created.ID
	}
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	other := func(pid, start, host string) map[string]string {
		return map[string]string{LabelRun: "other", LabelOwnerHost: host, LabelOwnerBoot: me.boot, LabelOwnerPIDNS: me.pidns, LabelOwnerPID: pid, LabelOwnerStart: start}
	}
	// An owner in another PID namespace: its pid means nothing here.
	otherNS := func(pid, start, boot string) map[string]string {
		l := other(pid, start, me.host)
		l[LabelOwnerPIDNS], l[LabelOwnerBoot] = "pid:[1]", boot
		return l
	}
	legacy := other(strconv.Itoa(exited.Process.Pid), "12345", me.host)
	delete(legacy, LabelOwnerPIDNS)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		gone   bool
	}{
		{"a dead owner", other(strconv.Itoa(exited.Process.Pid), "12345", me.host), true},
		{"an owner whose pid was reused", other(me.pid, "1", me.host), true},
		{"a dead owner that named no namespace", legacy, false},
		{"this process", me.labels(), false},
		{"another host", other("1", "1", me.host+"-elsewhere"), false},
		{"another namespace, a pid gone here", otherNS(strconv.Itoa(exited.Process.Pid), "12345", me.boot), false},
		{"another namespace, a pid alive here", otherNS(me.pid, "1", me.boot), false},
		{"another namespace, before this boot", otherNS("1", "1", "an-earlier-boot"), true},
	} {
		id := create(tc.labels)
		removed, err := sweep(ctx, d.cli, me)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(removed, id) != tc.gone {
			t.Errorf("%s: removed %v, want it removed: %v", tc.name, removed, tc.gone)
		}
	}
}

// TestDockerSweepOtherNamespace: two rllm (or two test binaries) on one
// daemon's host, in PID namespaces of their own, leave each other's
// containers alone: the sweep of this process does not take the pid of
// an rllm in another namespace (pid 1 there) for one of its own.
func TestDockerSweepOtherNamespace(t *testing.T) {
	if os.Getenv("RLLM_SANDBOX_NS_OWNER") == "1" {
		d, err := OpenDocker(context.Background(), Config{Backend: BackendDocker, Limits: small})
		if err != nil {
			fmt.Println("error", err)
			return
		}
		w, err := d.Open(context.Background(), WorkspaceSpec{})
		if err != nil {
			fmt.Println("error", err)
			return
		}
		fmt.Println("open", w.(*dockerWorkspace).id)
		time.Sleep(time.Hour)
		return
	}
	d := dockerSmall(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare to start a process in a PID namespace of its own")
	}
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--kill-child", os.Args[0], "-test.run=^TestDockerSweepOtherNamespace$")
	cmd.Env = append(os.Environ(), "RLLM_SANDBOX_NS_OWNER=1")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line := make([]byte, 256)
	n, _ := io.ReadAtLeast(out, line, 70)
	var id string
	if _, err := fmt.Sscanf(string(line[:n]), "open %s", &id); err != nil {
		if strings.Contains(errOut.String(), "Operation not permitted") {
			t.Skipf("no PID namespace can be made here: %s", errOut.String())
		}
		t.Fatalf("the process in its own namespace said %q (stderr %q)", line[:n], errOut.String())
	}
	t.Cleanup(func() { d.remove(id) })
	ctx := context.Background()
	insp, err := d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l := insp.Container.Config.Labels; l[LabelOwnerPIDNS] == d.owner.pidns || l[LabelOwnerPIDNS] == "" {
		t.Fatalf("the other process's container names PID namespace %q, this one's is %q", l[LabelOwnerPIDNS], d.owner.pidns)
	}
	removed, err := sweep(ctx, d.cli, d.owner)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(removed, id) {
		t.Fatalf("this process's sweep removed %s, the container of a live rllm in another PID namespace (pid %s there)", shortID(id), insp.Container.Config.Labels[LabelOwnerPID])
	}
}

// TestDockerWorkspaceSocket: with Network.Socket set, the socket is at
// SocketPath inside, and a program there reaches the
// host's listener through it (the gateway's forwarder serves it on the
// workspace's loopback); nothing else of the network is reachable.
func TestDockerWorkspaceSocket(t *testing.T) {
	d := dockerSmall(t)
	sock := filepath.Join(t.TempDir(), "gw.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 64)
		n, _ := c.Read(b)
		got <- string(b[:n])
	}()
	w := openWS(t, d, WorkspaceSpec{Network: Network{Socket: sock}})
	code := fmt.Sprintf("import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(%q)\ns.sendall(b'hello gateway')\n", SocketPath)
	res := execWS(t, w, ExecRequest{Command: []string{"python3", "-c", code}})
	if !res.OK() {
		t.Fatalf("%+v (%s) stderr %q", res, res.Reason(), res.Stderr)
	}
	select {
	case s := <-got:
		if s != "hello gateway" {
			t.Fatalf("got %q", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing arrived through the socket")
	}
	res = execWS(t, w, ExecRequest{Command: []string{"python3", "-c", "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)"}})
	if res.OK() {
		t.Fatal("the workspace reached an outside address")
	}
}

// TestDockerWarmPool: after a run, containers of its shape are started and
// wait; the next run takes one (it is gone from the daemon after), the
// queue refills, and Close removes the waiting ones.
func TestDockerWarmPool(t *testing.T) {
	d := dockerFor(t, Config{Limits: small, DockerWarm: 2})
	req := Request{Command: []string{"sh", "-c", "cat f"}, Files: map[string][]byte{"f": []byte("warm\n")}, Limits: small}
	if res := run(t, d, req); string(res.Stdout) != "warm\n" {
		t.Fatalf("cold run: %+v", res)
	}
	waitWarm := func(n int) {
		t.Helper()
		for i := 0; d.warm.waiting() < n; i++ {
			if i > 1200 {
				t.Fatalf("%d containers wait, want %d", d.warm.waiting(), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitWarm(2)
	d.warm.mu.Lock()
	var first string
	for _, q := range d.warm.ready {
		first = q[0].id
	}
	d.warm.mu.Unlock()
	if res := run(t, d, req); string(res.Stdout) != "warm\n" {
		t.Fatalf("warm run: %+v", res)
	}
	d.removing.Wait()
	if _, err := d.cli.ContainerInspect(context.Background(), first, client.ContainerInspectOptions{}); !isNotFound(err) {
		t.Fatalf("the first warm container %s was not the one used and removed: %v", shortID(first), err)
	}
	waitWarm(2)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := ownContainers(t, d); n != 0 {
		t.Fatalf("%d containers remain after Close", n)
	}
}

// TestDockerKill9: a process killed with SIGKILL while it holds a
// workspace leaves its container; the next sweep (what the next rllm
// does when it opens the docker backend) removes it.
func TestDockerKill9(t *testing.T) {
	if os.Getenv("RLLM_SANDBOX_LEAKER") == "1" {
		d, err := OpenDocker(context.Background(), Config{Limits: small})
		if err != nil {
			fmt.Println("error", err)
			return
		}
		w, err := d.Open(context.Background(), WorkspaceSpec{})
		if err != nil {
			fmt.Println("error", err)
			return
		}
		fmt.Println("open", w.(*dockerWorkspace).id)
		time.Sleep(time.Hour)
		return
	}
	d := dockerSmall(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDockerKill9$")
	cmd.Env = append(os.Environ(), "RLLM_SANDBOX_LEAKER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 256)
	n, _ := io.ReadAtLeast(out, line, 70)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	var id string
	if _, err := fmt.Sscanf(string(line[:n]), "open %s", &id); err != nil {
		t.Fatalf("the helper said %q", line[:n])
	}
	ctx := context.Background()
	if _, err := d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("the killed process's container is not there to sweep: %v", err)
	}
	removed, err := sweep(ctx, d.cli, d.owner)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, id) {
		t.Fatalf("sweep removed %v, not the killed process's %s", removed, shortID(id))
	}
	if _, err := d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); !isNotFound(err) {
		t.Fatalf("container %s still there: %v", shortID(id), err)
	}
}

// TestCloseAll: what the CLI calls on its way out removes the open
// workspaces.
func TestCloseAll(t *testing.T) {
	d := dockerSmall(t)
	openWS(t, d, WorkspaceSpec{})
	openWS(t, d, WorkspaceSpec{WorkDir: "/app"})
	if n := ownContainers(t, d); n != 2 {
		t.Fatalf("%d containers, want 2", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	CloseAll(ctx)
	if n := ownContainers(t, d); n != 0 {
		t.Fatalf("%d containers remain after CloseAll", n)
	}
}

// TestDockerImageWithoutSleep: an image the workspace's idle process
// cannot run in says so at the first command.
func TestDockerImageWithoutSleep(t *testing.T) {
	d := dockerSmall(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+BaseImage()+"\nRUN rm /usr/bin/sleep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tag, err := d.BuildImage(context.Background(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.cli.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{Force: true}) })
	w := openWS(t, d, WorkspaceSpec{Image: tag})
	var res Result
	for range 600 { // the container stops a moment after it starts
		if res, err = w.Exec(context.Background(), ExecRequest{Command: []string{"true"}}); err != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "needs sh and sleep") {
		t.Fatalf("res %+v err %v", res, err)
	}
}

// TestDockerWorkspaceForwarder: as in bwrap, a container's only network
// is its session: 127.0.0.1:Port inside reaches the socket through the
// forwarder (rllm, bound read-only), everything else is refused and
// counted.
func TestDockerWorkspaceForwarder(t *testing.T) {
	d := dockerSmall(t)
	sock := sockServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "session answered %s", r.URL.Path)
	}))
	w := openWS(t, d, WorkspaceSpec{Network: Network{Socket: sock, Port: 8123}})
	py := `import urllib.request
print(urllib.request.urlopen("http://127.0.0.1:8123/sessions/x/v1/models", timeout=10).read().decode())
for url in ["http://127.0.0.1:9/", "http://1.2.3.4/"]:
    try:
        urllib.request.urlopen(url, timeout=5)
        print("LEAK", url)
    except Exception as e:
        print("refused", type(e).__name__)
`
	for i := 0; i < 2; i++ { // a second command gets its own forwarder
		res := execWS(t, w, ExecRequest{Command: []string{"python3", "-c", py}, Limits: Limits{WallTime: time.Minute}})
		out := string(res.Stdout)
		if !res.OK() || !strings.Contains(out, "session answered /sessions/x/v1/models") {
			t.Fatalf("the session was not reached: %s\n%s%s", res.Reason(), out, res.Stderr)
		}
		if strings.Contains(out, "LEAK") || strings.Count(out, "refused") != 2 {
			t.Errorf("the container reached something besides its session:\n%s", out)
		}
		if res.Net == nil || res.Net.Forwarded != 1 || res.Net.Denied < 2 {
			t.Errorf("net report = %+v, want 1 forwarded and at least 2 denied", res.Net)
		}
	}
}

// TestDockerWorkspaceKillAll: what commands left running (here detached
// from their command: a new session, no environment) is gone after
// KillAll, and the workspace still runs commands.
func TestDockerWorkspaceKillAll(t *testing.T) {
	d := dockerSmall(t)
	w := openWS(t, d, WorkspaceSpec{})
	ctx := context.Background()
	left := `env -i setsid sh -c 'sleep 300 & sleep 300' >/dev/null 2>&1 </dev/null & echo ok`
	if res, err := w.Exec(ctx, ExecRequest{Command: []string{"sh", "-c", left}}); err != nil || !res.OK() {
		t.Fatalf("res %+v err %v", res, err)
	}
	count := `n=0; for d in /proc/[0-9]*; do n=$((n+1)); done; echo $n`
	before, err := w.Exec(ctx, ExecRequest{Command: []string{"sh", "-c", count}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := w.Exec(ctx, ExecRequest{Command: []string{"sh", "-c", count}})
	if err != nil || !after.OK() {
		t.Fatalf("the workspace no longer runs commands after KillAll: %+v %v", after, err)
	}
	// init, the idle process, the counting shell (and its exec wrapper's
	// processes, if any) remain; the shell and its two sleeps are gone.
	b, _ := strconv.Atoi(strings.TrimSpace(string(before.Stdout)))
	a, _ := strconv.Atoi(strings.TrimSpace(string(after.Stdout)))
	if a > b-3 {
		t.Fatalf("%d processes before KillAll, %d after: what was left running survived", b, a)
	}
}

// TestHostileDockerWorkspace: a workspace's root (root in the container,
// as a task's agent is) finds nothing of the host it can write. The
// session's socket is bound alone, read-only, in a read-only directory:
// writing or creating there, replacing or re-moding the socket, and
// planting a setuid copy of a shell in the socket's host directory (a
// root shell for any local user) all fail; so do writes to the files the
// daemon binds for the container's names, outside every disk limit. Every
// mount of a host file system is read-only, and the forwarder still
// reaches the session.
func TestHostileDockerWorkspace(t *testing.T) {
	d := dockerSmall(t)
	sock := sockServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "session answered %s", r.URL.Path)
	}))
	hostDir := filepath.Dir(sock)
	before, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	w := openWS(t, d, WorkspaceSpec{Network: Network{Socket: sock}})
	for _, tc := range []struct{ name, cmd string }{
		{"write into the socket's directory", "head -c 80000000 /dev/zero > " + runDir + "/fill"},
		{"create in the socket's directory", "touch " + runDir + "/x"},
		{"plant a setuid shell beside the socket", "cp /bin/dash " + runDir + "/rootsh && chmod 4755 " + runDir + "/rootsh"},
		{"remove the socket", "rm -f " + SocketPath + " && ! test -S " + SocketPath},
		{"replace the socket", "echo x > /tmp/f && mv -f /tmp/f " + SocketPath},
		{"replace the socket by a link", "ln -sfn /tmp/f " + SocketPath + " && test -L " + SocketPath},
		{"re-mode the socket", "chmod 0700 " + SocketPath},
		{"own the socket", "chown 65534 " + SocketPath},
		{"reach the socket's host directory", "touch " + hostDir + "/x"},
		{"write the host's /etc/hosts", "echo x >> /etc/hosts"},
		{"write the host's /etc/resolv.conf", "echo x >> /etc/resolv.conf"},
		{"write the host's /etc/hostname", "echo x > /etc/hostname"},
	} {
		res := execWS(t, w, ExecRequest{Command: []string{"sh", "-c", tc.cmd}})
		if res.OK() {
			t.Errorf("%s: %q succeeded", tc.name, tc.cmd)
		}
	}
	// Every mount of a host file system is read-only (the writable layer
	// is the daemon's overlay, bounded by DiskBytes; tmpfs is memory).
	// Of mounts stacked on one path, the last one listed is the one seen.
	res := execWS(t, w, ExecRequest{Command: []string{"cat", "/proc/self/mountinfo"}})
	top := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		if f := strings.Fields(line); len(f) > 5 {
			top[f[4]] = line
		}
	}
	for _, line := range top {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 1 {
			t.Fatalf("mountinfo line %q", line)
		}
		switch g[0] {
		case "overlay", "tmpfs", "proc", "sysfs", "devpts", "mqueue", "cgroup", "cgroup2":
			continue
		}
		if !slices.Contains(strings.Split(f[5], ","), "ro") {
			t.Errorf("a host file system is writable in the container: %s", line)
		}
	}
	entries, err := os.ReadDir(hostDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != filepath.Base(sock) {
		t.Errorf("the socket's host directory holds %v, want the socket alone", entries)
	}
	after, err := os.Stat(sock)
	if err != nil || !os.SameFile(before, after) || after.Mode() != before.Mode() {
		t.Errorf("the host's socket changed: %v, %v, %v", before.Mode(), after, err)
	}
	py := `import urllib.request
print(urllib.request.urlopen("http://127.0.0.1:8000/sessions/x/v1/models", timeout=10).read().decode())`
	res = execWS(t, w, ExecRequest{Command: []string{"python3", "-c", py}, Limits: Limits{WallTime: time.Minute}})
	if !res.OK() || !strings.Contains(string(res.Stdout), "session answered /sessions/x/v1/models") {
		t.Fatalf("the forwarder does not reach the session: %s\n%s%s", res.Reason(), res.Stdout, res.Stderr)
	}
}

// TestDockerWorkspaceImagePath: a workspace keeps its image's ENV (a
// task's tool in /opt/tool/bin, ENV PATH=/opt/tool/bin:$PATH) under the
// sandbox's defaults and the spec's env; a command's PATH=DIR:$PATH puts
// DIR first and keeps the image's.
func TestDockerWorkspaceImagePath(t *testing.T) {
	d := dockerSmall(t)
	dir := t.TempDir()
	dockerfile := "FROM " + d.image + "\n" +
		"RUN mkdir -p /opt/tool/bin && printf '#!/bin/sh\\necho tool ran\\n' > /opt/tool/bin/mytool && chmod 755 /opt/tool/bin/mytool\n" +
		"ENV PATH=/opt/tool/bin:$PATH TOOL_HOME=/opt/tool\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := d.BuildImage(ctx, dir, filepath.Join(dir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	w := openWS(t, d, WorkspaceSpec{Image: img, Env: []string{"SPEC=1"}})
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"the image's PATH", nil, "tool ran /opt/tool 1 1 /opt/tool/bin:"},
		{"a directory put first", []string{"PATH=/opt/harness/bin:$PATH"}, "tool ran /opt/tool 1 1 /opt/harness/bin:/opt/tool/bin:"},
	} {
		res := execWS(t, w, ExecRequest{Command: []string{"sh", "-c", `echo "$(mytool) $TOOL_HOME $SPEC $PYTHONUNBUFFERED $PATH"`}, Env: tc.env})
		if out := string(res.Stdout); !res.OK() || !strings.HasPrefix(out, tc.want) {
			t.Errorf("%s: %q (%s, stderr %q), want it to start %q", tc.name, out, res.Reason(), res.Stderr, tc.want)
		}
	}
}

// TestDockerWorkspaceImageVolume: an image's VOLUME is no way around the
// disk limit: it is a tmpfs of the workspace's DiskBytes holding the
// image's content there (owner and mode kept), not an anonymous volume
// on the daemon's disk that the writable layer's measure never counts.
func TestDockerWorkspaceImageVolume(t *testing.T) {
	d := dockerSmall(t)
	dir := t.TempDir()
	dockerfile := "FROM " + d.image + "\nRUN mkdir -p /data/sub && echo seed > /data/sub/seed && chown -R 65534:65534 /data/sub && chmod 0751 /data/sub\nVOLUME /data\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := d.BuildImage(ctx, dir, filepath.Join(dir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	w := openWS(t, d, WorkspaceSpec{Image: img, Limits: Limits{DiskBytes: 8 << 20}})
	res := execWS(t, w, ExecRequest{Command: []string{"sh", "-c", "cat /data/sub/seed && stat -c '%u %a' /data/sub && grep ' /data ' /proc/self/mountinfo"}})
	if out := string(res.Stdout); !strings.HasPrefix(out, "seed\n65534 751\n") || !strings.Contains(out, "tmpfs") {
		t.Fatalf("the image's content is not in a tmpfs volume: %q %q", res.Stdout, res.Stderr)
	}
	res = execWS(t, w, ExecRequest{Command: []string{"sh", "-c", "head -c 40000000 /dev/zero > /data/fill"}})
	if res.OK() {
		t.Fatal("40 MB went into the image's volume past an 8 MiB disk limit")
	}
	// KillAll restarts the container, which empties a tmpfs volume: what
	// it held (the image's and the agent's) is there after it.
	execWS(t, w, ExecRequest{Command: []string{"sh", "-c", "rm -f /data/fill; echo agent > /data/made"}})
	if err := w.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	res = execWS(t, w, ExecRequest{Command: []string{"sh", "-c", "cat /data/sub/seed /data/made && stat -c '%u %a' /data/sub"}})
	if out := string(res.Stdout); out != "seed\nagent\n65534 751\n" {
		t.Fatalf("the volume after KillAll's restart: %q %q", res.Stdout, res.Stderr)
	}
}

// TestDockerWorkspaceUser: a workspace of an unprivileged user runs its
// commands as that user, which owns the working directory and the home,
// is named in /etc/passwd, and can change neither the image's tools nor
// the idle process; ExecRequest.User runs one command as root, which can
// still write what the user made. KillAll restarts the container: the
// idle process is a new one.
func TestDockerWorkspaceUser(t *testing.T) {
	d := dockerSmall(t)
	w := openWS(t, d, WorkspaceSpec{WorkDir: "/app", User: "10001:10001"})
	ctx := context.Background()
	run := func(user, cmd string) Result {
		t.Helper()
		res, err := w.Exec(ctx, ExecRequest{Command: []string{"sh", "-c", cmd}, User: user})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run("", `id -u; id -g; whoami; stat -c %u /app /home/rllm; echo made > /app/f; mkdir -p $HOME/x 2>&1; echo ok`); !res.OK() ||
		!strings.HasPrefix(string(res.Stdout), "10001\n10001\nrllm\n10001\n10001\n") {
		t.Fatalf("%s %s", res.Stdout, res.Reason())
	}
	if res := run("", `echo 'exit 0' > /usr/bin/python3 || echo refused`); !strings.Contains(string(res.Stdout), "refused") {
		t.Fatalf("the user replaced the image's python3: %s %s", res.Stdout, res.Stderr)
	}
	// The idle process: its pid and its start time (pids repeat in the
	// restarted container's new PID namespace).
	idle := `for d in /proc/[0-9]*; do [ "$(cat $d/comm)" = sleep ] && echo ${d#/proc/} $(cut -d' ' -f22 $d/stat); done`
	before := run("0:0", idle)
	pid, _, _ := strings.Cut(string(before.Stdout), " ")
	if res := run("", "kill -9 "+pid+" 2>&1 || echo refused"); !strings.Contains(string(res.Stdout), "refused") {
		t.Fatalf("the user signalled the idle process: %s", res.Stdout)
	}
	if res := run("0:0", `id -u; echo root >> /app/f && cat /app/f`); !res.OK() || string(res.Stdout) != "0\nmade\nroot\n" {
		t.Fatalf("root in the workspace: %q %s", res.Stdout, res.Reason())
	}
	run("", `setsid sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 </dev/null & echo started`)
	time.Sleep(20 * time.Millisecond) // a tick of start time
	if err := w.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	after := run("0:0", idle)
	if len(after.Stdout) == 0 || string(after.Stdout) == string(before.Stdout) {
		t.Fatalf("idle process %q before KillAll, %q after: not restarted", before.Stdout, after.Stdout)
	}
	if res := run("", `cat /app/f; pgrep -c -f '[w]hile' || true`); string(res.Stdout) != "made\nroot\n0\n" {
		t.Fatalf("after the restart (the files, no loop left): %q", res.Stdout)
	}
	if _, err := d.Open(ctx, WorkspaceSpec{User: "nosuchuser"}); err == nil || !strings.Contains(err.Error(), "the image has no user nosuchuser") {
		t.Fatalf("a user the image lacks: %v", err)
	}
}

// TestDockerCopyDir: a directory copied from one workspace into another
// replaces it there, keeps modes, owners and links, and leaves setuid bits
// and everything outside the directory behind.
func TestDockerCopyDir(t *testing.T) {
	d := dockerSmall(t)
	ctx := context.Background()
	from := openWS(t, d, WorkspaceSpec{WorkDir: "/app"})
	to := openWS(t, d, WorkspaceSpec{WorkDir: "/app"})
	execWS(t, to, ExecRequest{Command: []string{"sh", "-c", "echo old > /app/removed; echo image > /app/kept"}})
	make := `cd /app && echo agent > kept && mkdir -p sub && echo x > sub/f && chmod 750 sub && cp /bin/true ./su && chmod 4755 su && ` +
		`ln -s /logs logs && ln -s /logs/verifier/reward.txt reward && ln sub/f hard && chown 123:456 sub/f && mkfifo fifo && ` +
		`mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo done`
	if res := execWS(t, from, ExecRequest{Command: []string{"sh", "-c", make}}); !res.OK() {
		t.Fatal(res.Reason())
	}
	if err := d.CopyDir(ctx, from, to, "/app", 1<<20); err != nil {
		t.Fatal(err)
	}
	res := execWS(t, to, ExecRequest{Command: []string{"sh", "-c", `cd /app && ls -A | tr '\n' ' '; echo; cat kept; stat -c '%a %u:%g %h' su sub sub/f; readlink logs reward; ls /logs 2>&1`}})
	want := "hard kept logs reward su sub \nagent\n755 0:0 1\n750 0:0 2\n644 123:456 2\n/logs\n/logs/verifier/reward.txt\nls: cannot access '/logs': No such file or directory\n"
	if got := string(res.Stdout) + string(res.Stderr); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	execWS(t, from, ExecRequest{Command: []string{"sh", "-c", "rm -rf /app && ln -s /logs /app"}})
	if err := d.CopyDir(ctx, from, to, "/app", 1<<20); err == nil || !strings.Contains(err.Error(), "no longer a directory") {
		t.Fatalf("a working directory replaced by a link: %v", err)
	}
	if err := d.CopyDir(ctx, from, to, "/", 1<<20); err == nil {
		t.Fatal("copied /")
	}
}

// waiting is how many containers wait in the pool (tests).
func (p *warmPool) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, q := range p.ready {
		n += len(q)
	}
	return n
}
