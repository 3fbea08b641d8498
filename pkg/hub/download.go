package hub

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"

	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// FileMeta is what a HEAD on a resolve URL says about a file.
type FileMeta struct {
	Commit   string // X-Repo-Commit
	ETag     string // X-Linked-Etag (LFS: sha256) or ETag (git sha1), normalised
	Size     int64  // X-Linked-Size or Content-Length; -1 when unknown
	Location string // where the bytes are (the CDN for LFS files)
}

func (c *Client) resolveURL(repo, rev, path string) string {
	return c.endpoint() + "/datasets/" + repo + "/resolve/" + escRev(rev) + "/" + escPath(path)
}

// Head reads a file's metadata as huggingface_hub's get_hf_file_metadata
// does: relative redirects followed, the one to another host read.
func (c *Client) Head(ctx context.Context, repo, rev, path string) (FileMeta, error) {
	u := c.resolveURL(repo, rev, path)
	resp, err := c.do(ctx, http.MethodHead, u, nil, true)
	if err != nil {
		return FileMeta{}, c.userError(err, repo, rev, path)
	}
	resp.Body.Close()
	m := FileMeta{
		Commit: resp.Header.Get("X-Repo-Commit"),
		ETag:   NormalizeETag(resp.Header.Get("X-Linked-Etag")),
		Size:   -1,
	}
	if m.ETag == "" {
		m.ETag = NormalizeETag(resp.Header.Get("ETag"))
	}
	isRedirect := resp.StatusCode >= 300 && resp.StatusCode < 400
	sz := resp.Header.Get("X-Linked-Size")
	if sz == "" && !isRedirect {
		sz = resp.Header.Get("Content-Length")
	}
	if n, err := strconv.ParseInt(sz, 10, 64); err == nil && n >= 0 {
		m.Size = n
	}
	m.Location = resp.Request.URL.String()
	if isRedirect {
		loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
		if err != nil {
			return FileMeta{}, fmt.Errorf("%s: bad Location: %v", u, err)
		}
		m.Location = loc.String()
	}
	if !IsCommit(m.Commit) || !etagRE.MatchString(m.ETag) {
		return FileMeta{}, &usererr.Error{Code: usererr.ExitFailure, Msg: fmt.Sprintf("%s answered without the X-Repo-Commit and ETag headers a Hub sends (commit %q, etag %q); is HF_ENDPOINT (%s) a Hugging Face Hub or a mirror that keeps them?", u, m.Commit, m.ETag, c.endpoint())}
	}
	return m, nil
}

// Download makes repo's path at rev a file of the cache and returns its
// snapshot path and the commit. A cached blob that matches its ETag is
// used with no download; a corrupt or partial one is fetched again.
func (c *Client) Download(ctx context.Context, repo, rev, path string) (string, string, error) {
	if rev == "" {
		rev = "main"
	}
	if c.Offline {
		return c.offlineFile(repo, rev, path)
	}
	m, err := c.Head(ctx, repo, rev, path)
	if err != nil {
		return "", "", err
	}
	if err := c.writeRef(repo, rev, m.Commit); err != nil {
		return "", "", err
	}
	if err := c.fetchBlob(ctx, repo, path, m); err != nil {
		return "", "", err
	}
	p, err := c.link(repo, m.Commit, path, m.ETag)
	return p, m.Commit, err
}

// offlineFile finds a file in the cache without a request.
func (c *Client) offlineFile(repo, rev, path string) (string, string, error) {
	commit, ok := c.cachedCommit(repo, rev)
	if !ok {
		return "", "", usererr.Errorf("HF_HUB_OFFLINE=1 and dataset %s at revision %s is not in the Hugging Face cache (%s); pull it once online, or unset HF_HUB_OFFLINE", repo, rev, c.repoDir(repo))
	}
	p := c.snapshotPath(repo, commit, path)
	target, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", "", usererr.Errorf("HF_HUB_OFFLINE=1 and %s of dataset %s (commit %.12s) is not in the Hugging Face cache (%s); pull it once online, or unset HF_HUB_OFFLINE", path, repo, commit, c.repoDir(repo))
	}
	if etag := filepath.Base(target); filepath.Dir(target) == filepath.Join(mustEval(c.repoDir(repo)), "blobs") {
		if err := c.checkBlob(repo, target, etag, -1); err != nil {
			return "", "", usererr.Errorf("HF_HUB_OFFLINE=1 and the cached %s of dataset %s is damaged (%v); unset HF_HUB_OFFLINE to fetch it again", path, repo, err)
		}
	}
	return p, commit, nil
}

func mustEval(p string) string {
	if e, err := filepath.EvalSymlinks(p); err == nil {
		return e
	}
	return p
}

// blobWriter is the .incomplete file being filled.
type blobWriter interface {
	io.Writer
	Close() error
}

func openIncomplete(path string, resume bool) (blobWriter, error) {
	flag := os.O_WRONLY | os.O_CREATE
	if resume {
		flag |= os.O_APPEND
	} else {
		flag |= os.O_TRUNC
	}
	return os.OpenFile(path, flag, atomicfile.FileMode)
}

// fetchBlob makes blobs/<etag> hold the file, under the blob's lock.
func (c *Client) fetchBlob(ctx context.Context, repo, path string, m FileMeta) error {
	blob := c.blobPath(repo, m.ETag)
	if c.checkBlob(repo, blob, m.ETag, m.Size) == nil {
		return nil
	}
	unlock, err := lockFile(ctx, c.lockPath(repo, m.ETag))
	if err != nil {
		return err
	}
	defer unlock()
	switch err := c.checkBlob(repo, blob, m.ETag, m.Size); {
	case err == nil:
		return nil // another process fetched it while we waited
	case errors.Is(err, ErrMismatch):
		os.Remove(blob) // corrupt: never used, fetched again
		os.Remove(c.stampPath(repo, m.ETag))
	case !errors.Is(err, fs.ErrNotExist):
		return cacheErr(err)
	}
	if err := os.MkdirAll(filepath.Dir(blob), atomicfile.DirMode); err != nil {
		return cacheErr(err)
	}
	inc := blob + ".incomplete"
	for fresh := 0; fresh < 2; fresh++ {
		sum, err := c.get(ctx, repo, path, m, inc)
		if err != nil {
			return err
		}
		switch st, serr := os.Stat(inc); {
		case serr != nil:
			err = serr
		case m.Size >= 0 && st.Size() != m.Size:
			err = fmt.Errorf("%s holds %d bytes, not %d: %w", inc, st.Size(), m.Size, ErrMismatch)
		case sum != "" && sum != m.ETag:
			err = fmt.Errorf("%s hashes to %.12s…, not %.12s…: %w", inc, sum, m.ETag, ErrMismatch)
		}
		if err == nil {
			// Not synced: the blob is checked against its ETag on every
			// use (checkBlob; a stamp is written only once its bytes are
			// on disk), so a blob a crash left short or zeroed is found
			// and fetched again, as huggingface_hub, which moves blobs
			// in without a sync, would too. The sync cost 45 ms for
			// 100 MB here (docs/benchmarks.md), a third of the transfer.
			return cacheErr(atomicfile.MoveUnsynced(inc, blob))
		}
		os.Remove(inc) // a bad prefix from an earlier run: start over once
		if !errors.Is(err, ErrMismatch) {
			return cacheErr(err)
		}
		if fresh == 1 {
			return &usererr.Error{Code: usererr.ExitFailure, Msg: fmt.Sprintf("the download of %s from dataset %s %v twice; the Hub or a proxy between is altering it", path, repo, ErrMismatch)}
		}
	}
	return nil
}

// get fills inc with the file, resuming with Range from what inc holds:
// cut transfers are resumed (bounded attempts), a 200 to a Range restarts.
func (c *Client) get(ctx context.Context, repo, path string, m FileMeta, inc string) (string, error) {
	open := c.openBlob
	if open == nil {
		open = openIncomplete
	}
	var have int64
	if st, err := os.Stat(inc); err == nil {
		have = st.Size()
		if m.Size >= 0 && have > m.Size {
			os.Remove(inc)
			have = 0
		}
	}
	// The ETag's hash is computed on another goroutine as the bytes
	// arrive (a resumed file's prefix first), so checking costs no second
	// pass over the file.
	hs := newHashStream(m.ETag, m.Size)
	defer hs.stop()
	if have > 0 {
		if err := hs.prefix(inc, have); err != nil {
			return "", cacheErr(err)
		}
	}
	var bar interface {
		Add(int64)
		Done()
	}
	if c.Progress != nil {
		cnt := c.Progress.Start(repo+"/"+path, "bytes", m.Size)
		cnt.Add(have)
		bar = cnt
		defer cnt.Done()
	}
	failures, attempts := 0, 0
	var lastErr error
	for {
		if m.Size >= 0 && have == m.Size {
			return hs.sum(), nil
		}
		attempts++
		if failures > c.retries() || attempts > 20*c.retries() {
			return "", &usererr.Error{Code: usererr.ExitFailure, Msg: fmt.Sprintf("downloading %s of dataset %s failed %d times (last: %v); %d of %s bytes are kept and the next pull resumes from there", path, repo, attempts-1, lastErr, have, sizeText(m.Size)), Err: lastErr}
		}
		hdr := http.Header{}
		if have > 0 {
			hdr.Set("Range", "bytes="+itoa(have)+"-")
		}
		resp, err := c.do(ctx, http.MethodGet, m.Location, hdr, false)
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			var he *Error
			if errors.As(err, &he) && he.Status == http.StatusRequestedRangeNotSatisfiable && have > 0 {
				os.Remove(inc) // what we hold is not a prefix of this file
				have, failures, lastErr = 0, failures+1, err
				hs.reset()
				continue
			}
			return "", c.userError(err, repo, "", path)
		}
		resume := have > 0 && resp.StatusCode == http.StatusPartialContent
		if have > 0 && !resume {
			have = 0 // the server sent the whole file
			hs.reset()
		}
		w, err := open(inc, resume)
		if err != nil {
			resp.Body.Close()
			return "", cacheErr(err)
		}
		n, copyErr := copyCounted(w, resp.Body, bar, hs)
		resp.Body.Close()
		closeErr := w.Close()
		have += n
		if copyErr == nil {
			copyErr = closeErr
		}
		var we *writeErr
		if errors.As(copyErr, &we) {
			if isNoSpace(we.err) {
				return "", usererr.Errorf("no space left writing %s (%s of %s bytes written; %s more needed): free space, or set HF_HUB_CACHE to a larger disk; the next pull resumes", inc, itoa(have), sizeText(m.Size), sizeText(m.Size-have))
			}
			return "", cacheErr(we.err)
		}
		if copyErr != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			lastErr = copyErr
			// An attempt that moved the download on is no failure: a
			// link cut now and then still finishes; one cut every time
			// before much arrives ends after Retries attempts.
			if enough := min(1<<20, m.Size/10); n < enough || m.Size < 0 {
				failures++
			} else {
				failures = 0
			}
			continue
		}
		if m.Size < 0 {
			return hs.sum(), nil
		}
		if have != m.Size {
			lastErr = fmt.Errorf("the body ended after %d of %d bytes", have, m.Size)
			failures++
		}
	}
}

func sizeText(n int64) string {
	if n < 0 {
		return "unknown"
	}
	return itoa(n)
}

// writeErr marks a failure of the local write (not of the transfer).
type writeErr struct{ err error }

func (e *writeErr) Error() string { return e.err.Error() }

// copyCounted copies in large chunks, counting into the bar and handing
// each chunk to the hash stream.
func copyCounted(w io.Writer, r io.Reader, bar interface{ Add(int64) }, hs *hashStream) (int64, error) {
	var n int64
	for {
		buf := hs.buffer()
		k := 0
		var rerr error
		for k < len(buf) && rerr == nil {
			var m int
			m, rerr = r.Read(buf[k:])
			k += m
		}
		if k == 0 {
			hs.give(buf)
		} else {
			if _, err := w.Write(buf[:k]); err != nil {
				hs.give(buf)
				return n, &writeErr{err}
			}
			hs.feed(buf[:k])
			n += int64(k)
			if bar != nil {
				bar.Add(int64(k))
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// hashStream hashes the chunks of a download on its own goroutine, with a
// few buffers in flight; with an ETag that is no hash it only recycles
// the buffers.
type hashStream struct {
	etag string
	size int64
	pool chan []byte
	ch   chan []byte
	done chan struct{}
	h    hash.Hash
}

const chunk, inFlight = 1 << 20, 4

func newHashStream(etag string, size int64) *hashStream {
	hs := &hashStream{etag: etag, size: size, pool: make(chan []byte, inFlight)}
	for range inFlight {
		hs.pool <- make([]byte, chunk)
	}
	hs.start()
	return hs
}

func (hs *hashStream) start() {
	hs.h = etagHash(hs.etag, hs.size)
	hs.ch, hs.done = make(chan []byte, inFlight), make(chan struct{})
	go func(h hash.Hash, ch chan []byte, done chan struct{}) {
		defer close(done)
		for b := range ch {
			if h != nil {
				h.Write(b)
			}
			hs.pool <- b[:cap(b)]
		}
	}(hs.h, hs.ch, hs.done)
}

func (hs *hashStream) buffer() []byte { return <-hs.pool }
func (hs *hashStream) give(b []byte)  { hs.pool <- b[:cap(b)] }
func (hs *hashStream) feed(b []byte)  { hs.ch <- b }

// prefix hashes the first n bytes of a file being resumed.
func (hs *hashStream) prefix(path string, n int64) error {
	if hs.h == nil {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyN(hs.h, f, n)
	return err
}

// stop waits for the chunks in flight.
func (hs *hashStream) stop() {
	if hs.ch != nil {
		close(hs.ch)
		<-hs.done
		hs.ch = nil
	}
}

// reset starts over (the server sent the whole file after all).
func (hs *hashStream) reset() { hs.stop(); hs.start() }

// sum is the hex digest of everything fed ("" for an ETag that is no
// hash).
func (hs *hashStream) sum() string {
	hs.stop()
	if hs.h == nil {
		return ""
	}
	return hex.EncodeToString(hs.h.Sum(nil))
}

// sanitize refuses a sibling path that would leave the snapshot.
func safePath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
		return false
	}
	for _, s := range strings.Split(p, "/") {
		if s == "" || s == "." || s == ".." {
			return false
		}
	}
	return true
}
