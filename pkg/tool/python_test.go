package tool

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

func TestPythonTool(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 on this machine (Debian package python3)")
	}
	pool, err := sandbox.Open(context.Background(), sandbox.Config{Backend: sandbox.BackendBwrap, Limits: sandbox.DefaultLimits, MaxConcurrent: 1})
	if err != nil {
		t.Skipf("bwrap is not usable here: %v", err)
	}
	defer pool.Close()
	py := &Python{Runner: pool, Params: PythonParams{MaxOutputChars: 200, TimeoutS: 2}}
	tests := []struct {
		name, args, want string
		isErr            bool
	}{
		{"prints", `{"code": "print(6 * 7)"}`, "42\n", false},
		{"traceback", `{"code": "1/0"}`, "ZeroDivisionError", true},
		{"truncated", `{"code": "print('a' * 1000 + 'END')"}`, "characters left out", false},
		{"keeps the end", `{"code": "print('a' * 1000 + 'END')"}`, "END", false},
		{"timeout", `{"code": "import time\ntime.sleep(30)"}`, "time limit exceeded", true},
		{"no host files", `{"code": "open('/etc/hostname')"}`, "FileNotFoundError", true},
		{"bad arguments", `{"code": 3}`, "arguments must be a JSON object", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := py.Call(ctx, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.Text, tc.want) || res.IsError != tc.isErr {
				t.Errorf("got %+v, want %q (error %v)", res, tc.want, tc.isErr)
			}
			if n := len([]rune(res.Text)); n > 200 && tc.name != "bad arguments" {
				t.Errorf("%d characters returned, more than max_output_chars", n)
			}
		})
	}
}

func TestTruncateMiddle(t *testing.T) {
	s := strings.Repeat("x", 50) + strings.Repeat("y", 50)
	got := truncateMiddle(s, 60)
	if n := len([]rune(got)); n > 60 || !strings.HasPrefix(got, "x") || !strings.HasSuffix(got, "y") {
		t.Fatalf("%q (%d)", got, n)
	}
	if truncateMiddle("short", 60) != "short" {
		t.Fatal("short text changed")
	}
}
