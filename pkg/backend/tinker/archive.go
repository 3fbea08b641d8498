package tinker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/internal/ctxsleep"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// ArchiveURL asks the service where the archive of a checkpoint (a
// tinker:// path) can be downloaded. Hosted Tinker's route is
// training_runs/{run}/checkpoints/{kind}/{name}/archive (SDK 0.25
// resources/weights.py), SkyRL's training_runs/{run}/checkpoints/{name}/
// archive for sampler weights (skyrl/tinker/api.py at a9564572); the one
// the path's form points to is asked first, the other after a 404. Both
// answer with a 302 to the download (the URL returned); a JSON {url}, or
// the archive itself (the route's URL is then returned), are taken too.
func (c *Client) ArchiveURL(ctx context.Context, tinkerPath string) (string, error) {
	run, kind, name, err := ParsePath(tinkerPath)
	if err != nil {
		return "", usererr.Wrap(err)
	}
	routes := []string{wire.ArchivePath(run, kind, name), wire.SkyRLArchivePath(run, name)}
	switch {
	case kind != "sampler_weights":
		routes = routes[:1]
	case IsSkyRLPath(tinkerPath):
		routes[0], routes[1] = routes[1], routes[0]
	}
	noRedirect := *c.http
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	var notFound *HTTPError
	for _, route := range routes {
		loc, err := c.archiveRoute(ctx, &noRedirect, route)
		var he *HTTPError
		if errors.As(err, &he) && he.Status == http.StatusNotFound {
			if notFound == nil {
				notFound = he
			}
			continue
		}
		return loc, err
	}
	return "", usererr.Errorf("the Tinker service at %s has no archive of %s (HTTP 404: %s); export a checkpoint whose sampler weights still exist", c.BaseURL(), tinkerPath, notFound.Msg)
}

// archiveRoute asks one archive route, retrying as other calls do; a 404
// comes back as the *HTTPError.
func (c *Client) archiveRoute(ctx context.Context, hc *http.Client, route string) (string, error) {
	for attempt := 0; ; attempt++ {
		loc, err := c.archiveOnce(ctx, hc, route)
		if err == nil {
			return loc, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		var he *HTTPError
		if errors.As(err, &he) && he.Status == http.StatusNotFound {
			return "", he
		}
		if !isRetryable(err) || attempt >= c.opts.MaxRetries {
			return "", c.classify(err)
		}
		if err := ctxsleep.Sleep(ctx, c.backoff(attempt+1, err)); err != nil {
			return "", err
		}
	}
}

func (c *Client) archiveOnce(ctx context.Context, hc *http.Client, route string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.api+route, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/gzip")
	key, err := c.header(ctx)
	if err != nil {
		return "", err
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", &transportError{err: errors.New(c.redact(err.Error()))}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		loc, err := req.URL.Parse(resp.Header.Get("Location"))
		if err != nil || resp.Header.Get("Location") == "" {
			return "", fmt.Errorf("%s: a redirect without a usable Location", route)
		}
		return loc.String(), nil
	case resp.StatusCode/100 == 2:
		if strings.Contains(resp.Header.Get("Content-Type"), "json") {
			var u struct {
				URL string `json:"url"`
			}
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			if json.Unmarshal(data, &u) != nil || u.URL == "" {
				return "", fmt.Errorf("%s: the answer has no url: %s", route, c.serverMessage(data))
			}
			loc, err := req.URL.Parse(u.URL)
			if err != nil {
				return "", fmt.Errorf("%s: the url %q does not parse", route, u.URL)
			}
			return loc.String(), nil
		}
		// The archive itself.
		return req.URL.String(), nil
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return "", &HTTPError{Path: route, Status: resp.StatusCode, Msg: c.serverMessage(data), RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
}

// DefaultMaxArchive bounds an archive's download and unpacked size.
const DefaultMaxArchive int64 = 64 << 30

// ExportAdapter downloads the archive of a checkpoint and writes its
// files as a PEFT adapter directory at out (adapter_config.json and the
// adapter weights at its top level), atomically. out must not exist or
// be empty. At most maxBytes are downloaded or unpacked (0 means
// DefaultMaxArchive); entries that are not regular files or directories,
// or whose names leave the directory, are refused.
func (c *Client) ExportAdapter(ctx context.Context, tinkerPath, out string, maxBytes int64) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxArchive
	}
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
		return usererr.Errorf("%s already exists and is not empty; give a new directory to export into", out)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return usererr.Errorf("cannot use %s as the export directory: %v", out, pathErr(err))
	}
	loc, err := c.ArchiveURL(ctx, tinkerPath)
	if err != nil {
		return err
	}
	body, err := c.openDownload(ctx, loc)
	if err != nil {
		return err
	}
	defer body.Close()
	dir, err := atomicfile.CreateDir(out)
	if err != nil {
		return err
	}
	defer dir.Abort()
	if err := extractAdapter(&capReader{r: body, left: maxBytes}, dir.TempPath(), maxBytes); err != nil {
		return fmt.Errorf("the archive of %s: %w", tinkerPath, err)
	}
	top, err := adapterDir(dir.TempPath())
	if err != nil {
		return fmt.Errorf("the archive of %s: %w", tinkerPath, err)
	}
	if top == dir.TempPath() {
		return dir.Commit()
	}
	// The archive put the adapter in a subdirectory: its files, copied
	// into a directory of their own, are the export.
	flat, err := atomicfile.CreateDir(out)
	if err != nil {
		return err
	}
	defer flat.Abort()
	if err := copyTree(top, flat.TempPath()); err != nil {
		return err
	}
	dir.Abort()
	return flat.Commit()
}

// openDownload GETs the archive, retrying as other calls do. The API key
// goes only to the service's own host, never to a signed URL elsewhere.
func (c *Client) openDownload(ctx context.Context, loc string) (io.ReadCloser, error) {
	u, err := url.Parse(loc)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("the archive URL the service gave is not http(s)")
	}
	sameHost := u.Scheme == c.base.Scheme && u.Host == c.base.Host
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
		if err != nil {
			return nil, err
		}
		if sameHost {
			key, err := c.header(ctx)
			if err != nil {
				return nil, err
			}
			if key != "" {
				req.Header.Set("X-API-Key", key)
			}
		}
		resp, err := c.http.Do(req)
		if err == nil && resp.StatusCode/100 == 2 {
			return resp.Body, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			err = &transportError{err: errors.New(c.redact(err.Error()))}
		} else {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			err = &HTTPError{Path: "archive download", Status: resp.StatusCode, Msg: c.serverMessage(data), RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
		}
		if !isRetryable(err) || attempt >= c.opts.MaxRetries {
			return nil, fmt.Errorf("downloading the checkpoint archive: %w", c.classify(err))
		}
		if err := ctxsleep.Sleep(ctx, c.backoff(attempt+1, err)); err != nil {
			return nil, err
		}
	}
}

// capReader fails once more than left bytes have been read.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n, errTooLarge
	}
	return n, err
}

var errTooLarge = errors.New("the download is larger than --max-size")

// extractAdapter unpacks a tar (gzip-compressed or not) into dir.
func extractAdapter(r io.Reader, dir string, maxBytes int64) error {
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(br)
		if errors.Is(err, errTooLarge) {
			return fmt.Errorf("it downloads to more than %d bytes", maxBytes)
		}
		if err != nil {
			return fmt.Errorf("not a gzip file: %w", err)
		}
		defer gz.Close()
		src = gz
	}
	tr := tar.NewReader(src)
	var total int64
	files := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, errTooLarge) {
			return fmt.Errorf("it downloads to more than %d bytes", maxBytes)
		}
		if err != nil {
			return fmt.Errorf("not a readable tar archive: %w", err)
		}
		name, err := safeName(h.Name)
		if err != nil {
			return err
		}
		if name == "" {
			continue
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, atomicfile.DirMode); err != nil {
				return err
			}
			continue
		case tar.TypeReg:
		default:
			return fmt.Errorf("entry %q is a link or special file, which an adapter never holds; refusing it", h.Name)
		}
		files++
		if files > 10000 {
			return errors.New("more than 10000 files; not an adapter")
		}
		total += h.Size
		if h.Size < 0 || total > maxBytes {
			return fmt.Errorf("unpacks to more than %d bytes", maxBytes)
		}
		if err := os.MkdirAll(filepath.Dir(target), atomicfile.DirMode); err != nil {
			return err
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, atomicfile.FileMode)
		if err != nil {
			return fmt.Errorf("entry %q: %w", h.Name, err)
		}
		n, err := io.Copy(f, io.LimitReader(tr, h.Size))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if errors.Is(err, errTooLarge) {
			return fmt.Errorf("it downloads to more than %d bytes", maxBytes)
		}
		if err != nil {
			return fmt.Errorf("entry %q: %w", h.Name, err)
		}
		if n != h.Size {
			return fmt.Errorf("entry %q is truncated", h.Name)
		}
	}
	if files == 0 {
		return errors.New("the archive holds no files")
	}
	return nil
}

// safeName cleans an entry name and refuses absolute names, names with
// a ".." segment and names that are not plain slash-separated paths.
func safeName(name string) (string, error) {
	if name == "" || path.IsAbs(name) || strings.Contains(name, "\\") || strings.ContainsRune(name, 0) || filepath.VolumeName(name) != "" {
		return "", fmt.Errorf("entry %q is not a plain relative path; refusing it", name)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == ".." {
			return "", fmt.Errorf("entry %q leaves the export directory; refusing it", name)
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

// adapterDir finds the PEFT adapter in dir: dir itself when it holds
// adapter_config.json, else the directory at the end of a chain of up to
// four single subdirectories (an archive of "ckpt/adapter_config.json"...).
func adapterDir(dir string) (string, error) {
	for range 5 {
		if _, err := os.Stat(filepath.Join(dir, "adapter_config.json")); err == nil {
			return dir, checkAdapter(dir)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return "", err
		}
		if len(entries) != 1 || !entries[0].IsDir() {
			break
		}
		dir = filepath.Join(dir, entries[0].Name())
	}
	return "", errors.New("it has no adapter_config.json, so it is not a PEFT adapter")
}

// copyTree copies the regular files and directories under src into dst
// (extractAdapter wrote nothing else).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if e.IsDir() {
			return os.MkdirAll(target, atomicfile.DirMode)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, atomicfile.FileMode)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

func checkAdapter(dir string) error {
	for _, w := range []string{"adapter_model.safetensors", "adapter_model.bin"} {
		if _, err := os.Stat(filepath.Join(dir, w)); err == nil {
			return nil
		}
	}
	return errors.New("it has adapter_config.json but no adapter_model.safetensors, so it is not a PEFT adapter")
}

// ExportAdapter writes the policy as it is now as a PEFT adapter
// directory: its weights saved for sampling under a fresh name, then that
// checkpoint's archive downloaded into dir. The trainer calls it to load
// each step's policy into vLLM or SGLang servers that sample rollouts.
func (b *Backend) ExportAdapter(ctx context.Context, dir string) error {
	snap, err := b.PublishSampler(ctx, "").Result(ctx)
	if err != nil {
		return err
	}
	return b.c.ExportAdapter(ctx, snap.(*Sampler).Path(), dir, DefaultMaxArchive)
}
