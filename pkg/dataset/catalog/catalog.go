// Package catalog is rllm's dataset registry (rLLM's DatasetRegistry): a
// directory (data.datasets_dir, default ~/.rllm/datasets) where
// `rllm dataset register NAME --split SPLIT FILE` keeps each split
// converted once to parquet, so data.train_files, data.val_files and
// `rllm eval --data` may name a dataset instead of a path:
//
//	DIR/NAME/SPLIT.parquet   the rows
//	DIR/NAME/dataset.json    name, and per split its rows, columns, source and date
package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Split describes one registered split.
type Split struct {
	File         string    `json:"file"`
	Rows         int       `json:"rows"`
	Columns      []string  `json:"columns"`
	Source       string    `json:"source"`
	RegisteredAt time.Time `json:"registered_at"`
	// SHA256 is the parquet file's checksum when it was registered.
	SHA256 string `json:"sha256,omitempty"`
	// Changed is set by Show when the file no longer has that checksum
	// (it is never stored).
	Changed bool `json:"changed,omitempty"`
}

// Info describes one registered dataset.
type Info struct {
	Name   string           `json:"name"`
	Splits map[string]Split `json:"splits"`
	// Damaged, set by List, says why the dataset's dataset.json cannot be
	// read; such a dataset can only be removed (rllm dataset rm NAME).
	Damaged string `json:"damaged,omitempty"`
}

// SplitNames lists the splits in a stable order.
func (in Info) SplitNames() []string {
	return slices.Sorted(maps.Keys(in.Splits))
}

// Catalog is a registry directory.
type Catalog struct {
	Dir string
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// CheckName reports a dataset or split name that cannot be a directory or
// file name of the catalog.
func CheckName(what, name string) error {
	if !nameRE.MatchString(name) || strings.Contains(name, "..") {
		return usererr.Errorf("%s %q is not a valid name; use letters, digits, '.', '_' and '-' (up to 100, starting with a letter or digit)", what, name)
	}
	return nil
}

// DefaultDir is data.datasets_dir's default. Where $XDG_DATA_HOME is set
// (an absolute path, as the XDG spec requires), it means
// $XDG_DATA_HOME/rllm/datasets instead (FollowXDG).
const DefaultDir = "~/.rllm/datasets"

// FollowXDG returns the directory data.datasets_dir names given the value
// of $XDG_DATA_HOME (the CLI reads the environment and passes it down):
// the default moves to $XDG_DATA_HOME/rllm/datasets when that is an
// absolute path; a relative one is ignored, as the spec says; a directory
// the user set stays where it is.
func FollowXDG(dir, xdgDataHome string) string {
	if dir == DefaultDir && filepath.IsAbs(xdgDataHome) {
		return filepath.Join(xdgDataHome, "rllm", "datasets")
	}
	return dir
}

// Open returns the catalog in dir ("~/" is the home directory). The
// directory is created on the first Register.
func Open(dir string) (*Catalog, error) {
	if dir == "" {
		return nil, usererr.Errorf("data.datasets_dir is empty; set it to the directory that holds registered datasets, e.g. ~/.rllm/datasets")
	}
	if dir == "~" || strings.HasPrefix(dir, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, usererr.Errorf("data.datasets_dir %q starts with ~ but the home directory is unknown (%v); give an absolute path", dir, err)
		}
		dir = filepath.Join(home, strings.TrimPrefix(dir, "~"))
	}
	return &Catalog{Dir: dir}, nil
}

func (c *Catalog) metaPath(name string) string { return filepath.Join(c.Dir, name, "dataset.json") }

// Show describes dataset name; a split whose file changed since it was
// registered is marked Changed.
func (c *Catalog) Show(name string) (Info, error) {
	in, err := c.read(name)
	if err != nil {
		return Info{}, err
	}
	for split, sp := range in.Splits {
		if sp.SHA256 != "" {
			sum, err := fileSHA256(filepath.Join(c.Dir, name, sp.File))
			sp.Changed = err != nil || sum != sp.SHA256
			in.Splits[split] = sp
		}
	}
	return in, nil
}

// read loads dataset.json, checking that it names only files of the
// dataset's own directory.
func (c *Catalog) read(name string) (Info, error) {
	if err := CheckName("dataset", name); err != nil {
		return Info{}, err
	}
	b, err := boundedio.ReadFile(context.Background(), c.metaPath(name), maxMeta)
	if errors.Is(err, fs.ErrNotExist) {
		return Info{}, c.notFound(name)
	}
	if err != nil {
		return Info{}, c.damaged(name, err)
	}
	var in Info
	if err := json.Unmarshal(b, &in); err != nil {
		return Info{}, c.damaged(name, err)
	}
	in.Name, in.Damaged = name, ""
	if in.Splits == nil {
		in.Splits = map[string]Split{}
	}
	for split, sp := range in.Splits {
		if err := CheckName("split", split); err != nil {
			return Info{}, c.damaged(name, err)
		}
		// Only SPLIT.parquet in the dataset's directory: a crafted
		// "../../victim.txt" must never be read or removed.
		if sp.File != split+".parquet" {
			return Info{}, c.damaged(name, fmt.Errorf("split %s names file %q, not %s.parquet", split, sp.File, split))
		}
		sp.Changed = false
		in.Splits[split] = sp
	}
	return in, nil
}

// maxMeta bounds a dataset.json (a few hundred bytes a split).
const maxMeta = 4 << 20

// DamagedError is a dataset.json that cannot be read.
type DamagedError struct {
	Path, Name string
	Err        error
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("%s is damaged (%v); remove the dataset with rllm dataset rm %s and register it again", e.Path, e.Err, e.Name)
}

func (c *Catalog) damaged(name string, err error) error {
	de := &DamagedError{Path: c.metaPath(name), Name: name, Err: err}
	return &usererr.Error{Msg: de.Error(), Err: de}
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (c *Catalog) notFound(name string) error {
	msg := fmt.Sprintf("no dataset %q is registered in %s", name, c.Dir)
	if list, err := c.List(); err == nil && len(list) > 0 {
		names := make([]string, len(list))
		for i, in := range list {
			names[i] = in.Name
		}
		msg += "; registered: " + strings.Join(names, ", ")
	} else {
		msg += "; register one with rllm dataset register NAME --split train FILE"
	}
	return usererr.Errorf("%s", msg)
}

// List describes every registered dataset, sorted by name.
func (c *Catalog) List() ([]Info, error) {
	ents, err := os.ReadDir(c.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, e := range ents {
		if !e.IsDir() || CheckName("dataset", e.Name()) != nil {
			continue
		}
		if _, err := os.Stat(c.metaPath(e.Name())); err != nil {
			continue
		}
		in, err := c.read(e.Name())
		var de *DamagedError
		if errors.As(err, &de) {
			// One damaged dataset must not hide the others.
			in = Info{Name: e.Name(), Splits: map[string]Split{}, Damaged: de.Err.Error()}
		} else if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// Register reads file (parquet, jsonl, json or csv), writes it as
// DIR/NAME/SPLIT.parquet and records it. An existing split is replaced
// only with force.
func (c *Catalog) Register(ctx context.Context, name, split, file string, force bool) (Split, error) {
	if err := CheckName("dataset", name); err != nil {
		return Split{}, err
	}
	if err := CheckName("split", split); err != nil {
		return Split{}, err
	}
	if _, err := c.existing(name, split, force); err != nil {
		return Split{}, err // said before the file is read
	}
	rows, err := dataset.ReadAll(ctx, file, dataset.Options{})
	if err != nil {
		return Split{}, err
	}
	if len(rows) == 0 {
		return Split{}, usererr.Errorf("%s has no rows; nothing to register", file)
	}
	src, err := filepath.Abs(file)
	if err != nil {
		src = file
	}
	return c.RegisterRows(ctx, name, split, rows, src, force)
}

// RegisterRows writes rows as DIR/NAME/SPLIT.parquet and records source
// (a file, or the hf:// URI and commit rllm dataset pull fetched). An
// existing split is replaced only with force.
func (c *Catalog) RegisterRows(ctx context.Context, name, split string, rows []episode.Task, source string, force bool) (Split, error) {
	if err := CheckName("dataset", name); err != nil {
		return Split{}, err
	}
	if err := CheckName("split", split); err != nil {
		return Split{}, err
	}
	if len(rows) == 0 {
		return Split{}, usererr.Errorf("%s has no rows; nothing to register", source)
	}
	cols := map[string]bool{}
	for _, r := range rows {
		for k := range r {
			cols[k] = true
		}
	}
	colList := slices.Sorted(maps.Keys(cols))
	// From here to the new dataset.json the registry is locked: another
	// register or rm of the same dataset waits instead of writing a
	// dataset.json that drops this split.
	unlock, err := c.lock(ctx)
	if err != nil {
		return Split{}, err
	}
	defer unlock()
	in, err := c.existing(name, split, force) // again: another writer may have added it
	if err != nil {
		return Split{}, err
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, name), atomicfile.DirMode); err != nil {
		return Split{}, usererr.Errorf("cannot create the dataset directory: %v; check data.datasets_dir", err)
	}
	out := filepath.Join(c.Dir, name, split+".parquet")
	if err := dataset.Write(ctx, out, rows, dataset.WriteOptions{}); err != nil {
		return Split{}, err
	}
	sum, err := fileSHA256(out)
	if err != nil {
		return Split{}, err
	}
	sp := Split{File: split + ".parquet", Rows: len(rows), Columns: colList, Source: source, RegisteredAt: time.Now().UTC().Truncate(time.Second), SHA256: sum}
	in.Splits[split] = sp
	if err := c.writeMeta(in); err != nil {
		return Split{}, err
	}
	return sp, nil
}

// existing reads dataset name for registering split: a new dataset when
// none is registered; refused when the split exists and force is off.
func (c *Catalog) existing(name, split string, force bool) (Info, error) {
	in, err := c.read(name)
	var de *DamagedError
	switch {
	case errors.As(err, &de):
		return Info{}, err
	case err != nil && usererr.Is(err):
		return Info{Name: name, Splits: map[string]Split{}}, nil
	case err != nil:
		return Info{}, err
	}
	if _, dup := in.Splits[split]; dup && !force {
		return Info{}, usererr.Errorf("dataset %s already has a %s split; pass --force to replace it, or rllm dataset rm %s --split %s first", name, split, name, split)
	}
	return in, nil
}

func (c *Catalog) writeMeta(in Info) error {
	in.Damaged = ""
	for k, sp := range in.Splits {
		sp.Changed = false
		in.Splits[k] = sp
	}
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(c.metaPath(in.Name), append(b, '\n'))
}

// Remove deletes a split, or the whole dataset when split is empty. A
// dataset whose dataset.json is damaged can still be removed whole.
func (c *Catalog) Remove(ctx context.Context, name, split string) error {
	if err := CheckName("dataset", name); err != nil {
		return err
	}
	unlock, err := c.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	in, err := c.read(name)
	var de *DamagedError
	if split == "" && errors.As(err, &de) {
		return os.RemoveAll(filepath.Join(c.Dir, name))
	}
	if err != nil {
		return err
	}
	if split == "" {
		return os.RemoveAll(filepath.Join(c.Dir, name))
	}
	sp, ok := in.Splits[split]
	if !ok {
		return usererr.Errorf("dataset %s has no %s split; it has: %s", name, split, strings.Join(in.SplitNames(), ", "))
	}
	delete(in.Splits, split)
	if len(in.Splits) == 0 {
		return os.RemoveAll(filepath.Join(c.Dir, name))
	}
	if err := c.writeMeta(in); err != nil {
		return err
	}
	return os.Remove(filepath.Join(c.Dir, name, sp.File))
}

// Path returns the parquet file of ref, "NAME" or "NAME:SPLIT". A bare
// name takes its only split, else the first of prefer it has. A file that
// changed since it was registered is refused: its rows are no longer the
// ones registered.
func (c *Catalog) Path(ref string, prefer ...string) (string, error) {
	name, split, explicit := strings.Cut(ref, ":")
	in, err := c.read(name)
	if err != nil {
		return "", err
	}
	pick := func(split string) (string, error) {
		sp := in.Splits[split]
		p := filepath.Join(c.Dir, name, sp.File)
		if sp.SHA256 == "" {
			return p, nil // registered before checksums were kept
		}
		sum, err := fileSHA256(p)
		if err != nil {
			return "", usererr.Errorf("dataset %s:%s: %v; register the split again with rllm dataset register %s --split %s --force FILE", name, split, err, name, split)
		}
		if sum != sp.SHA256 {
			return "", usererr.Errorf("dataset %s:%s: %s changed since it was registered (sha256 %.12s…, registered %.12s…); register the split again with rllm dataset register %s --split %s --force FILE", name, split, p, sum, sp.SHA256, name, split)
		}
		return p, nil
	}
	if explicit {
		if _, ok := in.Splits[split]; !ok {
			return "", usererr.Errorf("dataset %s has no %s split; it has: %s", name, split, strings.Join(in.SplitNames(), ", "))
		}
		return pick(split)
	}
	if len(in.Splits) == 1 {
		return pick(in.SplitNames()[0])
	}
	for _, p := range prefer {
		if _, ok := in.Splits[p]; ok {
			return pick(p)
		}
	}
	return "", usererr.Errorf("dataset %s has splits %s; name one as %s:SPLIT", name, strings.Join(in.SplitNames(), ", "), name)
}

var refRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}(:[A-Za-z0-9][A-Za-z0-9._-]{0,99})?$`)

// ResolveFiles maps the entries of a file list (data.train_files,
// data.val_files, eval's --data) that name registered datasets to their
// parquet files; existing files and other paths are left as they are.
// key names the list in errors and picks the split of a bare name: train
// for data.train_files, else test, val or validation.
func ResolveFiles(dir, key string, files []string) ([]string, error) {
	var c *Catalog
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f
		if !refRE.MatchString(f) {
			continue
		}
		if _, err := os.Stat(f); err == nil {
			continue // a file of that name wins
		}
		if c == nil {
			var err error
			if c, err = Open(dir); err != nil {
				return nil, err
			}
		}
		name, _, _ := strings.Cut(f, ":")
		if _, err := os.Stat(c.metaPath(name)); err != nil {
			if strings.ContainsAny(f, "./") {
				continue // looks like a path: let the loader say it is missing
			}
			return nil, usererr.Errorf("%s: %q is neither a file nor a dataset registered in %s; give a path, or register it with rllm dataset register %s --split train FILE", key, f, c.Dir, name)
		}
		prefer := []string{"test", "val", "validation"}
		if key == "data.train_files" {
			prefer = []string{"train"}
		}
		p, err := c.Path(f, prefer...)
		if err != nil {
			return nil, usererr.Errorf("%s: %v", key, err)
		}
		out[i] = p
	}
	return out, nil
}
