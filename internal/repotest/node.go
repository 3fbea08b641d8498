package repotest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Missing skips a test whose tool or package is not installed, or fails
// it under CI, where the fetch scripts have run.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this fails instead of skipping)", why)
	}
	t.Skip(why)
}

// Node is the node executable, skipping t (-short, or node missing).
func Node(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts node; skipped with -short")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		Missing(t, "node is not installed; install Node.js to run this test")
	}
	return node
}

// NodeCases runs a Node.js script that prints one JSON line {name, ok,
// error} per case, with env added to its environment; each failed case
// (and anything else it prints) fails t. It returns how many cases ran
// and node's stderr.
func NodeCases(t testing.TB, script string, env ...string) (int, string) {
	t.Helper()
	node := Node(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		stderr.WriteString("\nnode: " + err.Error())
	}
	ran := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var res struct {
			Name  string `json:"name"`
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
			t.Errorf("node printed %q", sc.Text())
			continue
		}
		ran++
		if !res.OK {
			t.Errorf("%s: %s", res.Name, res.Error)
		}
	}
	return ran, stderr.String()
}

// NodeModule is the directory of npm package pkg installed under
// testdata/dir/node_modules by fetch (a script of scripts/), skipping t
// when it is not there (failing under CI).
func NodeModule(t testing.TB, dir, pkg, fetch string) string {
	t.Helper()
	path := filepath.Join(Root(t), "testdata", dir, "node_modules", pkg)
	if _, err := os.Stat(filepath.Join(path, "package.json")); err != nil {
		Missing(t, "the "+pkg+" npm package is not installed in testdata/"+dir+"; run "+fetch)
	}
	return path
}
