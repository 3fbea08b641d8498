package sandbox

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The build context honours the ignore file as docker build does: what
// it excludes is neither sent nor hashed (changing it keeps the tag),
// "!pattern" brings files back, the Dockerfile and .dockerignore are
// always sent, and <Dockerfile>.dockerignore beside the Dockerfile wins
// over the root's.
func TestContextDockerignore(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Dockerfile", "FROM scratch\n")
	write(".dockerignore", "# comments and blank lines are skipped\n\nDockerfile\n.dockerignore\nsecret.txt\nlogs/\n**/*.tmp\n!keep.tmp\n")
	write("app/main.py", "print(1)\n")
	write("app/cache.tmp", "x")
	write("keep.tmp", "kept")
	write("secret.txt", "do not send")
	write("logs/run.log", "big")
	entries := func(dockerfile string) []string {
		t.Helper()
		var buf bytes.Buffer
		if err := writeContext(&buf, dir, dockerfile); err != nil {
			t.Fatal(err)
		}
		var names []string
		tr := tar.NewReader(&buf)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return names
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, h.Name)
		}
	}
	want := []string{".dockerignore", "Dockerfile", "app/", "app/main.py", "keep.tmp"}
	if got := entries("Dockerfile"); !slices.Equal(got, want) {
		t.Fatalf("context %v, want %v", got, want)
	}
	sum, err := contextHash(dir, "Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	write("secret.txt", "changed, still not sent")
	write("logs/other.log", "more")
	if again, _ := contextHash(dir, "Dockerfile"); again != sum {
		t.Error("changing an ignored file changed the context's hash")
	}
	write("app/main.py", "print(2)\n")
	if again, _ := contextHash(dir, "Dockerfile"); again == sum {
		t.Error("changing a sent file kept the context's hash")
	}

	// BuildKit's per-Dockerfile ignore file wins over the root's.
	write("build/Dockerfile", "FROM scratch\n")
	write("build/Dockerfile.dockerignore", "app\n")
	got := entries("build/Dockerfile")
	if slices.Contains(got, "app/main.py") || !slices.Contains(got, "secret.txt") || !slices.Contains(got, "build/Dockerfile") {
		t.Fatalf("with build/Dockerfile.dockerignore: %v", got)
	}

	// A pattern that does not parse names the file.
	write(".dockerignore", "[\n")
	if _, err := contextHash(dir, "Dockerfile"); err == nil || !strings.Contains(err.Error(), ".dockerignore") {
		t.Fatalf("bad pattern: %v", err)
	}
}
