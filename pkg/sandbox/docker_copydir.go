package sandbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/moby/moby/client"
)

// copyDirTimeout bounds CopyDir's two streams together.
const copyDirTimeout = 10 * time.Minute

// CopyDir replaces dir in workspace to with dir of workspace from (both
// docker workspaces of d), through the archive API: what from's processes
// made of the directory, and nothing else of from, reaches to (a
// verifier's fresh container gets an agent's work as SWE-bench applies a
// patch to a clean environment). What is copied is cleaned first
// (cleanTree): modes kept but not setuid and setgid, no extended
// attributes (no file capabilities), symbolic links kept as links (never
// followed, and nothing is written beneath one), hard links only to
// files copied before them, no devices or FIFOs; owners are kept. More
// than max bytes of files is an error, as is a dir that is no longer a
// directory in from.
func (d *Docker) CopyDir(ctx context.Context, from, to Workspace, dir string, max int64) error {
	src, ok1 := from.(*dockerWorkspace)
	dst, ok2 := to.(*dockerWorkspace)
	if !ok1 || !ok2 || src.d != d || dst.d != d {
		return errors.New("sandbox: CopyDir copies between docker workspaces of one backend")
	}
	if !path.IsAbs(dir) || path.Clean(dir) != dir || dir == "/" {
		return fmt.Errorf("sandbox: copy %q: the directory must be a clean absolute path other than /", dir)
	}
	for _, w := range []*dockerWorkspace{src, dst} {
		if err := w.ended(); err != nil {
			return err
		}
	}
	// The stream lasts as long as the directory is large: bounded by
	// copyDirTimeout, not one control call's dockerTimeout.
	cctx, cancel := context.WithTimeout(ctx, copyDirTimeout)
	defer cancel()
	res, err := d.cli.CopyFromContainer(cctx, src.id, client.CopyFromContainerOptions{SourcePath: dir})
	if err != nil {
		if isNotFound(err) {
			return fmt.Errorf("sandbox: %s:%s is gone", src.ID(), dir)
		}
		return errDaemon("read "+dir+" of "+src.ID(), err)
	}
	defer res.Content.Close()
	if !res.Stat.Mode.IsDir() {
		return fmt.Errorf("sandbox: %s:%s is no longer a directory (%v)", src.ID(), dir, res.Stat.Mode)
	}
	// The copy replaces the directory: what the agent removed is gone.
	out, code, err := dst.rootExec(ctx, "empty "+dir+" in "+dst.ID(), `rm -rf -- "$1"`, dir)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("sandbox: %s:%s could not be emptied: %s", dst.ID(), dir, clipOut(out))
	}
	pr, pw := io.Pipe()
	clean := make(chan error, 1)
	go func() {
		err := cleanTree(res.Content, pw, path.Base(dir), max)
		pw.CloseWithError(err)
		clean <- err
	}()
	_, err = d.cli.CopyToContainer(cctx, dst.id, client.CopyToContainerOptions{DestinationPath: path.Dir(dir), Content: pr})
	pr.CloseWithError(errors.New("upload ended"))
	if cerr := <-clean; cerr != nil {
		return fmt.Errorf("sandbox: copy %s of %s: %w", dir, src.ID(), cerr)
	}
	if err != nil {
		if e := dst.ended(); e != nil {
			return e
		}
		return errDaemon(fmt.Sprintf("copy %s into %s", dir, dst.ID()), err)
	}
	return nil
}

// cleanTree copies the tar stream in of one directory (entries named
// top, top/...) to out, keeping what a directory of files may hold and
// making it harmless to extract as root: directories, regular files,
// symbolic links (their targets as they are: they are never followed
// here, and an entry beneath one is refused, since extracting it would
// write where the link points), hard links to regular files copied
// before them. Devices and FIFOs are left out; setuid and setgid bits
// and extended attributes are dropped; owners and the other mode bits are
// kept. A name outside top, twice the same name, or more than max bytes
// of file data is an error.
func cleanTree(in io.Reader, out io.Writer, top string, max int64) error {
	if top == "" || top == "." || top == ".." || strings.Contains(top, "/") {
		return fmt.Errorf("the directory's name %q", top)
	}
	tr := tar.NewReader(in)
	tw := tar.NewWriter(out)
	seen := map[string]byte{} // name → type flag
	var total int64
	for first := true; ; first = false {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if first {
				return errors.New("the archive is empty")
			}
			break
		}
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == "" || path.Clean(name) != name || path.IsAbs(name) || (name != top && !strings.HasPrefix(name, top+"/")) {
			return fmt.Errorf("an entry %q is outside %s", h.Name, top)
		}
		if first != (name == top) || first && h.Typeflag != tar.TypeDir {
			return fmt.Errorf("the archive does not start with the directory %s", top)
		}
		if _, dup := seen[name]; dup {
			return fmt.Errorf("%s appears twice", name)
		}
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if t, ok := seen[p]; !ok || t != tar.TypeDir {
				return fmt.Errorf("%s comes before its directory %s, or beneath a link", name, p)
			}
		}
		switch h.Typeflag {
		case tar.TypeDir, tar.TypeReg, tar.TypeSymlink:
		case tar.TypeLink:
			target := strings.TrimSuffix(h.Linkname, "/")
			if seen[target] != tar.TypeReg {
				return fmt.Errorf("%s is a hard link to %q, not to a file copied before it", name, h.Linkname)
			}
		default: // devices, FIFOs, sparse or vendor entries: not a directory's content
			continue
		}
		h.Mode &^= 0o6000 // setuid, setgid
		h.Xattrs, h.PAXRecords = nil, nil
		h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
		h.Format = tar.FormatUnknown
		if h.Typeflag == tar.TypeReg {
			if total += h.Size; total > max {
				return fmt.Errorf("it holds more than %d bytes of files", max)
			}
		}
		seen[name] = h.Typeflag
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.CopyN(tw, tr, h.Size); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}
