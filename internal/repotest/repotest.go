// Package repotest helps tests find files of the repository itself, such
// as the tokenizer files scripts/fetch-tokenizers.sh caches under .cache.
package repotest

import (
	"os"
	"path/filepath"
	"testing"
)

// Root walks up from the test's working directory to the directory that
// holds go.mod.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}
