//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Staged forwarders nobody staged or reused for a day are removed; the
// one in use, recent ones and other files are not.
func TestPruneForwarders(t *testing.T) {
	tmp := t.TempDir()
	old := time.Now().Add(-48 * time.Hour)
	mk := func(name string, when time.Time) string {
		t.Helper()
		d := filepath.Join(tmp, name)
		if err := os.MkdirAll(d, 0o711); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(d, "rllm")
		if err := os.WriteFile(f, []byte("bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, when, when); err != nil {
			t.Fatal(err)
		}
		return d
	}
	stale := mk("rllm-forwarder-0000000000000001", old)
	keep := mk("rllm-forwarder-0000000000000002", old)
	recent := mk("rllm-forwarder-0000000000000003", time.Now())
	other := mk("not-a-forwarder", old)
	pruneForwarders(tmp, keep, time.Now().Add(-forwarderKeep))
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a stale forwarder stayed: %v", err)
	}
	for _, d := range []string{keep, recent, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
