// Package fakehub is a Hugging Face Hub for tests, built from the
// protocol huggingface_hub speaks (src/huggingface_hub/file_download.py,
// hf_api.py, utils/_http.py at commit ee0a4510f): the revision API, HEAD
// and GET on resolve URLs (a regular file answers a relative 307 to
// /api/resolve-cache/... whose 200 carries X-Repo-Commit and the git sha1
// ETag; an LFS file answers a 302 to a CDN on another host with
// X-Repo-Commit, X-Linked-Etag and X-Linked-Size), X-Error-Code errors
// (RepoNotFound 401 anonymous / 404 with a token, GatedRepo 401 / 403,
// RevisionNotFound, EntryNotFound), 401 for an invalid token on every
// route, and a CDN that serves Range requests and, like a presigned S3
// URL, refuses a request that also carries an Authorization header.
package fakehub

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// File is one file of a commit.
type File struct {
	Data []byte
	LFS  bool // served from the CDN (parquet files are, on the real Hub)
}

// Repo is one dataset repository.
type Repo struct {
	Private bool
	Gated   bool
	// Granted are the tokens that may read a private or gated repo.
	Granted []string
	// Revs maps a branch or tag (main, refs/convert/parquet) to a commit.
	Revs map[string]string
	// Commits maps a commit to its files.
	Commits map[string]map[string]File
}

// Hub is the fake: Server is the Hub, CDN the LFS host.
type Hub struct {
	Server, CDN *httptest.Server
	// Tokens are the valid tokens.
	Tokens []string

	mu    sync.Mutex
	repos map[string]*Repo
	blobs map[string][]byte // sha256 → bytes, for the CDN

	// Faults, set before requests.
	// CutAfter makes the CDN end every response after that many bytes
	// (0: never).
	CutAfter int64
	// RateLimit answers that many requests 429 with Retry-After: 1.
	RateLimit atomic.Int64
	// Corrupt makes the CDN flip a byte of what it serves.
	Corrupt atomic.Bool
	// RedirectTo, when set, is where LFS redirects point instead of the
	// CDN (a host that must never see the token).
	RedirectTo string
	// Throttle limits the CDN's bytes per second (0: no limit): each
	// response is paced to that rate from its first byte on, so short
	// sleeps that overshoot are made up for.
	Throttle int64

	// Counters.
	Heads, APICalls, CDNGets, CDNBytes atomic.Int64
	// AuthOnCDN counts CDN requests that carried Authorization.
	AuthOnCDN atomic.Int64
}

// New starts a fake Hub and its CDN.
func New() *Hub {
	h := &Hub{repos: map[string]*Repo{}, blobs: map[string][]byte{}}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serveHub))
	h.CDN = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	return h
}

// Close stops both servers.
func (h *Hub) Close() { h.Server.Close(); h.CDN.Close() }

// URL is the Hub's endpoint (HF_ENDPOINT).
func (h *Hub) URL() string { return h.Server.URL }

// Commit makes a commit of files in repo, points rev at it and returns
// its hash (the sha1 of the content, so the same files make the same
// commit).
func (h *Hub) Commit(repo, rev string, files map[string]File) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[repo]
	if r == nil {
		r = &Repo{Revs: map[string]string{}, Commits: map[string]map[string]File{}}
		h.repos[repo] = r
	}
	sum := sha1.New()
	fmt.Fprint(sum, repo, rev)
	for _, p := range sortedKeys(files) {
		fmt.Fprintf(sum, "%s\x00%x\x00", p, sha256.Sum256(files[p].Data))
		if files[p].LFS {
			s := sha256.Sum256(files[p].Data)
			h.blobs[hex.EncodeToString(s[:])] = files[p].Data
		}
	}
	commit := hex.EncodeToString(sum.Sum(nil))
	r.Commits[commit] = files
	r.Revs[rev] = commit
	return commit
}

// SetAccess makes repo private or gated, readable by the granted tokens.
func (h *Hub) SetAccess(repo string, private, gated bool, granted ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[repo]
	r.Private, r.Gated, r.Granted = private, gated, granted
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// GitSHA1 is a regular file's ETag: the git blob hash.
func GitSHA1(b []byte) string {
	s := sha1.New()
	fmt.Fprintf(s, "blob %d\x00", len(b))
	s.Write(b)
	return hex.EncodeToString(s.Sum(nil))
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// access checks the token for repo; it writes the error and returns nil
// when refused.
func (h *Hub) access(w http.ResponseWriter, r *http.Request, name string) *Repo {
	tok, hasTok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if hasTok && !slices.Contains(h.Tokens, tok) {
		hubError(w, 401, "", "Invalid credentials in Authorization header")
		return nil
	}
	h.mu.Lock()
	repo := h.repos[name]
	h.mu.Unlock()
	granted := repo != nil && hasTok && slices.Contains(repo.Granted, tok)
	if repo == nil || (repo.Private && !granted) {
		if hasTok {
			hubError(w, 404, "RepoNotFound", "Repository not found")
		} else {
			hubError(w, 401, "RepoNotFound", "Repository not found")
		}
		return nil
	}
	if repo.Gated && !granted {
		if hasTok {
			hubError(w, 403, "GatedRepo", "Access to dataset "+name+" is restricted and you are not in the authorized list. Visit https://huggingface.co/datasets/"+name+" to ask for access.")
		} else {
			hubError(w, 401, "GatedRepo", "Access to dataset "+name+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
		}
		return nil
	}
	return repo
}

func (h *Hub) commitOf(repo *Repo, rev string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := repo.Revs[rev]; ok {
		return c, true
	}
	if _, ok := repo.Commits[rev]; ok {
		return rev, true
	}
	return "", false
}

// segments splits the escaped path: a revision is one segment
// (refs%2Fconvert%2Fparquet), as on the real Hub.
func segments(r *http.Request) []string {
	parts := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	for i, p := range parts {
		if u, err := url.PathUnescape(p); err == nil {
			parts[i] = u
		}
	}
	return parts
}

func (h *Hub) serveHub(w http.ResponseWriter, r *http.Request) {
	if h.RateLimit.Load() > 0 && h.RateLimit.Add(-1) >= 0 {
		w.Header().Set("Retry-After", "1")
		hubError(w, 429, "", "You have exceeded our request rate limit")
		return
	}
	seg := segments(r)
	switch {
	case len(seg) >= 6 && seg[0] == "api" && seg[1] == "datasets" && seg[4] == "revision" && r.Method == http.MethodGet:
		h.APICalls.Add(1)
		h.serveInfo(w, r, seg[2]+"/"+seg[3], strings.Join(seg[5:], "/"))
	case len(seg) >= 6 && seg[0] == "datasets" && seg[3] == "resolve" && (r.Method == http.MethodHead || r.Method == http.MethodGet):
		if r.Method == http.MethodHead {
			h.Heads.Add(1)
		}
		h.serveResolve(w, r, seg[1]+"/"+seg[2], seg[4], strings.Join(seg[5:], "/"))
	case len(seg) >= 7 && seg[0] == "api" && seg[1] == "resolve-cache" && seg[2] == "datasets":
		h.serveCached(w, r, seg[3]+"/"+seg[4], seg[5], strings.Join(seg[6:], "/"))
	default:
		hubError(w, 404, "", "Sorry, we can't find the page you are looking for.")
	}
}

func (h *Hub) serveInfo(w http.ResponseWriter, r *http.Request, name, rev string) {
	repo := h.access(w, r, name)
	if repo == nil {
		return
	}
	if strings.Contains(rev, "/") && !strings.HasPrefix(rev, "refs/") {
		hubError(w, 400, "", "Invalid rev id")
		return
	}
	commit, ok := h.commitOf(repo, rev)
	if !ok {
		hubError(w, 404, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	h.mu.Lock()
	files := repo.Commits[commit]
	var sib []map[string]any
	for _, p := range sortedKeys(files) {
		sib = append(sib, map[string]any{"rfilename": p})
	}
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"_id": "x", "id": name, "sha": commit, "private": repo.Private, "gated": repo.Gated, "disabled": false, "siblings": sib, "lastModified": "2024-01-01T00:00:00.000Z"})
}

func (h *Hub) serveResolve(w http.ResponseWriter, r *http.Request, name, rev, path string) {
	repo := h.access(w, r, name)
	if repo == nil {
		return
	}
	commit, ok := h.commitOf(repo, rev)
	if !ok {
		hubError(w, 404, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	h.mu.Lock()
	f, ok := repo.Commits[commit][path]
	h.mu.Unlock()
	w.Header().Set("X-Repo-Commit", commit)
	if !ok {
		hubError(w, 404, "EntryNotFound", path+" does not exist on \""+rev+"\"")
		return
	}
	if f.LFS {
		sum := sha256hex(f.Data)
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.Data)))
		target := h.CDN.URL
		if h.RedirectTo != "" {
			target = h.RedirectTo
		}
		w.Header().Set("Location", target+"/repos/"+sum+"?X-Amz-Signature=fake&response-content-disposition=inline")
		w.Header().Set("Content-Length", "1300") // the redirect page, not the file
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("Location", "/api/resolve-cache/datasets/"+name+"/"+commit+"/"+path)
	w.WriteHeader(http.StatusTemporaryRedirect)
}

func (h *Hub) serveCached(w http.ResponseWriter, r *http.Request, name, commit, path string) {
	repo := h.access(w, r, name)
	if repo == nil {
		return
	}
	h.mu.Lock()
	f, ok := repo.Commits[commit][path]
	h.mu.Unlock()
	w.Header().Set("X-Repo-Commit", commit)
	if !ok {
		hubError(w, 404, "EntryNotFound", path+" does not exist")
		return
	}
	w.Header().Set("ETag", `"`+GitSHA1(f.Data)+`"`)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.Data))
}

func (h *Hub) serveCDN(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "" {
		h.AuthOnCDN.Add(1)
		w.WriteHeader(400)
		fmt.Fprint(w, "<Error><Code>InvalidArgument</Code><Message>Only one auth mechanism allowed</Message></Error>")
		return
	}
	sum, ok := strings.CutPrefix(r.URL.Path, "/repos/")
	h.mu.Lock()
	data, found := h.blobs[sum]
	h.mu.Unlock()
	if !ok || !found || r.URL.Query().Get("X-Amz-Signature") == "" {
		w.WriteHeader(403)
		fmt.Fprint(w, "<Error><Code>AccessDenied</Code></Error>")
		return
	}
	h.CDNGets.Add(1)
	if h.Corrupt.Load() {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0xff
	}
	cw := &countWriter{ResponseWriter: w, h: h, limit: h.CutAfter}
	w.Header().Set("ETag", `"`+sum+`"`)
	http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(data))
}

// countWriter counts the CDN's bytes, cuts the connection after limit
// and throttles.
type countWriter struct {
	http.ResponseWriter
	h     *Hub
	limit int64
	n     int64
	start time.Time // of the first Write, for Throttle
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.limit > 0 && c.n+int64(len(p)) > c.limit {
		p = p[:c.limit-c.n]
		k, _ := c.ResponseWriter.Write(p)
		c.n += int64(k)
		c.h.CDNBytes.Add(int64(k))
		if f, ok := c.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		panic(http.ErrAbortHandler) // the connection is cut mid-body
	}
	if c.start.IsZero() {
		c.start = time.Now()
	}
	k, err := c.ResponseWriter.Write(p)
	c.n += int64(k)
	c.h.CDNBytes.Add(int64(k))
	if t := c.h.Throttle; t > 0 {
		// float64: n×1e9 would overflow an int64 past 9 GB.
		time.Sleep(time.Until(c.start.Add(time.Duration(float64(c.n) / float64(t) * float64(time.Second)))))
	}
	return k, err
}
