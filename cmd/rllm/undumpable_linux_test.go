package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// undumpableProbe is this test binary re-run as a stand-in for rllm: it
// makes itself non-dumpable when mode is "protect", then has a child
// running as the same user read its /proc/PID/environ, and prints what
// the child got.
func undumpableProbe(mode string) int {
	if mode == "protect" {
		if err := makeUndumpable(); err != nil {
			fmt.Println("PRCTL FAILED:", err)
			return 1
		}
	}
	out, err := exec.Command("cat", "/proc/"+strconv.Itoa(os.Getpid())+"/environ").CombinedOutput()
	if err != nil {
		fmt.Printf("DENIED: %v: %s\n", err, out)
		return 0
	}
	fmt.Printf("READ: %s\n", strings.ReplaceAll(string(out), "\x00", " "))
	return 0
}

// A program running as rllm's user reads rllm's environment through
// /proc unless rllm is non-dumpable. Root reads it whatever the flag
// says, so as root the stand-in runs as nobody (65534), from a copy of
// this binary that nobody may execute.
func TestUndumpableHidesEnvironFromSameUser(t *testing.T) {
	bin := os.Args[0]
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		dir, err := os.MkdirTemp("", "rllm-undumpable-*") // t.TempDir's parent is private
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for d := filepath.Dir(dir); d != "/"; d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
				t.Skipf("running as root, and %s is not searchable by other users, so the probe cannot run as nobody", d)
			}
		}
		bin = filepath.Join(dir, "rllm.test")
		if err := copyExecutable(os.Args[0], bin); err != nil {
			t.Fatal(err)
		}
		cred = &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
	}
	const secret = "TINKER_API_KEY=tml-secret-for-the-test"
	for _, tc := range []struct {
		mode, want string
	}{
		{"dumpable", "READ: "}, // the reproduction: the child reads the key
		{"protect", "DENIED: "},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cmd := exec.Command(bin)
			cmd.Dir = "/"
			cmd.Env = []string{"PATH=/usr/bin:/bin", "RLLM_TEST_UNDUMPABLE=" + tc.mode, secret}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("probe: %v\n%s", err, out)
			}
			got := string(out)
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("probe printed %q, want it to start with %q", got, tc.want)
			}
			if tc.mode == "protect" && strings.Contains(got, "tml-secret") {
				t.Fatalf("the secret leaked: %q", got)
			}
			if tc.mode == "dumpable" && !strings.Contains(got, "tml-secret") {
				t.Fatalf("the control run did not read the environment: %q", got)
			}
		})
	}
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
