package sandbox

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/moby/moby/client"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"golang.org/x/sync/singleflight"
)

// BuiltImageRepo is the repository of the images BuildImage makes.
const BuiltImageRepo = "rllm-task"

// LabelContext labels an image BuildImage made with its context's hash.
const LabelContext = "org.rllm.context"

// buildLogTail is how many lines of a failed build's log its error keeps.
const buildLogTail = 15

var builds singleflight.Group

func buildImage(ctx context.Context, cli *client.Client, contextDir, dockerfile string) (string, error) {
	if dockerfile == "" {
		dockerfile = filepath.Join(contextDir, "Dockerfile")
	}
	rel, err := filepath.Rel(contextDir, dockerfile)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("sandbox: docker build of %s: the Dockerfile %s is not inside the context", contextDir, dockerfile)
	}
	if st, err := os.Stat(dockerfile); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("sandbox: docker build of %s: no Dockerfile at %s", contextDir, dockerfile)
	}
	sum, err := contextHash(contextDir, filepath.ToSlash(rel))
	if err != nil {
		return "", fmt.Errorf("sandbox: docker build of %s: %w", contextDir, err)
	}
	tag := BuiltImageRepo + ":" + sum[:12]
	_, err, _ = builds.Do(tag, func() (any, error) {
		if _, err := cli.ImageInspect(ctx, tag); err == nil {
			return nil, nil
		} else if !isNotFound(err) {
			return nil, errDaemon("inspect image "+tag, err)
		}
		return nil, runBuild(ctx, cli, contextDir, filepath.ToSlash(rel), tag, sum)
	})
	if err != nil {
		return "", err
	}
	return tag, nil
}

// contextFiles lists a context's entries, in the order WalkDir gives
// (lexical), as slash paths relative to dir, without those its ignore
// file excludes (contextIgnore); dockerfile is the Dockerfile's slash
// path in dir.
func contextFiles(dir, dockerfile string, visit func(rel string, d fs.DirEntry, full string) error) error {
	ignore, err := contextIgnore(dir, dockerfile)
	if err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, full)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignore != nil && rel != dockerfile && rel != ".dockerignore" {
			// The Dockerfile and .dockerignore are sent whatever the
			// patterns say, as docker build sends them.
			skip, err := ignore.MatchesOrParentMatches(rel)
			if err != nil {
				return err
			}
			if skip {
				if d.IsDir() && !ignore.Exclusions() {
					return filepath.SkipDir
				}
				return nil // a "!pattern" may bring back what is below
			}
		}
		return visit(rel, d, full)
	})
}

// contextIgnore reads the context's ignore file as docker build does:
// <Dockerfile>.dockerignore beside the Dockerfile when there is one (as
// BuildKit reads it), else .dockerignore at the context's root. nil when
// there is neither.
func contextIgnore(dir, dockerfile string) (*patternmatcher.PatternMatcher, error) {
	for _, name := range []string{dockerfile + ".dockerignore", ".dockerignore"} {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(name)))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		patterns, err := ignorefile.ReadAll(io.LimitReader(f, 1<<20))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		pm, err := patternmatcher.New(patterns)
		if err != nil {
			return nil, fmt.Errorf("%s: %w; fix that pattern", name, err)
		}
		return pm, nil
	}
	return nil, nil
}

// contextHash is the hex SHA-256 of the context: each entry's path, type,
// permission bits and content (a link's target), and the Dockerfile's
// path; not the files' times or owners, so a fresh checkout of the same
// task is the same image.
func contextHash(dir, dockerfile string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "dockerfile %s\x00", dockerfile)
	err := contextFiles(dir, dockerfile, func(rel string, d fs.DirEntry, full string) error {
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%s\x00", rel, info.Mode().String())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00", target)
		case info.Mode().IsRegular():
			f, err := os.Open(full)
			if err != nil {
				return err
			}
			n, err := io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "\x00%d\x00", n)
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

// writeContext writes the context as the tar archive the build API takes
// (what its ignore file excludes left out).
func writeContext(out io.Writer, dir, dockerfile string) error {
	tw := tar.NewWriter(out)
	err := contextFiles(dir, dockerfile, func(rel string, d fs.DirEntry, full string) error {
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(full); err != nil {
				return err
			}
		}
		if !info.Mode().IsRegular() && !info.IsDir() && link == "" {
			return nil // sockets, devices: not part of an image's context
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = rel
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(full)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// buildMessage is one line of the build API's JSON stream.
type buildMessage struct {
	Stream      string `json:"stream"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

func runBuild(ctx context.Context, cli *client.Client, dir, dockerfile, tag, sum string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeContext(pw, dir, dockerfile)) }()
	defer pr.Close()
	// The image names the run and process that built it under keys of
	// its own: a container inherits its image's labels, and one started
	// from this image by anyone else must not look like a container of
	// the (later dead) builder to the sweep.
	labels := map[string]string{LabelContext: sum}
	for k, v := range self().labels() {
		labels[strings.Replace(k, "org.rllm.", "org.rllm.build.", 1)] = v
	}
	res, err := cli.ImageBuild(ctx, pr, client.ImageBuildOptions{
		Tags: []string{tag}, Dockerfile: dockerfile, Remove: true, ForceRemove: true, Labels: labels,
	})
	if err != nil {
		return errDaemon("build "+dir, err)
	}
	defer res.Body.Close()
	tail, failed, err := readBuildLog(res.Body)
	switch {
	case err != nil:
		return fmt.Errorf("sandbox: docker build of %s: reading the build's log: %w\n%s", dir, err, tail)
	case failed != "":
		return fmt.Errorf("sandbox: docker build of %s (Dockerfile %s) failed: %s; the end of its log:\n%s", dir, path.Clean(dockerfile), failed, tail)
	}
	if _, err := cli.ImageInspect(ctx, tag); err != nil {
		return fmt.Errorf("sandbox: docker build of %s ended without the image %s; the end of its log:\n%s", dir, tag, tail)
	}
	removeSuperseded(ctx, cli, sum)
	return nil
}

// removeSuperseded removes the untagged images of the same context: when
// two processes build one context at once (parallel test packages, two
// runs on one daemon), the last to finish takes the tag and the other's
// image is left with none, a few hundred MB each time. An image a
// container still uses stays (the removal fails and is ignored).
func removeSuperseded(ctx context.Context, cli *client.Client, sum string) {
	list, err := cli.ImageList(ctx, client.ImageListOptions{
		Filters: make(client.Filters).Add("dangling", "true").Add("label", LabelContext+"="+sum)})
	if err != nil {
		return
	}
	for _, im := range list.Items {
		_, _ = cli.ImageRemove(ctx, im.ID, client.ImageRemoveOptions{})
	}
}

// readBuildLog reads the build API's JSON stream to its end or its
// first error message, and returns the last lines of the log, the error
// message (empty when the build succeeded) and an error when the stream
// is not the API's JSON. The log kept is bounded, whatever its length.
func readBuildLog(r io.Reader) (tail, failed string, err error) {
	var log strings.Builder
	dec := json.NewDecoder(r)
	for {
		var m buildMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return trimLog(log.String(), buildLogTail), "", nil
			}
			return trimLog(log.String(), buildLogTail), "", err
		}
		log.WriteString(m.Stream)
		if log.Len() > 1<<20 {
			s := trimLog(log.String(), buildLogTail)
			log.Reset()
			log.WriteString(s + "\n")
		}
		if m.Error != "" || m.ErrorDetail != nil {
			msg := m.Error
			if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
				msg = m.ErrorDetail.Message
			}
			if msg = strings.TrimSpace(msg); msg == "" {
				msg = "an error without a message"
			}
			return trimLog(log.String(), buildLogTail), msg, nil
		}
	}
}

// BuildImage builds the image of the Dockerfile at dockerfile (a path
// inside contextDir; "" is contextDir/Dockerfile) with contextDir as its
// context, through this backend's client (the Engine API of its daemon), and
// returns its tag: rllm-task:<the first 12 hex digits of the hash of the
// context's paths, modes and contents>. An image with that tag is reused
// without building; builds of one tag at once in a process are one build.
// A Dockerfile that fails is an error naming contextDir and ending with
// the last lines of the build's log. Images carry rllm's labels.
func (d *Docker) BuildImage(ctx context.Context, contextDir, dockerfile string) (string, error) {
	return buildImage(ctx, d.cli, contextDir, dockerfile)
}
