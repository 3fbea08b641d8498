//go:build linux

package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
)

// reachableByNobody reports the first directory on p's way that the
// sandbox's user (nobody, when rllm runs as root) cannot pass, or "" when
// it can reach p: bwrap runs as that user and resolves every path it
// binds with that user's permissions.
func reachableByNobody(p string) string {
	p = filepath.Clean(p)
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return d
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		switch {
		case ok && st.Uid == nobody && mode&0o100 != 0:
		case ok && st.Gid == nobody && mode&0o010 != 0:
		case mode&0o001 != 0:
		default:
			return d
		}
		if d == "/" {
			return ""
		}
	}
}

var staged struct {
	mu   sync.Mutex
	from string
	to   string
	err  error
}

// stagedForwarder returns a copy of the forwarder binary that nobody can
// reach, when the binary itself lies behind a private directory (rllm as
// root, installed in /root/go/bin): one copy per binary content, under
// the temporary directory, shared by every run and checked before use.
func stagedForwarder(bin string) (string, error) {
	if reachableByNobody(bin) == "" {
		return bin, nil
	}
	staged.mu.Lock()
	defer staged.mu.Unlock()
	if staged.from == bin && staged.err == nil && staged.to != "" {
		// Marked as in use, so no other rllm prunes it; one another rllm
		// pruned all the same (a run idle for a day) is staged again.
		now := time.Now()
		if os.Chtimes(staged.to, now, now) == nil {
			return staged.to, nil
		}
	}
	staged.from, staged.to, staged.err = bin, "", nil
	staged.to, staged.err = stage(bin)
	return staged.to, staged.err
}

func stage(bin string) (string, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("sandbox: reading the forwarder %s: %w", bin, err)
	}
	sum := sha256.Sum256(data)
	dir := filepath.Join(os.TempDir(), "rllm-forwarder-"+hex.EncodeToString(sum[:8]))
	dst := filepath.Join(dir, "rllm")
	if err := os.Mkdir(dir, 0o711); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("sandbox: staging the forwarder: %w", err)
	}
	// A directory someone else made, or one others may write, is not
	// trusted.
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || !fi.IsDir() || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("sandbox: %s exists and is not rllm's own private directory; remove it", dir)
	}
	defer pruneForwarders(os.TempDir(), dir, time.Now().Add(-forwarderKeep))
	if f, err := os.Open(dst); err == nil {
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err == nil && hex.EncodeToString(h.Sum(nil)[:8]) == hex.EncodeToString(sum[:8]) {
			now := time.Now()
			_ = os.Chtimes(dst, now, now) // in use: not pruned by others
			return dst, nil
		}
	}
	if err := atomicfile.WriteFileMode(dst, data, 0o755); err != nil {
		return "", fmt.Errorf("sandbox: staging the forwarder: %w", err)
	}
	return dst, nil
}

// forwarderKeep is how long a staged forwarder no rllm has staged or
// reused stays: each rllm build (every test binary too) stages a copy of
// itself, about 30 MB, which would otherwise pile up in the temporary
// directory. A run still using an older one stages it again.
const forwarderKeep = 24 * time.Hour

// pruneForwarders removes this user's staged forwarders under tmp, but
// keep, whose binary was last staged or reused before cutoff.
func pruneForwarders(tmp, keep string, cutoff time.Time) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, "rllm-forwarder-*"))
	for _, d := range dirs {
		if d == keep {
			continue
		}
		fi, err := os.Lstat(filepath.Join(d, "rllm"))
		if err != nil || !fi.ModTime().Before(cutoff) {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		_ = os.RemoveAll(d)
	}
}
