package hub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
)

// RepoDir is the cache folder of a dataset: datasets--ORG--NAME, as
// huggingface_hub's repo_folder_name writes it.
func RepoDir(cacheDir, repo string) string {
	return filepath.Join(cacheDir, "datasets--"+strings.ReplaceAll(repo, "/", "--"))
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsCommit reports a full commit hash.
func IsCommit(s string) bool { return commitRE.MatchString(s) }

// NormalizeETag drops W/ and the quotes, as huggingface_hub's
// _normalize_etag does.
func NormalizeETag(etag string) string {
	return strings.Trim(strings.TrimPrefix(strings.TrimSpace(etag), "W/"), `"`)
}

var etagRE = regexp.MustCompile(`^[0-9A-Za-z_-]{8,128}$`)

func (c *Client) repoDir(repo string) string { return RepoDir(c.CacheDir, repo) }

func (c *Client) blobPath(repo, etag string) string {
	return filepath.Join(c.repoDir(repo), "blobs", etag)
}

func (c *Client) lockPath(repo, etag string) string {
	return filepath.Join(c.CacheDir, ".locks", filepath.Base(c.repoDir(repo)), etag+".lock")
}

func (c *Client) snapshotPath(repo, commit, path string) string {
	return filepath.Join(c.repoDir(repo), "snapshots", commit, filepath.FromSlash(path))
}

// refPath is refs/<revision>; refs/convert/parquet nests as
// huggingface_hub nests it (refs/refs/convert/parquet).
func (c *Client) refPath(repo, rev string) string {
	return filepath.Join(c.repoDir(repo), "refs", filepath.FromSlash(rev))
}

// cachedCommit is the commit a revision resolved to last time: the
// revision itself when it is a commit, else refs/<revision>.
func (c *Client) cachedCommit(repo, rev string) (string, bool) {
	if IsCommit(rev) {
		_, err := os.Stat(filepath.Join(c.repoDir(repo), "snapshots", rev))
		return rev, err == nil
	}
	b, err := os.ReadFile(c.refPath(repo, rev))
	if err != nil {
		return "", false
	}
	s := strings.TrimSpace(string(b))
	return s, IsCommit(s)
}

// writeRef records that rev is commit (atomically: a concurrent reader
// never sees half a hash).
func (c *Client) writeRef(repo, rev, commit string) error {
	if rev == commit {
		return nil
	}
	p := c.refPath(repo, rev)
	if b, err := os.ReadFile(p); err == nil && string(b) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), atomicfile.DirMode); err != nil {
		return cacheErr(err)
	}
	return cacheErr(atomicfile.WriteFile(p, []byte(commit)))
}

// link points snapshots/<commit>/<path> at blobs/<etag> with a relative
// symlink, replaced atomically.
func (c *Client) link(repo, commit, path, etag string) (string, error) {
	dst := c.snapshotPath(repo, commit, path)
	blob := c.blobPath(repo, etag)
	rel, err := filepath.Rel(filepath.Dir(dst), blob)
	if err != nil {
		return "", err
	}
	if cur, err := os.Readlink(dst); err == nil && cur == rel {
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), atomicfile.DirMode); err != nil {
		return "", cacheErr(err)
	}
	if err := atomicfile.Symlink(rel, dst); err != nil {
		return "", cacheErr(err)
	}
	return dst, nil
}

// etagHash is the hash an ETag is: sha256 (64 hex, LFS) or the git blob
// sha1 (40 hex, regular files); nil when the ETag is neither.
func etagHash(etag string, size int64) hash.Hash {
	switch {
	case len(etag) == 64 && isHex(etag):
		return sha256.New()
	case len(etag) == 40 && isHex(etag):
		h := sha1.New()
		fmt.Fprintf(h, "blob %d\x00", size)
		return h
	}
	return nil
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// ErrMismatch is a blob whose bytes are not its ETag's.
var ErrMismatch = errors.New("does not match its ETag")

// stampPath is where rllm notes that a blob matched its ETag:
// .locks/datasets--ORG--NAME/<etag>.verified, next to the blob's lock
// (huggingface_hub's cache scan skips .locks).
func (c *Client) stampPath(repo, etag string) string {
	return filepath.Join(c.CacheDir, ".locks", filepath.Base(c.repoDir(repo)), etag+".verified")
}

// stampMargin is how long before a check a blob must have last changed
// for its stamp to be written: a change after the check then gets a
// ctime after the stamped one even on a file system that keeps times
// in whole seconds (or two, FAT) or from a clock that ticks coarsely.
const stampMargin = 2 * time.Second

// checkBlob checks a blob against its ETag (sha256 or git sha1) and its
// size, when known, skipping the hash when the blob's stamp says it
// matched and the blob has not changed since.
//
// What a stamp trusts: that a blob whose device, inode, size, mtime and
// ctime are those recorded when its hash matched still holds the bytes
// that were hashed (the kernel moves the ctime on every change and no
// system call sets it back; replacing the file makes another inode).
// It is written only when that holds: the blob last changed at least
// stampMargin before the check began, its bytes were synced to disk
// after the hash (so a crash cannot leave the stamp with lost data),
// and it did not change while it was read. It does not catch a disk
// that returns other bytes than it was given, a write to the block
// device under the file system, or an in-place write to a blob that a
// crash cuts before the new ctime reaches the disk (nothing writes a
// blob in place: rllm and huggingface_hub both rename whole files in);
// removing the .verified files makes the next use hash every blob again.
func (c *Client) checkBlob(repo, path, etag string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if size >= 0 && fi.Size() != size {
		return fmt.Errorf("%s holds %d bytes, not %d: %w", path, fi.Size(), size, ErrMismatch)
	}
	if etagHash(etag, fi.Size()) == nil {
		return nil // an ETag that is no hash: the size is all there is to check
	}
	stamp, ctime, stampable := fileStamp(fi)
	sp := c.stampPath(repo, etag)
	if stampable {
		if b, err := os.ReadFile(sp); err == nil && string(b) == stamp {
			return nil
		}
	}
	start := c.clock()
	if c.hashed != nil {
		c.hashed(path)
	}
	if err := hashCheck(f, path, etag, fi.Size()); err != nil {
		return err
	}
	if !stampable || !ctime.Before(start.Add(-stampMargin)) || f.Sync() != nil {
		return nil
	}
	if fi2, err := f.Stat(); err != nil {
		return nil
	} else if again, _, _ := fileStamp(fi2); again != stamp {
		return nil
	}
	// The stamp only saves work: a stamp that cannot be written is none.
	if os.MkdirAll(filepath.Dir(sp), atomicfile.DirMode) == nil {
		atomicfile.WriteFile(sp, []byte(stamp))
	}
	return nil
}

func (c *Client) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// hashCheck hashes f (size bytes, read from its current offset) and
// compares the sum with etag.
func hashCheck(f *os.File, path, etag string, size int64) error {
	h := etagHash(etag, size)
	if h == nil {
		return nil // an ETag that is no hash: the size is all there is to check
	}
	if _, err := io.CopyBuffer(h, f, make([]byte, 1<<20)); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != etag {
		return fmt.Errorf("%s hashes to %.12s…, not %.12s…: %w", path, got, etag, ErrMismatch)
	}
	return nil
}

// snapshotFiles lists the files of a cached snapshot (offline listing).
func (c *Client) snapshotFiles(repo, commit string) ([]string, error) {
	root := filepath.Join(c.repoDir(repo), "snapshots", commit)
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || strings.HasSuffix(p, ".tmp") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	return out, err
}

// cacheErr names a cache that cannot be written.
func cacheErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("the Hugging Face cache: %w (set HF_HUB_CACHE or HF_HOME to a writable directory)", err)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
