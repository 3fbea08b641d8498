package harbor

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/toolcall"
)

// The warm-up's replies: a bash call that looks around on the first
// turn (a command the instruction names, or listing /app), a final reply
// without a call after a tool's result.
func TestFormatExample(t *testing.T) {
	instruction := "The Python package `toolkit_mean` in /app has a bug: `stats.mean` (in `toolkit_mean/stats.py`) should say what its docstring says, " +
		"but its test fails:\n\n    cd /app && python3 -m pytest -q tests\n\nFix the bug in the package's source. Do not change the tests.\n"
	first := "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\n" + instruction + "<|im_end|>\n<|im_start|>assistant\n"
	want := []string{"ls -R /app", "cat /app/toolkit_mean/stats.py", "cd /app && python3 -m pytest -q tests"}
	seen := map[string]bool{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		reply := FormatExample(first, rng)
		rest, calls := toolcall.Strip(reply, "call_")
		if rest != "" || len(calls) != 1 || calls[0].Function.Name != "bash" {
			t.Fatalf("first turn %q", reply)
		}
		var args struct{ Command string }
		if err := json.Unmarshal([]byte(calls[0].Function.Arguments), &args); err != nil || !slices.Contains(want, args.Command) {
			t.Fatalf("command of %q: %q (%v)", reply, args.Command, err)
		}
		seen[args.Command] = true
		if toolcall.Render(rest, calls) != reply {
			t.Fatalf("%q is not in the template's shape", reply)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("commands drawn: %v", seen)
	}
	after := first + "<tool_call>\n{}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	for range 20 {
		if reply := FormatExample(after, rng); strings.Contains(reply, "<tool_call>") || reply == "" {
			t.Fatalf("after a result: %q", reply)
		}
	}
}
