package hub

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Source is what to pull: a dataset's configs and splits, and how its rows
// become tasks.
type Source struct {
	// Name says what the user asked for in errors (a catalog name or an
	// hf:// URI).
	Name     string
	Repo     string
	Revision string // "" means main
	// Configs are pulled together; empty means the default config.
	Configs []string
	// Split, when set, is the only split pulled; else the first of
	// Prefer the dataset has (its only split when it has one), else all.
	Split     string
	Prefer    []string
	DataFiles map[string][]string
	Glob      string
	One       string // an hf:// URI's single part: a config or a split
	// Fields maps rows to tasks; nil keeps the rows as they are.
	Fields FieldMap
}

// FromEntry is the Source of a catalog dataset (split "" for all).
func FromEntry(e Entry, split string) Source {
	return Source{Name: e.Name, Repo: e.Repo, Revision: e.Revision, Configs: e.ConfigList(), Split: split, DataFiles: e.DataFiles, Fields: e.Fields}
}

// FromURI is the Source of an hf:// URI: a catalog dataset's URI takes
// the catalog's field map (and data files), unless fields are given.
func FromURI(u URI, cat *Catalog, fields FieldMap) Source {
	s := Source{Name: u.String(), Repo: u.Repo, Revision: u.Revision, Split: u.Split, Glob: u.Glob, One: u.One, Fields: fields}
	if u.Config != "" {
		s.Configs = []string{u.Config}
	}
	if e, ok := cat.ByRepo(u.Repo); ok {
		if s.Fields == nil {
			s.Fields = e.Fields
		}
		if s.Glob == "" && u.Config == "" && u.One == "" {
			s.Configs = e.ConfigList()
		}
		if s.Glob == "" && e.DataFiles != nil {
			s.DataFiles = e.DataFiles
		}
		if s.Revision == "" {
			s.Revision = e.Revision
		}
	}
	return s
}

// Pulled is a pulled dataset: its tasks by split, and exactly which
// commit and files they came from.
type Pulled struct {
	Repo, Revision, Commit string
	Configs                []string
	Converted              bool
	Splits                 map[string][]episode.Task
	Files                  map[string][]string // split → repository paths
	Columns                map[string][]string // split → the Hub columns
}

// SplitNames lists the pulled splits in order.
func (p Pulled) SplitNames() []string {
	return Layout{Splits: p.Files}.SplitNames()
}

// Plan is what a pull will fetch: each config's layout and the splits
// chosen, at one commit.
type Plan struct {
	Repo, Revision, Commit string
	Converted              bool
	Parts                  []PlanPart
}

// PlanPart is one config's files by split.
type PlanPart struct {
	Config string
	Splits []string
	Files  map[string][]string
}

// Files lists every file of the plan, split by split (for keys that
// name exactly what a pull reads).
func (pl *Plan) Files() []string {
	var out []string
	for _, pt := range pl.Parts {
		for _, s := range pt.Splits {
			out = append(out, pt.Files[s]...)
		}
	}
	return out
}

// Resolve finds what src names, at which commit, without downloading
// data files (the metadata and README only).
func (c *Client) Resolve(ctx context.Context, src Source) (*Plan, error) {
	if c.CacheDir == "" {
		return nil, usererr.Errorf("no Hugging Face cache directory is known; set HF_HUB_CACHE or HF_HOME")
	}
	configs := src.Configs
	if len(configs) == 0 {
		configs = []string{""}
	}
	pl := &Plan{Repo: src.Repo, Revision: src.Revision}
	if pl.Revision == "" {
		pl.Revision = "main"
	}
	for _, cfg := range configs {
		rev := src.Revision
		if pl.Commit != "" && !pl.Converted {
			rev = pl.Commit // every config at the commit the first resolved to
		}
		l, err := c.Layout(ctx, src.Repo, rev, Want{Config: cfg, DataFiles: src.DataFiles, Glob: src.Glob, One: src.One})
		if err != nil {
			return nil, err
		}
		pl.Commit, pl.Converted = l.Commit, l.Converted
		if l.Converted {
			pl.Revision = ConvertedRevision
		}
		want := src.Split
		if want == "" && src.One != "" && l.Config != src.One {
			want = src.One // the URI's single part was no config: a split
		}
		splits := l.SplitNames()
		if want != "" {
			if _, ok := l.Splits[want]; !ok {
				return nil, usererr.Errorf("%s has no split %q%s; its splits: %s", describe(src, l), want, didYouMean(want, splits), strings.Join(splits, ", "))
			}
			splits = []string{want}
		} else if len(src.Prefer) > 0 {
			pick := ""
			for _, s := range src.Prefer {
				if _, ok := l.Splits[s]; ok && pick == "" {
					pick = s
				}
			}
			if pick == "" && len(splits) == 1 {
				pick = splits[0]
			}
			if pick == "" {
				return nil, usererr.Errorf("%s has splits %s and none is %s; name one, as in %s/SPLIT", describe(src, l), strings.Join(splits, ", "), strings.Join(src.Prefer, " or "), src.Name)
			}
			splits = []string{pick}
		}
		pl.Parts = append(pl.Parts, PlanPart{Config: l.Config, Splits: splits, Files: l.Splits})
	}
	return pl, nil
}

// Pull downloads (or finds in the cache) a dataset's files and maps its
// rows. Every error is one line naming the dataset.
func (c *Client) Pull(ctx context.Context, src Source) (*Pulled, error) {
	if _, err := src.mapper(); err != nil {
		return nil, err
	}
	pl, err := c.Resolve(ctx, src)
	if err != nil {
		return nil, err
	}
	return c.Fetch(ctx, src, pl)
}

func (src Source) mapper() (*Mapper, error) {
	if src.Fields == nil {
		return nil, nil
	}
	mp, err := src.Fields.Compile()
	if err != nil {
		return nil, usererr.Errorf("%s: %v", src.Name, err)
	}
	return mp, nil
}

// Fetch downloads a plan's files and maps their rows.
func (c *Client) Fetch(ctx context.Context, src Source, pl *Plan) (*Pulled, error) {
	mp, err := src.mapper()
	if err != nil {
		return nil, err
	}
	p := &Pulled{Repo: pl.Repo, Revision: pl.Revision, Commit: pl.Commit, Converted: pl.Converted, Splits: map[string][]episode.Task{}, Files: map[string][]string{}, Columns: map[string][]string{}}
	for _, pt := range pl.Parts {
		p.Configs = append(p.Configs, pt.Config)
		for _, split := range pt.Splits {
			for _, f := range pt.Files[split] {
				local, _, err := c.Download(ctx, pl.Repo, pl.Commit, f)
				if err != nil {
					return nil, err
				}
				rows, err := dataset.ReadAll(ctx, local, dataset.Options{})
				if err != nil {
					return nil, usererr.Errorf("%s: %s (%s at %.12s) cannot be read: %v", src.Name, f, pl.Repo, pl.Commit, err)
				}
				cols := columnsOf(rows)
				p.Columns[split] = mergeCols(p.Columns[split], cols)
				if mp != nil && len(rows) > 0 {
					if err := mp.Check(cols); err != nil {
						return nil, usererr.Errorf("%s: %s: %v; fix the field map", src.Name, f, err)
					}
					for i, r := range rows {
						m, err := mp.Apply(r, pt.Config)
						if err != nil {
							return nil, usererr.Errorf("%s: %s row %d: %v", src.Name, f, i, err)
						}
						rows[i] = m
					}
				}
				p.Splits[split] = append(p.Splits[split], rows...)
				p.Files[split] = append(p.Files[split], f)
			}
		}
	}
	return p, nil
}

func describe(src Source, l Layout) string {
	s := "dataset " + src.Repo
	if l.Config != "" && l.Config != "default" {
		s += " (config " + l.Config + ")"
	}
	return s
}

func columnsOf(rows []episode.Task) []string {
	seen := map[string]bool{}
	for i, r := range rows {
		if i >= 1000 {
			break
		}
		for k := range r {
			seen[k] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

func mergeCols(a, b []string) []string {
	for _, x := range b {
		if !slices.Contains(a, x) {
			a = append(a, x)
		}
	}
	slices.Sort(a)
	return a
}
