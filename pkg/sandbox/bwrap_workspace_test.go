//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain runs this test binary as the forwarder when a sandbox starts
// it as ForwardCommand (what rllm does with itself).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ForwardCommand {
		os.Exit(ForwardMain(os.Args[2:], os.Stderr))
	}
	if exe, err := os.Executable(); err == nil {
		SetSelf(exe)
	}
	os.Exit(m.Run())
}

func openBwrapWorkspace(t *testing.T, spec WorkspaceSpec) Workspace {
	t.Helper()
	o, err := NewBwrapOpener(context.Background(), Config{Limits: DefaultLimits})
	if err != nil {
		t.Skipf("bwrap is not usable here: %v", err)
	}
	w, err := o.Open(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	return w
}

// sockServer serves h on a Unix socket the sandbox's user can reach.
func sockServer(t *testing.T, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rllm-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "gw.sock")
	ln, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

func TestBwrapWorkspaceFiles(t *testing.T) {
	w := openBwrapWorkspace(t, WorkspaceSpec{WorkDir: "/app"})
	ctx := context.Background()
	if err := w.CopyIn(ctx, "/app", []File{{Name: "src/a.txt", Data: []byte("hello")}, {Name: "run.sh", Mode: 0o755, Data: []byte("#!/bin/sh\necho ran >> log\n")}}); err != nil {
		t.Fatal(err)
	}
	// Files persist between commands; the command starts in WorkDir.
	for i := 0; i < 2; i++ {
		res, err := w.Exec(ctx, ExecRequest{Command: []string{"./run.sh"}})
		if err != nil || !res.OK() {
			t.Fatalf("exec: %v %s", err, res.Reason())
		}
	}
	got, err := w.ReadFile(ctx, "/app/log", 1<<20)
	if err != nil || string(got) != "ran\nran\n" {
		t.Fatalf("log = %q, %v", got, err)
	}
	if got, _ := w.ReadFile(ctx, "/app/src/a.txt", 3); string(got) != "hel" {
		t.Errorf("ReadFile with max 3 = %q", got)
	}
	if _, err := w.ReadFile(ctx, "/app/none", 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	// The home persists too and is not the workspace.
	if res, err := w.Exec(ctx, ExecRequest{Command: []string{"sh", "-c", "echo x > $HOME/state"}, Env: []string{"HOME=" + HomeDir}}); err != nil || !res.OK() {
		t.Fatalf("home: %v %s", err, res.Reason())
	}
	if got, _ := w.ReadFile(ctx, HomeDir+"/state", 10); string(got) != "x\n" {
		t.Errorf("home state = %q", got)
	}
}

func TestBwrapWorkspaceConfines(t *testing.T) {
	w := openBwrapWorkspace(t, WorkspaceSpec{})
	ctx := context.Background()
	outside, err := os.MkdirTemp("", "rllm-outside-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(outside)
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("s3cret"), 0o644)
	for _, tc := range []struct{ name, script string }{
		{"write /usr", "echo x > /usr/rllm-test"},
		{"write /etc", "echo x > /etc/rllm-test"},
		{"write the host tmp", "echo x > " + outside + "/x"},
		{"read a host file", "cat " + secret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := w.Exec(ctx, ExecRequest{Command: []string{"sh", "-c", tc.script}})
			if err != nil {
				t.Fatal(err)
			}
			if res.OK() || strings.Contains(string(res.Stdout), "s3cret") {
				t.Errorf("%s succeeded: %s", tc.script, res.Stdout)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Error("a sandboxed command wrote into a host directory")
	}
	// A symlink the sandbox leaves does not lead ReadFile or CopyIn out.
	if res, err := w.Exec(ctx, ExecRequest{Command: []string{"sh", "-c", "ln -s " + secret + " link && ln -s " + outside + " dirlink"}}); err != nil || !res.OK() {
		t.Fatalf("%v %s", err, res.Reason())
	}
	if b, err := w.ReadFile(ctx, WorkDir+"/link", 100); err == nil {
		t.Errorf("ReadFile followed a symlink out of the workspace: %q", b)
	}
	if err := w.CopyIn(ctx, WorkDir, []File{{Name: "dirlink/planted", Data: []byte("x")}}); err == nil {
		t.Error("CopyIn wrote through a symlink out of the workspace")
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Error("a file was planted outside the workspace")
	}
	if _, err := w.ReadFile(ctx, "/etc/passwd", 100); err == nil {
		t.Error("ReadFile read a path outside the workspace")
	}
}

func TestBwrapWorkspaceNetworkOnlyItsSocket(t *testing.T) {
	sock := sockServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "session answered %s", r.URL.Path)
	}))
	// Another server on the host's loopback that the sandbox must not reach.
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go http.Serve(other, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "LEAK") }))
	port := other.Addr().(*net.TCPAddr).Port

	w := openBwrapWorkspace(t, WorkspaceSpec{Network: Network{Socket: sock, Port: 8123}})
	py := `import urllib.request,sys
print(urllib.request.urlopen("http://127.0.0.1:8123/sessions/x/v1/models", timeout=10).read().decode())
for url in ["http://127.0.0.1:%d/" % int(sys.argv[1]), "http://1.2.3.4/", "http://example.com/"]:
    try:
        print(urllib.request.urlopen(url, timeout=5).read().decode())
    except Exception as e:
        print("refused", type(e).__name__)
`
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	res, err := w.Exec(context.Background(), ExecRequest{Command: []string{"/usr/bin/python3", "-c", py, fmt.Sprint(port)}, Limits: Limits{WallTime: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	if !res.OK() || !strings.Contains(out, "session answered /sessions/x/v1/models") {
		t.Fatalf("the session was not reached: %s\n%s", res.Reason(), out+string(res.Stderr))
	}
	if strings.Contains(out, "LEAK") || strings.Count(out, "refused") != 3 {
		t.Errorf("the sandbox reached something besides its session:\n%s", out)
	}
	if res.Net == nil || res.Net.Forwarded != 1 || res.Net.Denied < 3 {
		t.Errorf("net report = %+v, want 1 forwarded and at least 3 denied", res.Net)
	}
}

func TestBwrapWorkspaceClose(t *testing.T) {
	w := openBwrapWorkspace(t, WorkspaceSpec{})
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := w.Exec(ctx, ExecRequest{Command: []string{"sleep", "60"}, Limits: Limits{WallTime: 2 * time.Minute}})
		done <- err
	}()
	// Close kills what runs (or refuses what has not begun) and removes
	// the directory.
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Error("a command running at Close was not stopped")
	}
	if _, err := os.Stat(w.ID()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("workspace directory still there: %v", err)
	}
	if _, err := w.Exec(ctx, ExecRequest{Command: []string{"true"}}); err == nil {
		t.Error("Exec after Close worked")
	}
	if err := w.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestCheckWorkDir(t *testing.T) {
	for _, d := range []string{"", "rel", "/", "/usr", "/usr/x", "/tmp", "/home", "/app/../etc", "/run"} {
		if checkWorkDir(d) == nil {
			t.Errorf("%q accepted", d)
		}
	}
	for _, d := range []string{"/work", "/app", "/testbed"} {
		if err := checkWorkDir(d); err != nil {
			t.Errorf("%q refused: %v", d, err)
		}
	}
}

func TestForwardMainReportFile(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	report := filepath.Join(t.TempDir(), "net.json")
	var stderr strings.Builder
	code := ForwardMain([]string{"--socket", "/nonexistent.sock", "--port", fmt.Sprint(port), "--report-file", report, "--", "sh", "-c", "exit 3"}, &stderr)
	if code != 3 {
		t.Fatalf("exit %d, want the command's 3 (%s)", code, stderr.String())
	}
	b, err := os.ReadFile(report)
	if err != nil || !strings.Contains(string(b), `"forwarded":0`) {
		t.Fatalf("report %q, %v", b, err)
	}
	if code := ForwardMain([]string{"--port", fmt.Sprint(port)}, &stderr); code != 125 || !strings.Contains(stderr.String(), "no command") {
		t.Errorf("no command: exit %d, %s", code, stderr.String())
	}
}
