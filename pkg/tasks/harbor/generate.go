package harbor

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// A generated repository-fix task: a small Python package with one bug,
// a visible test in the repository that fails because of it, hidden tests
// (the verifier's, with more cases) and the fix as the oracle. The image
// is the local base image (rllm-base, python3 and pytest) with the
// repository copied to /app.

// bug is one family of repository-fix tasks.
type bug struct {
	name string
	// module is the file under the package, fn the function.
	module, fn string
	// good and bad are the function's source, fixed and with the bug.
	good, bad string
	// cases draws test cases: Python expressions of the call and of its
	// expected value.
	cases func(r *rand.Rand, n int) [][2]string
	// failing draws a case the bug always fails (every task's visible
	// and hidden tests start with one, so the null agent scores 0).
	failing func(r *rand.Rand) [2]string
	// hint describes what the function should do.
	hint string
}

func ints(r *rand.Rand, n, lo, hi int) []int {
	xs := make([]int, n)
	for i := range xs {
		xs[i] = lo + r.IntN(hi-lo+1)
	}
	return xs
}

func pyList(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

var bugs = []bug{
	{name: "mean", module: "stats.py", fn: "mean", hint: "returns the arithmetic mean of a non-empty list of numbers",
		good: "def mean(xs):\n    \"\"\"The arithmetic mean of a non-empty list of numbers.\"\"\"\n    return sum(xs) / len(xs)\n",
		bad:  "def mean(xs):\n    \"\"\"The arithmetic mean of a non-empty list of numbers.\"\"\"\n    return sum(xs) / (len(xs) + 1)\n",
		failing: func(r *rand.Rand) [2]string {
			xs := ints(r, 2+r.IntN(3), 1, 40)
			s := 0
			for _, x := range xs {
				s += x
			}
			return [2]string{fmt.Sprintf("mean(%s)", pyList(xs)), fmt.Sprintf("%d / %d", s, len(xs))}
		},
		cases: func(r *rand.Rand, n int) [][2]string {
			out := make([][2]string, n)
			for i := range out {
				xs := ints(r, 2+r.IntN(5), -50, 50)
				s := 0
				for _, x := range xs {
					s += x
				}
				out[i] = [2]string{fmt.Sprintf("mean(%s)", pyList(xs)), fmt.Sprintf("%d / %d", s, len(xs))}
			}
			return out
		}},
	{name: "clamp", module: "numbers.py", fn: "clamp", hint: "limits x to the closed interval [lo, hi]",
		good: "def clamp(x, lo, hi):\n    \"\"\"x limited to the closed interval [lo, hi] (lo <= hi).\"\"\"\n    return max(lo, min(x, hi))\n",
		bad:  "def clamp(x, lo, hi):\n    \"\"\"x limited to the closed interval [lo, hi] (lo <= hi).\"\"\"\n    return min(lo, max(x, hi))\n",
		failing: func(r *rand.Rand) [2]string {
			lo := r.IntN(10)
			hi := lo + 1 + r.IntN(10)
			return [2]string{fmt.Sprintf("clamp(%d, %d, %d)", hi+1+r.IntN(5), lo, hi), fmt.Sprint(hi)}
		},
		cases: func(r *rand.Rand, n int) [][2]string {
			out := make([][2]string, n)
			for i := range out {
				lo := r.IntN(20) - 10
				hi := lo + 1 + r.IntN(20)
				x := lo - 5 + r.IntN(hi-lo+11)
				want := max(lo, min(x, hi))
				out[i] = [2]string{fmt.Sprintf("clamp(%d, %d, %d)", x, lo, hi), fmt.Sprint(want)}
			}
			return out
		}},
	{name: "count_words", module: "text.py", fn: "count_words", hint: "counts the words of a string separated by any whitespace",
		good: "def count_words(s):\n    \"\"\"The number of words of s, separated by any run of whitespace.\"\"\"\n    return len(s.split())\n",
		bad:  "def count_words(s):\n    \"\"\"The number of words of s, separated by any run of whitespace.\"\"\"\n    return len(s.split(\" \"))\n",
		failing: func(r *rand.Rand) [2]string {
			k := r.IntN(3)
			return [2]string{fmt.Sprintf("count_words(\"  one\\ttwo%s  \")", strings.Repeat(" x", k)), fmt.Sprint(2 + k)}
		},
		cases: func(r *rand.Rand, n int) [][2]string {
			words := []string{"alpha", "beta", "gamma", "delta", "pi", "rho", "tau"}
			seps := []string{" ", "  ", "\\t", "\\n", " \\t "}
			out := make([][2]string, n)
			for i := range out {
				k := 1 + r.IntN(5)
				var b strings.Builder
				if r.IntN(2) == 0 {
					b.WriteString(seps[r.IntN(len(seps))])
				}
				for j := 0; j < k; j++ {
					if j > 0 {
						b.WriteString(seps[r.IntN(len(seps))])
					}
					b.WriteString(words[r.IntN(len(words))])
				}
				if r.IntN(2) == 0 {
					b.WriteString(seps[r.IntN(len(seps))])
				}
				out[i] = [2]string{fmt.Sprintf("count_words(\"%s\")", b.String()), fmt.Sprint(k)}
			}
			return out
		}},
	{name: "last_index", module: "search.py", fn: "last_index", hint: "returns the index of the last occurrence of x in xs, or -1",
		good: "def last_index(xs, x):\n    \"\"\"The index of the last occurrence of x in xs, -1 when there is none.\"\"\"\n    for i in range(len(xs) - 1, -1, -1):\n        if xs[i] == x:\n            return i\n    return -1\n",
		bad:  "def last_index(xs, x):\n    \"\"\"The index of the last occurrence of x in xs, -1 when there is none.\"\"\"\n    for i in range(len(xs) - 1, 0, -1):\n        if xs[i] == x:\n            return i\n    return -1\n",
		failing: func(r *rand.Rand) [2]string {
			xs := append([]int{7}, ints(r, 1+r.IntN(4), 0, 5)...)
			return [2]string{fmt.Sprintf("last_index(%s, 7)", pyList(xs)), "0"}
		},
		cases: func(r *rand.Rand, n int) [][2]string {
			out := make([][2]string, n)
			for i := range out {
				xs := ints(r, 2+r.IntN(6), 0, 5)
				x := xs[0]
				if i%2 == 1 {
					x = r.IntN(6)
				}
				want := -1
				for j := len(xs) - 1; j >= 0; j-- {
					if xs[j] == x {
						want = j
						break
					}
				}
				out[i] = [2]string{fmt.Sprintf("last_index(%s, %d)", pyList(xs), x), fmt.Sprint(want)}
			}
			return out
		}},
}

// GenerateOptions shape generated repository-fix tasks.
type GenerateOptions struct {
	// Image is the base image the tasks' Dockerfiles start FROM (the
	// local base image: sandbox.BaseImage()).
	Image string
	// HiddenTests is the number of the verifier's test cases per task.
	HiddenTests int
}

// Generate writes n repository-fix tasks under dir (task-0000, ...),
// drawn from seed; the same seed always writes the same tasks. It
// returns the tasks' directories. dir may exist; a task directory that
// exists already is an error (nothing is overwritten).
func Generate(dir string, n int, seed uint64, o GenerateOptions) ([]string, error) {
	if n < 1 {
		return nil, usererr.Errorf("--n must be at least 1, got %d", n)
	}
	if o.HiddenTests < 1 {
		o.HiddenTests = 8
	}
	if o.Image == "" {
		return nil, usererr.Errorf("generated tasks need a base image")
	}
	r := rand.New(rand.NewPCG(seed, 0x7a5c))
	var dirs []string
	for i := 0; i < n; i++ {
		b := bugs[(i+int(seed%uint64(len(bugs))))%len(bugs)]
		pkg := fmt.Sprintf("%s_%s", []string{"toolkit", "helpers", "utilkit", "common", "corelib"}[r.IntN(5)], b.name)
		td := filepath.Join(dir, fmt.Sprintf("task-%04d", i))
		if _, err := os.Stat(td); err == nil {
			return nil, usererr.Errorf("%s exists already; give --out a new directory (nothing was overwritten)", td)
		}
		visible := append([][2]string{b.failing(r)}, b.cases(r, 2)...)
		hidden := append([][2]string{b.failing(r)}, b.cases(r, o.HiddenTests-1)...)
		files := map[string]string{
			"instruction.md": fmt.Sprintf("The Python package `%s` in /app has a bug: `%s.%s` (in `%s/%s`) should say what its docstring says (it %s), "+
				"but its test fails:\n\n    cd /app && python3 -m pytest -q tests\n\nFix the bug in the package's source. Do not change the tests.\n",
				pkg, strings.TrimSuffix(b.module, ".py"), b.fn, pkg, b.module, b.hint),
			"task.toml": fmt.Sprintf(`version = "1.0"

[metadata]
author_name = "rllm data generate"
difficulty = "easy"
category = "repository-fix"
tags = ["python", "bugfix", %q]

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 600.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory_mb = 1024
storage_mb = 1024
`, b.name),
			"environment/Dockerfile":                        fmt.Sprintf("FROM %s\nWORKDIR /app\nCOPY repo/ /app/\n", o.Image),
			"environment/repo/README.md":                    fmt.Sprintf("# %s\n\nSmall helpers. Run the tests with `python3 -m pytest -q tests`.\n", pkg),
			"environment/repo/" + pkg + "/__init__.py":      fmt.Sprintf("from .%s import %s\n", strings.TrimSuffix(b.module, ".py"), b.fn),
			"environment/repo/" + pkg + "/" + b.module:      b.bad,
			"environment/repo/tests/test_" + b.name + ".py": testFile(pkg, b, visible, "test_"+b.name),
			"tests/test_hidden.py":                          testFile(pkg, b, hidden, "test_hidden"),
			"tests/test.sh":                                 VerifierScript,
			"solution/solve.sh":                             fmt.Sprintf("#!/bin/bash\n# The oracle: the fixed function.\nset -e\ncat > /app/%s/%s <<'EOF'\n%sEOF\n", pkg, b.module, b.good),
		}
		for name, content := range files {
			p := filepath.Join(td, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return nil, err
			}
			mode := os.FileMode(0o644)
			if strings.HasSuffix(name, ".sh") {
				mode = 0o755
			}
			if err := os.WriteFile(p, []byte(content), mode); err != nil {
				return nil, err
			}
		}
		dirs = append(dirs, td)
	}
	return dirs, nil
}

// VerifierScript is the generated tasks' tests/test.sh: the hidden
// tests against the package in /app, reward 1 when all pass. Nothing the
// agent wrote in /app comes ahead of the image's modules: it runs from
// /tests (the verifier's own directory), python3 -I (no PYTHONPATH, no
// user site, not the current directory: no pytest.py, unittest.py or
// sitecustomize.py of /app is imported in place of the real ones, and no
// .pth of /app is read) with /app appended after the image's modules,
// and no pytest plugin autoloaded (a *.dist-info in /app naming one).
const VerifierScript = `#!/bin/bash
# The verifier: the hidden tests against the package in /app; reward 1 when all pass.
# /app comes after the image's modules (python3 -I, /app appended), and no plugin is autoloaded.
mkdir -p /logs/verifier
cd /tests
if PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -I -c 'import sys; sys.path.append("/app"); import pytest; sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "/tests/test_hidden.py"]))'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
`

func testFile(pkg string, b bug, cases [][2]string, fn string) string {
	var s strings.Builder
	fmt.Fprintf(&s, "from %s import %s\n\n\ndef %s():\n", pkg, b.fn, fn)
	for _, c := range cases {
		fmt.Fprintf(&s, "    assert %s == %s\n", c[0], c[1])
	}
	return s.String()
}
