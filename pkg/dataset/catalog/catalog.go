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
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Split describes one registered split.
type Split struct {
	File         string    `json:"file"`
	Rows         int       `json:"rows"`
	Columns      []string  `json:"columns"`
	Source       string    `json:"source"`
	RegisteredAt time.Time `json:"registered_at"`
}

// Info describes one registered dataset.
type Info struct {
	Name   string           `json:"name"`
	Splits map[string]Split `json:"splits"`
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

// Show describes dataset name.
func (c *Catalog) Show(name string) (Info, error) {
	if err := CheckName("dataset", name); err != nil {
		return Info{}, err
	}
	b, err := os.ReadFile(c.metaPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return Info{}, c.notFound(name)
	}
	if err != nil {
		return Info{}, err
	}
	var in Info
	if err := json.Unmarshal(b, &in); err != nil {
		return Info{}, fmt.Errorf("%s is damaged (%v); remove the dataset with rllm dataset rm %s and register it again", c.metaPath(name), err, name)
	}
	in.Name = name
	if in.Splits == nil {
		in.Splits = map[string]Split{}
	}
	return in, nil
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
		in, err := c.Show(e.Name())
		if err != nil {
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
	in, err := c.Show(name)
	if err != nil && !usererr.Is(err) {
		return Split{}, err
	}
	if err != nil {
		in = Info{Name: name, Splits: map[string]Split{}}
	}
	if _, dup := in.Splits[split]; dup && !force {
		return Split{}, usererr.Errorf("dataset %s already has a %s split; pass --force to replace it, or rllm dataset rm %s --split %s first", name, split, name, split)
	}
	rows, err := dataset.ReadAll(ctx, file, dataset.Options{})
	if err != nil {
		return Split{}, err
	}
	if len(rows) == 0 {
		return Split{}, usererr.Errorf("%s has no rows; nothing to register", file)
	}
	cols := map[string]bool{}
	for _, r := range rows {
		for k := range r {
			cols[k] = true
		}
	}
	colList := slices.Sorted(maps.Keys(cols))
	if err := os.MkdirAll(filepath.Join(c.Dir, name), 0o755); err != nil {
		return Split{}, usererr.Errorf("cannot create the dataset directory: %v; check data.datasets_dir", err)
	}
	out := filepath.Join(c.Dir, name, split+".parquet")
	if err := dataset.Write(ctx, out, rows, dataset.WriteOptions{}); err != nil {
		return Split{}, err
	}
	src, err := filepath.Abs(file)
	if err != nil {
		src = file
	}
	sp := Split{File: split + ".parquet", Rows: len(rows), Columns: colList, Source: src, RegisteredAt: time.Now().UTC().Truncate(time.Second)}
	in.Splits[split] = sp
	if err := c.writeMeta(in); err != nil {
		return Split{}, err
	}
	return sp, nil
}

func (c *Catalog) writeMeta(in Info) error {
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(c.metaPath(in.Name), append(b, '\n'))
}

// Remove deletes a split, or the whole dataset when split is empty.
func (c *Catalog) Remove(name, split string) error {
	in, err := c.Show(name)
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
// name takes its only split, else the first of prefer it has.
func (c *Catalog) Path(ref string, prefer ...string) (string, error) {
	name, split, explicit := strings.Cut(ref, ":")
	in, err := c.Show(name)
	if err != nil {
		return "", err
	}
	if explicit {
		sp, ok := in.Splits[split]
		if !ok {
			return "", usererr.Errorf("dataset %s has no %s split; it has: %s", name, split, strings.Join(in.SplitNames(), ", "))
		}
		return filepath.Join(c.Dir, name, sp.File), nil
	}
	if len(in.Splits) == 1 {
		for _, sp := range in.Splits {
			return filepath.Join(c.Dir, name, sp.File), nil
		}
	}
	for _, p := range prefer {
		if sp, ok := in.Splits[p]; ok {
			return filepath.Join(c.Dir, name, sp.File), nil
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
