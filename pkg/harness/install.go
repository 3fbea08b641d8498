package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/internal/procgroup"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// CacheDir is where harnesses are installed: $XDG_CACHE_HOME/rllm/harnesses
// when that is an absolute path, else /var/cache/rllm/harnesses for root
// (a sandbox's user, nobody, cannot pass root's private home to reach an
// install under /root), else ~/.cache/rllm/harnesses. The CLI reads the
// environment and passes getenv and the effective uid.
func CacheDir(getenv func(string) string, euid int) string {
	if d := getenv("XDG_CACHE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "rllm", "harnesses")
	}
	if euid == 0 {
		return "/var/cache/rllm/harnesses"
	}
	home := getenv("HOME")
	if home == "" {
		home = "."
	}
	return filepath.Join(home, ".cache", "rllm", "harnesses")
}

// Dir is where e is installed under root: one directory per version.
func (e Entry) Dir(root string) string { return filepath.Join(root, e.Name, e.Version) }

// BinDir holds e's programs (and, for entries with Node, node itself).
func (e Entry) BinDir(root string) string {
	if e.Installer == Pip {
		return filepath.Join(e.Dir(root), "venv", "bin")
	}
	return filepath.Join(e.Dir(root), "node_modules", ".bin")
}

// marker is written last by Install: an install without it was cut
// short and does not count.
const marker = ".rllm-installed"

// Installed reports whether e is installed under root.
func (e Entry) Installed(root string) bool {
	_, err := os.Stat(filepath.Join(e.Dir(root), marker))
	return err == nil
}

// NotInstalled is the error of a harness that is not installed: it names
// the command that installs it.
func NotInstalled(key string, e Entry, root string) error {
	return &usererr.Error{Subject: key, Msg: fmt.Sprintf("harness %s (%s@%s) is not installed in %s", e.Name, e.Package, e.Version, root),
		Fix: "run: rllm harness install " + e.Name}
}

// Installer tools: the programs Install runs, found on the CLI's PATH.
type Tools struct {
	NPM    string // npm
	Python string // python3, for pip entries (with its venv module)
	// Env is the installer's environment (npm needs HOME, PATH, its
	// npm_config_* settings and proxies).
	Env []string
}

// Install installs e under root with the tools, writing the installer's
// output to out. An install that is there already is left as it is.
func Install(ctx context.Context, root string, e Entry, t Tools, out io.Writer) error {
	if e.Installed(root) {
		return nil
	}
	dir := e.Dir(root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("making %s: %w", dir, err)
	}
	var steps [][]string
	switch e.Installer {
	case NPM:
		if t.NPM == "" {
			return usererr.Errorf("harness %s installs with npm, which is not on PATH; install Node.js and npm (Debian: apt-get install npm)", e.Name)
		}
		pkgs := []string{e.Package + "@" + e.Version}
		if e.Node != "" {
			pkgs = append(pkgs, "node@"+e.Node)
		}
		steps = append(steps, append([]string{t.NPM, "install", "--no-audit", "--no-fund", "--no-save", "--no-package-lock", "--prefix", dir}, pkgs...))
	case Pip:
		if t.Python == "" {
			return usererr.Errorf("harness %s installs with pip, and python3 is not on PATH; install Python 3 with venv (Debian: apt-get install python3-venv)", e.Name)
		}
		venv := filepath.Join(dir, "venv")
		steps = append(steps, []string{t.Python, "-m", "venv", venv},
			[]string{filepath.Join(venv, "bin", "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--retries", "1", "--timeout", "30", e.Package + "==" + e.Version})
	default:
		return fmt.Errorf("harness %s: unknown installer %q", e.Name, e.Installer)
	}
	for _, argv := range steps {
		cmd := procgroup.Command(ctx, argv[0], argv[1:]...)
		cmd.Dir = dir
		cmd.Env = t.Env
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) && e.Installer == Pip && len(argv) > 2 && argv[2] == "venv" {
				return usererr.Errorf("harness %s needs Python's venv module, which failed (%v); Debian: apt-get install python3-venv", e.Name, err)
			}
			if e.Installer == Pip {
				return usererr.Errorf("harness %s: pip could not install %s==%s (%v; its output is above): pip needs a package index it can reach (PyPI, or PIP_INDEX_URL naming a mirror)", e.Name, e.Package, e.Version, err)
			}
			return usererr.Errorf("harness %s: npm could not install %s@%s (%v; its output is above): npm needs its registry (or npm_config_registry naming a mirror)", e.Name, e.Package, e.Version, err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.BinDir(root), e.Bin)); err != nil {
		return fmt.Errorf("installing harness %s: the install has no %s program (%w)", e.Name, e.Bin, err)
	}
	info, _ := json.Marshal(map[string]string{"package": e.Package, "version": e.Version, "node": e.Node})
	return atomicfile.WriteFile(filepath.Join(dir, marker), append(info, '\n'))
}

// Session is what a harness is pointed at: one gateway session as the
// sandbox reaches it, and the task.
type Session struct {
	// BaseURL is the OpenAI-style base (…/sessions/ID/v1).
	BaseURL string
	// AnthropicURL is the Anthropic-style base (…/sessions/ID: the SDK
	// appends /v1/messages).
	AnthropicURL string
	Key          string
	Model        string
	// Home is the harness's home inside the sandbox.
	Home   string
	Prompt string
}

// Rendered is an entry made concrete for one session.
type Rendered struct {
	// Env is KEY=value, sorted.
	Env []string
	// Files are relative to Session.Home.
	Files   []sandbox.File
	Command []string
}

var funcs = template.FuncMap{"json": func(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}}

func render(name, text string, s Session) (string, error) {
	t, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, s); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Render fills e's templates for s.
func (e Entry) Render(s Session) (Rendered, error) {
	if s.Model == "" {
		s.Model = e.Model
	}
	if s.Model == "" {
		s.Model = modelName
	}
	var r Rendered
	for _, k := range slices.Sorted(maps.Keys(e.Env)) {
		v, err := render(e.Name+" env "+k, e.Env[k], s)
		if err != nil {
			return Rendered{}, err
		}
		r.Env = append(r.Env, k+"="+v)
	}
	for _, f := range e.Files {
		v, err := render(e.Name+" "+f.Path, f.Template, s)
		if err != nil {
			return Rendered{}, err
		}
		if strings.HasSuffix(f.Path, ".json") && !json.Valid([]byte(v)) {
			return Rendered{}, fmt.Errorf("harness %s: %s renders to invalid JSON", e.Name, f.Path)
		}
		r.Files = append(r.Files, sandbox.File{Name: f.Path, Mode: fs.FileMode(0o600), Data: []byte(v)})
	}
	for i, a := range e.Command {
		v, err := render(fmt.Sprintf("%s command[%d]", e.Name, i), a, s)
		if err != nil {
			return Rendered{}, err
		}
		r.Command = append(r.Command, v)
	}
	return r, nil
}
