package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// needCgroups skips where no cgroup can be made, saying why.
func needCgroups(t *testing.T) {
	t.Helper()
	if err := CgroupsAvailable(); err != nil {
		t.Skipf("no cgroup can be made here, so limits stay per process: %v", err)
	}
}

// The reproduction of issue 32: six forked children each hold 30 MB
// under memory_mb=64. With per-process limits all six live and the run
// is OK; bounded as a whole, the kernel kills some and the run reports
// the memory limit.
func TestMemoryBoundsTheWholeRun(t *testing.T) {
	needPython(t)
	needCgroups(t)
	const prog = `
import os, time
pids = []
for i in range(6):
    pid = os.fork()
    if pid == 0:
        b = b"x" * (30 << 20)
        time.sleep(1)
        os._exit(0)
    pids.append(pid)
ok = sum(1 for p in pids if os.waitpid(p, 0)[1] == 0)
print("children ok:", ok)
`
	for _, name := range []string{BackendBwrap, BackendUnsafeHost} {
		t.Run(name, func(t *testing.T) {
			b := backendFor(t, name)
			req := py(prog)
			req.Limits = small
			req.Limits.MemoryBytes = 64 << 20
			res := run(t, b, req)
			if res.Limit != LimitMemory {
				t.Fatalf("limit %q (exit %d, stdout %q, stderr %q), want %q: six children held 30 MB each under a 64 MB sandbox",
					res.Limit, res.ExitCode, res.Stdout, tail(res.Stderr), LimitMemory)
			}
		})
	}
}

// Processes bound the run, not each user: as root (exempt from
// RLIMIT_NPROC) the unsafe-host backend forked without bound before.
func TestProcessesBoundTheWholeRun(t *testing.T) {
	needPython(t)
	needCgroups(t)
	const prog = `
import os, time
pids = []
for i in range(24):
    pid = os.fork()
    if pid == 0:
        time.sleep(1)
        os._exit(0)
    pids.append(pid)
for p in pids:
    os.waitpid(p, 0)
print("forked", len(pids))
`
	for _, name := range []string{BackendBwrap, BackendUnsafeHost} {
		t.Run(name, func(t *testing.T) {
			b := backendFor(t, name)
			req := py(prog)
			req.Limits = small
			req.Limits.Processes = 8
			res := run(t, b, req)
			if res.Limit != LimitProcesses {
				t.Fatalf("limit %q (exit %d, stdout %q, stderr %q), want %q", res.Limit, res.ExitCode, res.Stdout, tail(res.Stderr), LimitProcesses)
			}
		})
	}
}

// A cgroup is removed after each run, whatever ended it, and holds no
// process then.
func TestCgroupRemovedAfterRun(t *testing.T) {
	needCgroups(t)
	b := backendFor(t, BackendUnsafeHost)
	before := rllmCgroups(t)
	for _, req := range []Request{
		{Command: []string{"true"}},
		{Command: []string{"sh", "-c", "sleep 60 & exit 3"}},
		{Command: []string{"sh", "-c", "(sleep 60 &) ; sleep 60"}, Limits: Limits{WallTime: 200e6}.Within(small)},
	} {
		run(t, b, req)
	}
	if after := rllmCgroups(t); after != before {
		t.Fatalf("cgroups left behind: %d before, %d after", before, after)
	}
}

// rllmCgroups counts this process's cgroups (named rllm-PID-N): other
// test binaries running at the same time (go test runs packages in
// parallel) make and remove their own beside them.
func rllmCgroups(t *testing.T) int {
	prefix := fmt.Sprintf("rllm-%d-", os.Getpid())
	h := hostCgroups()
	n := 0
	for _, d := range []string{h.v2, h.memory, h.pids} {
		if d == "" {
			continue
		}
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
				n++
			}
		}
	}
	return n
}

func TestParseCgroupFiles(t *testing.T) {
	mi := []byte(`31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 /sub /mnt/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`)
	m := parseMountinfo(mi)
	if m.v2 != "/sys/fs/cgroup/unified" || m.v1["memory"] != "/sys/fs/cgroup/memory" || m.v1["pids"] != "/sys/fs/cgroup/pids" {
		t.Fatalf("parseMountinfo = %+v", m)
	}
	v2, v1 := parseProcCgroup([]byte("8:pids:/\n4:memory:/a/b\n2:cpu,cpuacct:/c\n0::/user.slice\n"))
	if v2 != "/user.slice" || v1["memory"] != "/a/b" || v1["pids"] != "/" || v1["cpuacct"] != "/c" {
		t.Fatalf("parseProcCgroup = %q %v", v2, v1)
	}
}

// Where no cgroup can be made, one line says which limits are per
// process and why; where one can, nothing is said.
func TestNoteCgroups(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{nil, nil},
		{errors.New("mkdir /sys/fs/cgroup/memory/rllm-1-1: permission denied"),
			[]string{"memory_mb", "processes", "each process", "permission denied", "delegated"}},
	} {
		var b bytes.Buffer
		noteCgroups(slog.New(slog.NewTextHandler(&b, nil)), tc.err)
		if tc.want == nil && b.Len() != 0 {
			t.Errorf("logged %q with cgroups available", b.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("log %q lacks %q", b.String(), w)
			}
		}
		if strings.Count(b.String(), "\n") > 1 {
			t.Errorf("more than one line: %q", b.String())
		}
	}
}
