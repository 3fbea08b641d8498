package hub

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rllm-org/rllm-go/internal/suggest"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Entry is one dataset of the catalog: where it lives on the Hub and how
// its rows become rllm tasks. rLLM's registry/datasets.json is the model;
// the transforms it writes in Python are field maps here.
type Entry struct {
	Name     string   `json:"name"`
	Aliases  []string `json:"aliases,omitempty"`
	Repo     string   `json:"repo"`
	Revision string   `json:"revision"`
	Config   string   `json:"config,omitempty"`
	// Configs, when set, are pulled together (rLLM's aggregate_configs);
	// the field map's config source names each row's.
	Configs []string `json:"configs,omitempty"`
	Splits  []string `json:"splits"`
	// DataFiles, when set, are the globs of each split's files in the
	// repository, instead of its README's configs or the default layout.
	DataFiles   map[string][]string `json:"data_files,omitempty"`
	Fields      FieldMap            `json:"fields"`
	Env         string              `json:"env"`
	Reward      string              `json:"reward"`
	Category    string              `json:"category"`
	Rows        map[string]int      `json:"rows,omitempty"`
	Description string              `json:"description"`
}

// ConfigList is the configs pulled: Configs, else Config ("" for the
// dataset's default).
func (e Entry) ConfigList() []string {
	if len(e.Configs) > 0 {
		return e.Configs
	}
	return []string{e.Config}
}

//go:embed catalog.json
var catalogJSON []byte

// Catalog is the parsed catalog.json.
type Catalog struct {
	Datasets []Entry `json:"datasets"`
}

// LoadCatalog parses a catalog; every entry is checked (repo, splits,
// a field map that compiles).
func LoadCatalog(b []byte) (*Catalog, error) {
	var c Catalog
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("catalog: %v", err)
	}
	seen := map[string]bool{}
	for _, e := range c.Datasets {
		if !ValidRepo(e.Repo) {
			return nil, fmt.Errorf("catalog %s: repo %q is not ORG/NAME", e.Name, e.Repo)
		}
		if e.Revision == "" || len(e.Splits) == 0 || e.Env == "" {
			return nil, fmt.Errorf("catalog %s: revision, splits and env are required", e.Name)
		}
		for _, n := range append([]string{e.Name}, e.Aliases...) {
			if seen[n] {
				return nil, fmt.Errorf("catalog: %s is named twice", n)
			}
			seen[n] = true
		}
		if _, err := e.Fields.Compile(); err != nil {
			return nil, fmt.Errorf("catalog %s: %v", e.Name, err)
		}
		for s := range e.DataFiles {
			if !slices.Contains(e.Splits, s) {
				return nil, fmt.Errorf("catalog %s: data_files names split %s, not one of its splits", e.Name, s)
			}
		}
	}
	return &c, nil
}

// Builtin is the catalog rllm ships (pkg/hub/catalog.json).
func Builtin() *Catalog {
	c, err := LoadCatalog(catalogJSON)
	if err != nil {
		panic(err) // the embedded file is checked by TestBuiltinCatalog
	}
	return c
}

// Lookup finds an entry by name or alias.
func (c *Catalog) Lookup(name string) (Entry, bool) {
	for _, e := range c.Datasets {
		if e.Name == name || slices.Contains(e.Aliases, name) {
			return e, true
		}
	}
	return Entry{}, false
}

// ByRepo finds the entry of a Hub repository (an hf:// URI of a catalog
// dataset takes its field map).
func (c *Catalog) ByRepo(repo string) (Entry, bool) {
	for _, e := range c.Datasets {
		if strings.EqualFold(e.Repo, repo) {
			return e, true
		}
	}
	return Entry{}, false
}

// Find is Lookup with a usage error naming the nearest names.
func (c *Catalog) Find(name string) (Entry, error) {
	if e, ok := c.Lookup(name); ok {
		return e, nil
	}
	var names []string
	for _, e := range c.Datasets {
		names = append(names, e.Name)
	}
	return Entry{}, usererr.Errorf("%q is not in rllm's dataset catalog%s; rllm dataset list shows the catalog, or pull any Hub dataset as hf://datasets/ORG/NAME", name, didYouMean(name, names))
}

// didYouMean is "; did you mean X?" for the nearest of names, or "".
func didYouMean(name string, names []string) string {
	best, bestD := "", suggest.Near(len(name))+1
	for _, n := range names {
		if d := suggest.Distance(strings.ToLower(name), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %s?", best)
}
