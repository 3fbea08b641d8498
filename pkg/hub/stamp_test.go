//go:build linux

package hub

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/fakehub"
)

// A cached blob is hashed on use until a stamp says it matched and has
// not changed since; any change to it (in place with its mtime put
// back, or a replacement) makes the next use hash it again, and a
// corrupt one is fetched again, online and off.
func TestVerifiedStamp(t *testing.T) {
	data := []byte("PAR1 a parquet file's bytes, as far as the cache cares PAR1")
	const path = "data/train.parquet"
	for _, tt := range []struct {
		name   string
		change func(t *testing.T, blob string)
		// hash: the next use hashes the blob; refetch: and fetches it
		// again.
		hash, refetch bool
	}{
		{"unchanged", func(*testing.T, string) {}, false, false},
		{"rewritten in place, mtime put back", func(t *testing.T, blob string) {
			st, _ := os.Stat(blob)
			bad := append([]byte(nil), data...)
			bad[7] ^= 1
			if err := os.WriteFile(blob, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(blob, st.ModTime(), st.ModTime()); err != nil {
				t.Fatal(err)
			}
		}, true, true},
		{"same bytes written again", func(t *testing.T, blob string) {
			if err := os.WriteFile(blob, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}, true, false},
		{"replaced by a corrupt copy", func(t *testing.T, blob string) {
			bad := append([]byte(nil), data...)
			bad[9] ^= 1
			tmp := blob + ".x"
			os.WriteFile(tmp, bad, 0o644)
			if err := os.Rename(tmp, blob); err != nil {
				t.Fatal(err)
			}
		}, true, true},
		{"chmod", func(t *testing.T, blob string) {
			if err := os.Chmod(blob, 0o600); err != nil {
				t.Fatal(err)
			}
		}, true, false},
	} {
		for _, offline := range []bool{false, true} {
			name := tt.name
			if offline {
				name += "/offline"
			}
			t.Run(name, func(t *testing.T) {
				h := fakehub.New()
				t.Cleanup(h.Close)
				h.Commit("o/d", "main", map[string]fakehub.File{path: {Data: data, LFS: true}})
				c := client(h, t.TempDir())
				var hashes atomic.Int64
				c.hashed = func(string) { hashes.Add(1) }
				use := func() string {
					t.Helper()
					u := *c
					u.Offline = offline
					p, _, err := u.Download(context.Background(), "o/d", "main", path)
					if err != nil {
						t.Fatal(err)
					}
					return p
				}
				use0 := func() {
					t.Helper()
					if _, _, err := c.Download(context.Background(), "o/d", "main", path); err != nil {
						t.Fatal(err)
					}
				}
				t0 := time.Now()
				c.now = func() time.Time { return t0 }
				use0() // the download: hashed as it arrives, no stamp
				blob := c.blobPath("o/d", sha256hex(data))
				stamp := c.stampPath("o/d", sha256hex(data))
				if _, err := os.Stat(stamp); err == nil {
					t.Fatal("a blob is stamped as it is downloaded, before its bytes are on disk")
				}
				// Just written: too recent for a stamp, hashed every use.
				use()
				use()
				if hashes.Load() != 2 {
					t.Fatalf("%d hashes in two uses of a new blob", hashes.Load())
				}
				if _, err := os.Stat(stamp); err == nil {
					t.Fatal("a blob changed just now was stamped")
				}
				// Later: hashed once more and stamped, then trusted.
				c.now = func() time.Time { return time.Now().Add(time.Minute) }
				use()
				use()
				if hashes.Load() != 3 {
					t.Fatalf("%d hashes, want 3 (the stamp's check and no more)", hashes.Load())
				}
				tt.change(t, blob)
				gets := h.CDNGets.Load()
				if tt.refetch && offline {
					off := *c
					off.Offline = true
					if _, _, err := off.Download(context.Background(), "o/d", "main", path); err == nil {
						t.Fatal("offline, a corrupt blob was used")
					}
					return
				}
				snap := use()
				if got := hashes.Load() - 3; (got > 0) != tt.hash {
					t.Fatalf("%d hashes after the change, want hash=%v", got, tt.hash)
				}
				if refetched := h.CDNGets.Load() > gets; refetched != tt.refetch {
					t.Fatalf("fetched again: %v, want %v", refetched, tt.refetch)
				}
				if b, _ := os.ReadFile(snap); string(b) != string(data) {
					t.Fatalf("the snapshot holds %q", b)
				}
			})
		}
	}
}
