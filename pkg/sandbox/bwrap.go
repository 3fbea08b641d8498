//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The uid and gid sandboxed programs run as, inside and (when rllm runs
// as root) outside: nobody. Outside, because the kernel exempts every
// process of the host's root user from RLIMIT_NPROC, a user namespace
// or not, so a fork bomb would only be stopped by the wall time.
const nobody = 65534

// bwrap runs each request in a fresh bubblewrap sandbox: new user, PID,
// network (loopback only), IPC, UTS and cgroup namespaces, the host's
// /usr and sandbox.bind_ro read-only, tmpfs work directory and /tmp, a
// minimal /dev and a fresh /proc, no capabilities, no environment but
// sandbox.env, and rlimits set by prlimit inside the sandbox.
type bwrap struct {
	bwrap, prlimit string
	prefix         []string // namespaces and mounts shared by every run
	env            []string
	asUser         *syscall.Credential
}

func newBwrap(ctx context.Context, c Config) (Backend, error) {
	bin, err := lookPath("bwrap")
	if err != nil {
		return nil, errUnavailable(BackendBwrap, "bubblewrap (bwrap) is not installed")
	}
	prlimit, err := lookPath("prlimit")
	if err != nil {
		return nil, errUnavailable(BackendBwrap, "prlimit (Debian package util-linux) is not installed")
	}
	announceCgroups()
	b := &bwrap{bwrap: bin, prlimit: prlimit, env: c.environ()}
	if os.Geteuid() == 0 {
		b.asUser = &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}
	}
	b.prefix = []string{bin,
		"--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--uid", strconv.Itoa(nobody), "--gid", strconv.Itoa(nobody),
		"--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--ro-bind", "/usr", "/usr"}
	// Merged-/usr systems link /bin, /lib... into /usr; others have them
	// as directories of their own.
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				b.prefix = append(b.prefix, "--symlink", target, d)
			}
		case fi.IsDir():
			b.prefix = append(b.prefix, "--ro-bind", d, d)
		}
	}
	// What dynamic linking and Debian's alternatives need from /etc, and
	// nothing else of it (no hostname, passwd or resolv.conf).
	b.prefix = append(b.prefix, "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
		"--ro-bind-try", "/etc/alternatives", "/etc/alternatives")
	if !strings.HasPrefix(prlimit, "/usr/") {
		b.prefix = append(b.prefix, "--ro-bind", prlimit, prlimit)
	}
	for _, p := range c.BindRO {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("sandbox.bind_ro: %w", err)
		}
		b.prefix = append(b.prefix, "--ro-bind", p, p)
	}
	b.prefix = append(b.prefix, "--proc", "/proc", "--dev", "/dev")
	// Probe once: a sandbox that cannot be set up here (no user
	// namespaces, a seccomp profile refusing mounts) is refused at start.
	probe := Request{Command: []string{"true"}, Limits: Limits{WallTime: 20 * time.Second}.Within(DefaultLimits)}
	res, err := b.Run(ctx, probe)
	if err != nil {
		return nil, errUnavailable(BackendBwrap, "bubblewrap cannot create a sandbox here ("+err.Error()+"); user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1, or a container started without them)")
	}
	if !res.OK() {
		return nil, errUnavailable(BackendBwrap, "the probe run failed: "+res.Reason())
	}
	return b, nil
}

func (b *bwrap) Name() string { return BackendBwrap }

func (b *bwrap) Close() error { return nil }

func (b *bwrap) Run(ctx context.Context, req Request) (Result, error) {
	l, err := req.start()
	if err != nil {
		return Result{}, err
	}
	var total int64
	for _, c := range req.Files {
		total += int64(len(c))
	}
	argv := append([]string(nil), b.prefix...)
	argv = append(argv,
		"--size", strconv.FormatInt(l.FileSizeBytes, 10), "--tmpfs", "/tmp",
		// Room for the files, one file of the largest size a process may
		// write, and as much again for a harness's scratch files.
		"--size", strconv.FormatInt(2*l.FileSizeBytes+total, 10), "--tmpfs", WorkDir)
	var extra []*os.File
	defer func() {
		for _, f := range extra {
			f.Close()
		}
	}()
	status, statusW, err := os.Pipe()
	if err != nil {
		return Result{}, err
	}
	defer status.Close()
	extra = append(extra, statusW)
	dirs := map[string]bool{}
	for _, name := range req.sortedFiles() {
		for d := path.Dir(name); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range sortedKeys(dirs) {
		argv = append(argv, "--dir", path.Join(WorkDir, d))
	}
	for _, name := range req.sortedFiles() {
		f, err := memFile("file", req.Files[name])
		if err != nil {
			return Result{}, err
		}
		extra = append(extra, f)
		argv = append(argv, "--file", strconv.Itoa(2+len(extra)), path.Join(WorkDir, name))
	}
	argv = append(argv, "--chdir", WorkDir, "--clearenv")
	for _, kv := range b.env {
		k, v, _ := strings.Cut(kv, "=")
		argv = append(argv, "--setenv", k, v)
	}
	argv = append(argv, "--json-status-fd", "3")
	argv = append(argv, prlimitArgs(b.prlimit, l)...)
	argv = append(argv, req.Command...)

	started := make(chan bool, 1)
	go func() { started <- readStarted(status) }()
	res, st, err := runProcess(ctx, procRun{argv: argv, dir: "/", stdin: req.Stdin, stream: req.Stream, extra: extra, limits: l, asUser: b.asUser, own: 2})
	statusW.Close()
	if err != nil {
		return res, err
	}
	if !<-started && res.Limit == LimitNone {
		// bwrap itself failed (its own message is on stderr).
		return res, fmt.Errorf("bwrap could not start the sandbox: %s", lastLine(res.Stderr))
	}
	Classify(&res, cpuTime(st), l)
	return res, nil
}

// readStarted reads bwrap's --json-status-fd lines and reports whether
// the sandboxed program was started (a "child-pid" line arrived).
func readStarted(r *os.File) bool {
	sc := bufio.NewScanner(r)
	ok := false
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(`"child-pid"`)) {
			ok = true
		}
	}
	return ok
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out) // parents before their children
	return out
}
