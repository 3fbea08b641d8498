package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// small limits keep the hostile tests fast on two shared cores.
var small = Limits{
	WallTime:      5 * time.Second,
	CPUTime:       1 * time.Second,
	MemoryBytes:   256 << 20,
	Processes:     16,
	FileSizeBytes: 1 << 20,
	OutputBytes:   64 << 10,
}

// backendFor opens backend name with the small limits; bwrap is skipped
// (with the reason) where it cannot run.
func backendFor(t testing.TB, name string) Backend {
	t.Helper()
	c := Config{Backend: name, Limits: small}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if name == BackendDocker {
		return dockerFor(t, c)
	}
	b, err := openBackend(context.Background(), c)
	if err != nil {
		if name == BackendBwrap {
			t.Skipf("bwrap is not usable here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func needPython(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 on this machine (Debian package python3)")
	}
}

func run(t *testing.T, b Backend, req Request) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if req.Limits == (Limits{}) {
		req.Limits = small
	}
	res, err := b.Run(ctx, req)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func py(code string) Request {
	return Request{Command: []string{"python3", "main.py"}, Files: map[string][]byte{"main.py": []byte(code)}}
}

func TestRunBasics(t *testing.T) {
	for _, name := range []string{BackendBwrap, BackendDocker, BackendUnsafeHost} {
		t.Run(name, func(t *testing.T) {
			b := backendFor(t, name)
			res := run(t, b, Request{Command: []string{"sh", "-c", "cat; echo err >&2; cat sub/dir/f.txt; exit 3"},
				Stdin: []byte("in\n"), Files: map[string][]byte{"sub/dir/f.txt": []byte("file\n")}})
			if res.ExitCode != 3 || string(res.Stdout) != "in\nfile\n" || string(res.Stderr) != "err\n" || res.Limit != LimitNone {
				t.Fatalf("got %+v (stdout %q stderr %q)", res, res.Stdout, res.Stderr)
			}
			if res.OK() || !strings.Contains(res.Reason(), "exit status 3: err") {
				t.Fatalf("reason %q", res.Reason())
			}
			res = run(t, b, Request{Command: []string{"sh", "-c", "echo $HOME $OPENAI_API_KEY; pwd"}})
			if !res.OK() {
				t.Fatalf("got %+v (%s)", res, res.Reason())
			}
		})
	}
}

// TestHostileBwrap runs each of the bad programs in the bwrap
// sandbox: each fails with its reason, within bounded time, and leaves
// the host as it was.
func TestHostileBwrap(t *testing.T) {
	needPython(t)
	b := backendFor(t, BackendBwrap)
	t.Setenv("OPENAI_API_KEY", "sk-test-secret-do-not-leak")
	port, reached := repotest.HostListener(t)
	marker := filepath.Join(os.TempDir(), fmt.Sprintf("rllm-sandbox-escape-%d", os.Getpid()))
	defer os.Remove(marker)
	home, _ := os.UserHomeDir()

	// Under load a CPU-bound loop may reach its wall time before 1 s of
	// CPU: that test gets a wall time far above its CPU time.
	longWall := small
	longWall.WallTime = 30 * time.Second
	shortWall := small
	shortWall.WallTime = 2 * time.Second
	tests := []struct {
		name   string
		code   string
		limit  Limit
		failed bool // exit status non-zero (no limit to name)
		limits Limits
	}{
		{"fork bomb", "import os\nwhile True:\n    os.fork()\n", LimitProcesses, true, Limits{}},
		{"endless allocation", "x = []\nwhile True:\n    x.append(bytearray(1 << 24))\n", LimitMemory, true, Limits{}},
		{"infinite loop", "while True:\n    pass\n", LimitCPUTime, true, longWall},
		{"1 GB print", "import sys\nb = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(b)\n", LimitOutput, true, Limits{}},
		{"sleep past the timeout", "import time\ntime.sleep(60)\n", LimitWallTime, true, shortWall},
		{"big file", "open('f', 'w').write('x' * (4 << 20))\n", LimitFileSize, true, Limits{}},
		{"write host /tmp", fmt.Sprintf("open(%q, 'w').write('escaped')\nimport os\nos.stat(%q)\nprint('wrote')\n", marker, marker), LimitNone, false, Limits{}},
		{"read /etc/hostname", "print(open('/etc/hostname').read())\n", LimitNone, true, Limits{}},
		{"read home", fmt.Sprintf("import os\nprint(os.listdir(%q))\n", home), LimitNone, true, Limits{}},
		{"read env for keys", "import os, sys\nif any('sk-test' in v for v in os.environ.values()): sys.exit(0)\nsys.exit(7)\n", LimitNone, true, Limits{}},
		{"tcp connect", fmt.Sprintf("import socket\ns = socket.create_connection(('127.0.0.1', %d), timeout=2)\nprint('connected')\n", port), LimitNone, true, Limits{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := py(tc.code)
			req.Limits = tc.limits
			res := run(t, b, req)
			if res.Limit != tc.limit {
				t.Errorf("limit %q, want %q (exit %d, stderr %q)", res.Limit, tc.limit, res.ExitCode, tail(res.Stderr))
			}
			if tc.failed && res.OK() {
				t.Errorf("the program succeeded: stdout %q", tail(res.Stdout))
			}
			if res.Limit != LimitNone && res.Reason() == "" {
				t.Error("no reason")
			}
			if int64(len(res.Stdout)) > small.OutputBytes || int64(len(res.Stderr)) > small.OutputBytes {
				t.Errorf("output kept past the cap: %d, %d", len(res.Stdout), len(res.Stderr))
			}
		})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the sandbox wrote %s on the host", marker)
	}
	if reached() {
		t.Error("the sandbox reached a listener on the host's 127.0.0.1")
	}
}

func tail(b []byte) string {
	if len(b) > 300 {
		b = b[len(b)-300:]
	}
	return string(b)
}

func TestCancelKillsRun(t *testing.T) {
	b := backendFor(t, BackendBwrap)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.Run(ctx, Request{Command: []string{"sleep", "30"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the context's", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatal("Run did not return after cancel")
	}
}

func TestRequestCheck(t *testing.T) {
	for _, name := range []string{"", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a\x00b"} {
		if err := (Request{Command: []string{"true"}, Files: map[string][]byte{name: nil}}).Check(); err == nil {
			t.Errorf("file name %q accepted", name)
		}
	}
	if err := (Request{}).Check(); err == nil {
		t.Error("empty command accepted")
	}
}

// TestLimitsCheck: each limit that is not positive is named by its key,
// the first one in the order of the struct.
func TestLimitsCheck(t *testing.T) {
	tests := []struct {
		zero func(*Limits)
		want string
	}{
		{func(l *Limits) {}, ""},
		{func(l *Limits) { l.WallTime = 0 }, "wall_time_s must be positive"},
		{func(l *Limits) { l.CPUTime = -time.Second }, "cpu_time_s must be positive"},
		{func(l *Limits) { l.MemoryBytes = 0 }, "memory_mb must be positive"},
		{func(l *Limits) { l.Processes = -1 }, "processes must be positive"},
		{func(l *Limits) { l.FileSizeBytes = 0 }, "file_size_mb must be positive"},
		{func(l *Limits) { l.OutputBytes = 0 }, "output_kb must be positive"},
		{func(l *Limits) { l.Processes, l.CPUTime = 0, 0 }, "cpu_time_s must be positive"},
	}
	for _, tt := range tests {
		l := DefaultLimits
		tt.zero(&l)
		err := l.Check()
		if (err == nil) != (tt.want == "") || err != nil && err.Error() != tt.want {
			t.Errorf("%+v: %v, want %q", l, err, tt.want)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	tests := []struct {
		c   Config
		key string
	}{
		{Config{Backend: "firejail", Limits: DefaultLimits}, "sandbox.backend"},
		{Config{MaxConcurrent: -1, Limits: DefaultLimits}, "sandbox.max_concurrent"},
		{Config{Limits: Limits{}}, "sandbox.limits"},
		{Config{BindRO: []string{"relative"}, Limits: DefaultLimits}, "sandbox.bind_ro"},
		{Config{BindRO: []string{"/"}, Limits: DefaultLimits}, "sandbox.bind_ro"},
		{Config{Env: map[string]string{"A=B": "x"}, Limits: DefaultLimits}, "sandbox.env"},
	}
	for _, tc := range tests {
		err := tc.c.Check()
		var ue *usererr.Error
		if !errors.As(err, &ue) || ue.Subject != tc.key {
			t.Errorf("%+v: %v, want a user error naming %s", tc.c, err, tc.key)
		}
	}
}

func TestUnavailableNamesKeyAndPackage(t *testing.T) {
	old := lookPath
	lookPath = func(string) (string, error) { return "", exec.ErrNotFound }
	defer func() { lookPath = old }()
	_, err := newBwrap(context.Background(), Config{Limits: DefaultLimits})
	if err == nil || !strings.Contains(err.Error(), "sandbox.backend") || !strings.Contains(err.Error(), "apt-get install bubblewrap") {
		t.Fatalf("err %v", err)
	}
}

func TestAutoWithoutAnySandboxIsRefused(t *testing.T) {
	old := lookPath
	lookPath = func(string) (string, error) { return "", exec.ErrNotFound }
	defer func() { lookPath = old }()
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	_, err := Open(context.Background(), Config{Backend: BackendAuto, Limits: DefaultLimits})
	var ue *usererr.Error
	if !errors.As(err, &ue) || ue.Subject != "sandbox.backend" || !strings.Contains(err.Error(), "apt-get install bubblewrap") ||
		!strings.Contains(err.Error(), "never runs on the host unsandboxed") {
		t.Fatalf("err %v", err)
	}
}

func TestLimitsWithin(t *testing.T) {
	got := Limits{WallTime: time.Hour, CPUTime: time.Second}.Within(DefaultLimits)
	want := DefaultLimits
	want.CPUTime = time.Second
	if got != want {
		t.Fatalf("got %+v want %+v", got, want)
	}
}
