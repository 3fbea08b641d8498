package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/internal/ctxsleep"
	"github.com/rllm-org/rllm-go/pkg/progress"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// DefaultEndpoint is the Hub huggingface_hub talks to without HF_ENDPOINT.
const DefaultEndpoint = "https://huggingface.co"

// Client talks to one Hub endpoint and keeps files in one cache.
type Client struct {
	// Endpoint is the Hub's base URL (HF_ENDPOINT); "" means huggingface.co.
	Endpoint string
	// Token is sent as a Bearer token to the endpoint's host only (never
	// to a CDN a redirect points at); "" sends none.
	Token string
	// CacheDir is HF_HUB_CACHE.
	CacheDir string
	// Offline (HF_HUB_OFFLINE=1) makes no request: only cached files.
	Offline bool
	// HTTP makes the requests; nil means a client with connect and
	// header timeouts (bodies may take as long as they take).
	HTTP *http.Client
	// Progress shows downloads (bytes, rate, ETA); nil shows nothing.
	Progress progress.Progress
	// Retries bounds the attempts after the first of one request (a cut
	// connection, a 5xx, a 429); 0 means 5.
	Retries int
	// Backoff is the first wait between attempts (doubling, at most
	// 30s); 0 means 1s. A 429's Retry-After wins, up to MaxRetryAfter.
	Backoff       time.Duration
	MaxRetryAfter time.Duration
	// UserAgent names the client; "" means rllm.
	UserAgent string

	// openBlob opens a blob's .incomplete file for writing (tests inject
	// a full disk); nil means os.OpenFile.
	openBlob func(path string, resume bool) (blobWriter, error)
	// now is the clock the blob stamps are written by (tests); nil means
	// time.Now.
	now func() time.Time
	// hashed, when set, is told of every hash of a cached blob (tests).
	hashed func(path string)
}

func (c *Client) endpoint() string {
	if c.Endpoint == "" {
		return DefaultEndpoint
	}
	return strings.TrimRight(c.Endpoint, "/")
}

func (c *Client) retries() int {
	if c.Retries <= 0 {
		return 5
	}
	return c.Retries
}

var defaultHTTP = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	TLSHandshakeTimeout:   30 * time.Second,
	ResponseHeaderTimeout: 60 * time.Second,
	MaxIdleConnsPerHost:   8,
	DisableCompression:    true, // sizes and Range offsets are of the bytes as stored
}}

func (c *Client) http() *http.Client {
	h := c.HTTP
	if h == nil {
		h = defaultHTTP
	}
	// Redirects are followed by hand: the token goes to the endpoint's
	// host only, and a HEAD must stop at the hop that carries the
	// metadata.
	cp := *h
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// Error is an answer of the Hub that is not a success, read as
// huggingface_hub reads it (X-Error-Code, X-Error-Message).
type Error struct {
	Status  int
	Code    string // RepoNotFound, GatedRepo, RevisionNotFound, EntryNotFound, ...
	Message string
	URL     string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %d", e.URL, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// errorFrom reads a failed answer.
func errorFrom(resp *http.Response, u string) *Error {
	e := &Error{Status: resp.StatusCode, Code: resp.Header.Get("X-Error-Code"), Message: resp.Header.Get("X-Error-Message"), URL: u}
	if e.Message == "" && resp.Request != nil && resp.Request.Method != http.MethodHead {
		var body struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &body) == nil {
			e.Message = body.Error
		}
	}
	return e
}

// userError turns a Hub error about repo (at rev, for path) into one
// line that says what to do.
func (c *Client) userError(err error, repo, rev, path string) error {
	var he *Error
	if !errors.As(err, &he) {
		return err
	}
	page := c.endpoint() + "/datasets/" + repo
	ue := &usererr.Error{Err: err}
	switch {
	case he.Code == "GatedRepo" && c.Token == "":
		ue.Msg = fmt.Sprintf("dataset %s is gated: accept its terms at %s, then set HF_TOKEN (or run huggingface-cli login)", repo, page)
	case he.Code == "GatedRepo":
		ue.Msg = fmt.Sprintf("dataset %s is gated and your token has not been granted access: accept its terms at %s with the account of HF_TOKEN", repo, page)
	case he.Status == http.StatusUnauthorized && c.Token != "" && he.Code != "RepoNotFound":
		ue.Msg = fmt.Sprintf("%s refused the token (401): HF_TOKEN (or the token file) is invalid or expired; make a new one at %s/settings/tokens", c.endpoint(), c.endpoint())
	case he.Code == "RepoNotFound" || (he.Status == http.StatusNotFound && he.Code == "" && path == ""):
		if c.Token == "" {
			ue.Msg = fmt.Sprintf("dataset %s was not found on %s; check the name, or set HF_TOKEN if it is private", repo, c.endpoint())
		} else {
			ue.Msg = fmt.Sprintf("dataset %s was not found on %s, or your token cannot read it; check the name and the token's access", repo, c.endpoint())
		}
	case he.Code == "RevisionNotFound":
		ue.Msg = fmt.Sprintf("dataset %s has no revision %q; give a branch, tag or commit of %s", repo, rev, page)
	case he.Code == "EntryNotFound" || he.Status == http.StatusNotFound:
		ue.Msg = fmt.Sprintf("dataset %s has no file %q at revision %s", repo, path, rev)
	case he.Status == http.StatusForbidden:
		ue.Msg = fmt.Sprintf("%s refused access to dataset %s (403%s); check the token's permissions", c.endpoint(), repo, codeSuffix(he.Code))
	default:
		ue.Code = usererr.ExitFailure
		ue.Msg = fmt.Sprintf("the Hub answered %s", he.Error())
	}
	return ue
}

func codeSuffix(code string) string {
	if code == "" {
		return ""
	}
	return " " + code
}

// retryable is an answer worth another attempt.
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500
}

// do sends one request (with retries on a cut connection, 5xx and 429),
// following redirects by hand: every hop whose host is the endpoint's gets
// the token, no other. With stopAtCrossHost a redirect to another host is
// returned as it is (HEAD reads the LFS metadata from it). The caller
// closes the body.
func (c *Client) do(ctx context.Context, method, u string, hdr http.Header, stopAtCrossHost bool) (*http.Response, error) {
	base, err := url.Parse(c.endpoint())
	if err != nil {
		return nil, usererr.Errorf("HF_ENDPOINT %q is not a URL: %v", c.endpoint(), err)
	}
	var lastErr error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if attempt > c.retries() {
				return nil, lastErr
			}
			if err := ctxsleep.Sleep(ctx, c.wait(attempt, lastErr)); err != nil {
				return nil, err
			}
		}
		resp, err := c.follow(ctx, method, u, hdr, base, stopAtCrossHost)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var ue *usererr.Error
			if errors.As(err, &ue) {
				return nil, err
			}
			lastErr = err
			continue
		}
		if resp.StatusCode >= 400 {
			he := errorFrom(resp, u)
			resp.Body.Close()
			if retryable(resp.StatusCode) {
				lastErr = &retryErr{he, retryAfter(resp)}
				continue
			}
			return nil, he
		}
		return resp, nil
	}
}

// retryErr carries a retryable answer and the wait the server asked for.
type retryErr struct {
	he    *Error
	after time.Duration
}

func (e *retryErr) Error() string { return e.he.Error() }
func (e *retryErr) Unwrap() error { return e.he }

func (c *Client) wait(attempt int, last error) time.Duration {
	var re *retryErr
	if errors.As(last, &re) && re.after > 0 {
		maxWait := c.MaxRetryAfter
		if maxWait <= 0 {
			maxWait = 5 * time.Minute
		}
		return min(re.after, maxWait)
	}
	b := c.Backoff
	if b <= 0 {
		b = time.Second
	}
	return min(b<<(attempt-1), 30*time.Second)
}

// retryAfter reads Retry-After (seconds or an HTTP date).
func retryAfter(resp *http.Response) time.Duration {
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

func (c *Client) follow(ctx context.Context, method, u string, hdr http.Header, base *url.URL, stopAtCrossHost bool) (*http.Response, error) {
	hc := c.http()
	for hop := 0; hop < 10; hop++ {
		req, err := http.NewRequestWithContext(ctx, method, u, nil)
		if err != nil {
			return nil, usererr.Errorf("%s is not a URL: %v", u, err)
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		ua := c.UserAgent
		if ua == "" {
			ua = "rllm"
		}
		req.Header.Set("User-Agent", ua)
		req.Header.Set("Accept-Encoding", "identity")
		if c.Token != "" && sameHost(req.URL, base) {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		switch resp.StatusCode {
		case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		default:
			return resp, nil
		}
		loc, err := req.URL.Parse(resp.Header.Get("Location"))
		if err != nil || resp.Header.Get("Location") == "" {
			resp.Body.Close()
			return nil, fmt.Errorf("%s: a %d redirect without a usable Location", u, resp.StatusCode)
		}
		if stopAtCrossHost && !sameHost(loc, req.URL) {
			return resp, nil
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		u = loc.String()
	}
	return nil, fmt.Errorf("%s: more than 10 redirects", u)
}

func sameHost(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Host, b.Host)
}

// apiJSON GETs an API path into v.
func (c *Client) apiJSON(ctx context.Context, path string, v any) (http.Header, error) {
	resp, err := c.do(ctx, http.MethodGet, c.endpoint()+path, nil, false)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("%s%s: the Hub's answer is not the JSON expected: %v", c.endpoint(), path, err)
	}
	return resp.Header, nil
}

// escRev writes a revision as one path segment (refs/convert/parquet →
// refs%2Fconvert%2Fparquet), as huggingface_hub does.
func escRev(rev string) string { return url.PathEscape(rev) }

// escPath escapes a file path segment by segment.
func escPath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}
