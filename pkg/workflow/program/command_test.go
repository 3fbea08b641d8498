package program

import (
	"os/exec"
	"strings"
	"testing"
)

func TestShellProgram(t *testing.T) {
	for _, tc := range []struct {
		line, prog string
		ok         bool
	}{
		{"python3 agent.py", "python3", true},
		{"  pythn3\tagent.py --x=1 ", "pythn3", true},
		{"./agents/run.sh", "./agents/run.sh", true},
		{"PYTHONPATH=lib A_1=x python3 agent.py", "python3", true},
		{"A='x y' B=\"1 2\" node a.mjs", "node", true},
		{"'my agent' --fast", "my agent", true},
		{"\"python3\" 'a b.py'", "python3", true},
		{"py'th'on3 a.py", "python3", true},
		{"\"A=1\" prog", "A=1", true}, // a quoted name is a command, not an assignment
		{"a~b c#d", "a~b", true},
		{"A=1", "", false}, // only assignments
		{"", "", false},
		{"   ", "", false},
		{"$PY agent.py", "", false},
		{"${PY:-python3} agent.py", "", false},
		{"`which python3` agent.py", "", false},
		{"\"$PY\" agent.py", "", false},
		{"python3 agent.py | tee log", "", false},
		{"cd sub && ./agent.sh", "", false},
		{"python3 a.py; echo done", "", false},
		{"python3 a.py > out", "", false},
		{"~/bin/agent", "", false},
		{"*.sh", "", false},
		{"py\\thon3 a.py", "", false},
		{"'unterminated", "", false},
		{"# a comment", "", false},
		{"exec python3 a.py", "", false},
		{"true", "", false},
		{". ./env.sh", "", false},
		{"if true; then x; fi", "", false},
		{"''", "", false},
		{"python3 a.py\npython3 b.py", "", false},
	} {
		prog, ok := shellProgram(tc.line)
		if prog != tc.prog || ok != tc.ok {
			t.Errorf("%q: %q %v, want %q %v", tc.line, prog, ok, tc.prog, tc.ok)
		}
	}
}

// What shellProgram reads as the program is what sh runs: sh reports the
// same name when the program does not exist.
func TestShellProgramAgreesWithSh(t *testing.T) {
	for _, line := range []string{"rllm-nosuch-a x", "A=1 'rllm-nosuch b' x", "rllm-\"nosuch\"c", "B='1 2' rllm-nosuch-d --y=\"z w\""} {
		prog, ok := shellProgram(line)
		if !ok {
			t.Fatalf("%q not read", line)
		}
		out, _ := exec.Command("/bin/sh", "-c", line).CombinedOutput()
		if !strings.Contains(string(out), prog+": not found") && !strings.Contains(string(out), prog+": command not found") {
			t.Errorf("%q: we read %q, sh says %s", line, prog, out)
		}
	}
}

// FuzzShellProgram: any command string is read without panicking, and a
// program it names is one word of it.
func FuzzShellProgram(f *testing.F) {
	for _, s := range []string{"python3 agent.py", "A=1 'b c' d", "\"x\"'y'z", "$X", "a | b", "'", "\"", "A=", "=x y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		prog, ok := shellProgram(line)
		if ok && (prog == "" || shellBuiltins[prog]) {
			t.Fatalf("%q gave %q", line, prog)
		}
		if !ok && prog != "" {
			t.Fatalf("%q gave %q without ok", line, prog)
		}
	})
}
