package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// ConvertedRevision holds the Hub's parquet conversion of a dataset
// (CONFIG/SPLIT/NNNN.parquet), for datasets without data files of their own.
const ConvertedRevision = "refs/convert/parquet"

// RepoInfo is GET /api/datasets/{repo}/revision/{rev}.
type RepoInfo struct {
	ID       string `json:"id"`
	SHA      string `json:"sha"`
	Private  bool   `json:"private"`
	Siblings []struct {
		RFilename string `json:"rfilename"`
	} `json:"siblings"`
}

// Files lists the repository's file paths.
func (r RepoInfo) Files() []string {
	out := make([]string, 0, len(r.Siblings))
	for _, s := range r.Siblings {
		if safePath(s.RFilename) {
			out = append(out, s.RFilename)
		}
	}
	return out
}

// Info reads a dataset's commit and files at rev; offline, from the
// cached snapshot.
func (c *Client) Info(ctx context.Context, repo, rev string) (RepoInfo, error) {
	if rev == "" {
		rev = "main"
	}
	if c.Offline {
		commit, ok := c.cachedCommit(repo, rev)
		if !ok {
			return RepoInfo{}, usererr.Errorf("HF_HUB_OFFLINE=1 and dataset %s at revision %s is not in the Hugging Face cache (%s); pull it once online, or unset HF_HUB_OFFLINE", repo, rev, c.repoDir(repo))
		}
		files, err := c.snapshotFiles(repo, commit)
		if err != nil {
			return RepoInfo{}, usererr.Errorf("HF_HUB_OFFLINE=1 and the cached snapshot %.12s of dataset %s cannot be listed: %v", commit, repo, err)
		}
		info := RepoInfo{ID: repo, SHA: commit}
		for _, f := range files {
			info.Siblings = append(info.Siblings, struct {
				RFilename string `json:"rfilename"`
			}{f})
		}
		return info, nil
	}
	var info RepoInfo
	if _, err := c.apiJSON(ctx, "/api/datasets/"+repo+"/revision/"+escRev(rev), &info); err != nil {
		return RepoInfo{}, c.userError(err, repo, rev, "")
	}
	if !IsCommit(info.SHA) {
		return RepoInfo{}, &usererr.Error{Code: usererr.ExitFailure, Msg: fmt.Sprintf("%s/api/datasets/%s/revision/%s answered without a commit sha", c.endpoint(), repo, escRev(rev))}
	}
	if err := c.writeRef(repo, rev, info.SHA); err != nil {
		return RepoInfo{}, err
	}
	return info, nil
}

// Layout is where a config's splits live: split → repository paths, at
// one commit.
type Layout struct {
	Repo, Revision, Commit string
	Config                 string
	Configs                []string // every config the dataset has
	Splits                 map[string][]string
	// Converted is set when the files are the Hub's parquet conversion
	// (revision refs/convert/parquet).
	Converted bool
}

// SplitNames lists the layout's splits: train, validation, test, then
// the others sorted.
func (l Layout) SplitNames() []string {
	var out, rest []string
	for _, s := range splitOrder {
		if _, ok := l.Splits[s]; ok {
			out = append(out, s)
		}
	}
	for _, s := range sortedKeys(l.Splits) {
		if !slices.Contains(splitOrder, s) {
			rest = append(rest, s)
		}
	}
	return append(out, rest...)
}

var splitOrder = []string{"train", "validation", "test"}

// Want names what a layout is for: a config ("" for the default), the
// split globs a catalog gives, a file glob, and One (a config or a split,
// as an hf:// URI's single part is).
type Want struct {
	Config    string
	DataFiles map[string][]string
	Glob      string
	One       string
}

// Layout finds where the splits of a dataset config live: the catalog's
// data_files, else the README's configs:, else the default layout of file
// names (data/train-00000-of-00001.parquet, test.jsonl, ...), else the
// Hub's parquet conversion.
func (c *Client) Layout(ctx context.Context, repo, rev string, w Want) (Layout, error) {
	if rev == "" {
		rev = "main"
	}
	info, err := c.Info(ctx, repo, rev)
	if err != nil {
		return Layout{}, err
	}
	l := Layout{Repo: repo, Revision: rev, Commit: info.SHA, Config: w.Config, Splits: map[string][]string{}}
	files := info.Files()
	if w.Glob != "" {
		for _, f := range files {
			if matchGlob(w.Glob, f) {
				l.Splits["train"] = append(l.Splits["train"], f)
			}
		}
		if len(l.Splits) == 0 {
			return Layout{}, usererr.Errorf("no file of dataset %s at %s matches %q (files: %s)", repo, rev, w.Glob, listSome(files))
		}
		return l, nil
	}
	if w.DataFiles != nil {
		for split, globs := range w.DataFiles {
			for _, f := range files {
				for _, g := range globs {
					if matchGlob(g, f) {
						l.Splits[split] = append(l.Splits[split], f)
						break
					}
				}
			}
			if len(l.Splits[split]) == 0 {
				return Layout{}, usererr.Errorf("no file of dataset %s at %s matches the %s split's %s (files: %s)", repo, rev, split, strings.Join(globs, ", "), listSome(files))
			}
		}
		return l, nil
	}
	var cfgs []readmeConfig
	if slices.Contains(files, "README.md") {
		p, _, err := c.Download(ctx, repo, info.SHA, "README.md")
		if err != nil {
			return Layout{}, err
		}
		if cfgs, err = readmeConfigs(p); err != nil {
			return Layout{}, usererr.Errorf("dataset %s: README.md: %v", repo, err)
		}
	}
	if len(cfgs) > 0 {
		return c.layoutFromConfigs(l, cfgs, files, w)
	}
	data := dataFiles(files)
	if len(data) > 0 {
		l.Configs = []string{"default"}
		if w.One != "" && slices.Contains(topDirs(data), w.One) {
			w.Config = w.One
		}
		if w.Config != "" && w.Config != "default" {
			in := prefixed(data, w.Config+"/")
			if len(in) == 0 {
				return Layout{}, usererr.Errorf("dataset %s has no config %q%s; it has: %s", repo, w.Config, didYouMean(w.Config, topDirs(data)), strings.Join(append([]string{"default"}, topDirs(data)...), ", "))
			}
			data = in
		}
		l.Config = w.Config
		if l.Config == "" {
			l.Config = "default"
		}
		l.Splits = splitsByName(data)
		return l, nil
	}
	return c.convertedLayout(ctx, l, w)
}

func (c *Client) layoutFromConfigs(l Layout, cfgs []readmeConfig, files []string, w Want) (Layout, error) {
	names := make([]string, len(cfgs))
	for i, cf := range cfgs {
		names[i] = cf.Name
	}
	l.Configs = names
	if w.Config == "" && w.One != "" && slices.Contains(names, w.One) {
		w.Config = w.One
	}
	var pick *readmeConfig
	for i := range cfgs {
		if (w.Config == "" && cfgs[i].Default) || cfgs[i].Name == w.Config {
			pick = &cfgs[i]
			break
		}
	}
	if pick == nil && w.Config == "" {
		pick = &cfgs[0]
	}
	if pick == nil {
		return Layout{}, usererr.Errorf("dataset %s has no config %q%s; it has: %s", l.Repo, w.Config, didYouMean(w.Config, names), strings.Join(names, ", "))
	}
	l.Config = pick.Name
	for split, globs := range pick.DataFiles {
		for _, f := range files {
			for _, g := range globs {
				if matchGlob(g, f) {
					l.Splits[split] = append(l.Splits[split], f)
					break
				}
			}
		}
	}
	if len(l.Splits) == 0 {
		return Layout{}, usererr.Errorf("dataset %s: config %s's data_files match no file of the repository", l.Repo, pick.Name)
	}
	return l, nil
}

// convertedLayout reads the Hub's parquet conversion:
// CONFIG/SPLIT/NNNN.parquet at refs/convert/parquet.
func (c *Client) convertedLayout(ctx context.Context, l Layout, w Want) (Layout, error) {
	info, err := c.Info(ctx, l.Repo, ConvertedRevision)
	if err != nil {
		if c.Offline || !isNotFound(err) {
			return Layout{}, err
		}
		return Layout{}, usererr.Errorf("dataset %s has no data files rllm reads (parquet, jsonl, json, csv) and no parquet conversion (%s); give a file glob, e.g. hf://datasets/%s/data/*.parquet", l.Repo, ConvertedRevision, l.Repo)
	}
	byConfig := map[string]map[string][]string{}
	for _, f := range info.Files() {
		parts := strings.Split(f, "/")
		if len(parts) != 3 || !strings.HasSuffix(f, ".parquet") {
			continue
		}
		split := strings.TrimPrefix(parts[1], "partial-")
		if byConfig[parts[0]] == nil {
			byConfig[parts[0]] = map[string][]string{}
		}
		byConfig[parts[0]][split] = append(byConfig[parts[0]][split], f)
	}
	names := sortedKeys(byConfig)
	if len(names) == 0 {
		return Layout{}, usererr.Errorf("dataset %s's parquet conversion holds no CONFIG/SPLIT/*.parquet file", l.Repo)
	}
	if w.Config == "" && w.One != "" && byConfig[w.One] != nil {
		w.Config = w.One
	}
	if w.Config == "" {
		w.Config = names[0]
		if byConfig["default"] != nil {
			w.Config = "default"
		}
	}
	splits, ok := byConfig[w.Config]
	if !ok {
		return Layout{}, usererr.Errorf("dataset %s has no config %q%s; it has: %s", l.Repo, w.Config, didYouMean(w.Config, names), strings.Join(names, ", "))
	}
	return Layout{Repo: l.Repo, Revision: ConvertedRevision, Commit: info.SHA, Config: w.Config, Configs: names, Splits: splits, Converted: true}, nil
}

func isNotFound(err error) bool {
	var he *Error
	return errors.As(err, &he) && he.Status == 404
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func listSome(files []string) string {
	if len(files) > 12 {
		return strings.Join(files[:12], ", ") + fmt.Sprintf(", … (%d in all)", len(files))
	}
	if len(files) == 0 {
		return "none"
	}
	return strings.Join(files, ", ")
}

type readmeConfig struct {
	Name      string
	Default   bool
	DataFiles map[string][]string
}

// readmeConfigs reads the configs: of a dataset card's YAML header.
func readmeConfigs(path string) ([]readmeConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
	if !bytes.HasPrefix(b, []byte("---\n")) {
		return nil, nil
	}
	end := bytes.Index(b[4:], []byte("\n---"))
	if end < 0 {
		return nil, nil
	}
	var card struct {
		Configs []struct {
			ConfigName string `yaml:"config_name"`
			Default    bool   `yaml:"default"`
			DataFiles  any    `yaml:"data_files"`
		} `yaml:"configs"`
	}
	if err := yaml.Unmarshal(b[4:4+end], &card); err != nil {
		return nil, fmt.Errorf("the YAML header does not parse: %v", err)
	}
	var out []readmeConfig
	for _, cf := range card.Configs {
		rc := readmeConfig{Name: cf.ConfigName, Default: cf.Default, DataFiles: map[string][]string{}}
		if rc.Name == "" {
			rc.Name = "default"
		}
		switch df := cf.DataFiles.(type) {
		case string:
			rc.DataFiles["train"] = []string{df}
		case map[string]any:
			for k, v := range df {
				rc.DataFiles[k] = strs(v)
			}
		case []any:
			for _, item := range df {
				switch it := item.(type) {
				case string:
					rc.DataFiles["train"] = append(rc.DataFiles["train"], it)
				case map[string]any:
					split, _ := it["split"].(string)
					if split == "" {
						split = "train"
					}
					rc.DataFiles[split] = append(rc.DataFiles[split], strs(it["path"])...)
				}
			}
		}
		out = append(out, rc)
	}
	return out, nil
}

func strs(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// matchGlob matches a Hub data_files pattern: * and ? within a path
// part, ** across parts, [..] classes.
func matchGlob(pattern, path string) bool {
	re, err := globRE(pattern)
	return err == nil && re.MatchString(path)
}

func globRE(p string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch ch := p[i]; ch {
		case '*':
			if i+1 < len(p) && p[i+1] == '*' {
				i++
				if i+1 < len(p) && p[i+1] == '/' {
					i++
					b.WriteString("(?:.*/)?")
				} else {
					b.WriteString(".*")
				}
			} else {
				b.WriteString("[^/]*")
			}
		case '?':
			b.WriteString("[^/]")
		case '[':
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				b.WriteString(`\[`)
				continue
			}
			cls := p[i+1 : i+j]
			if strings.HasPrefix(cls, "!") {
				cls = "^" + cls[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(cls, `\`, `\\`) + "]")
			i += j
		default:
			b.WriteString(regexp.QuoteMeta(string(ch)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// dataFiles are the files rllm can read, in order.
func dataFiles(files []string) []string {
	var out []string
	for _, f := range files {
		if _, ok := dataExt(f); ok {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

func topDirs(files []string) []string {
	var out []string
	for _, f := range files {
		if d, _, ok := strings.Cut(f, "/"); ok && d != "data" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

func prefixed(files []string, prefix string) []string {
	var out []string
	for _, f := range files {
		if strings.HasPrefix(f, prefix) {
			out = append(out, f)
		}
	}
	return out
}

// splitKeywords are the names the datasets library reads as splits in
// file and folder names (data_files.py), in the order it tries them.
var splitKeywords = []struct {
	split string
	words []string
}{
	{"train", []string{"train", "training"}},
	{"validation", []string{"validation", "valid", "dev", "val"}},
	{"test", []string{"test", "testing", "eval", "evaluation"}},
}

var tokenSep = regexp.MustCompile(`[-._ /0-9]+`)

// splitsByName groups data files by the split their path names; with no
// split named anywhere, every file is train.
func splitsByName(files []string) map[string][]string {
	out := map[string][]string{}
	for _, f := range files {
		toks := tokenSep.Split(strings.ToLower(f), -1)
		// The extension is no split name.
		if len(toks) > 0 {
			toks = toks[:len(toks)-1]
		}
	found:
		for _, kw := range splitKeywords {
			for _, t := range toks {
				if slices.Contains(kw.words, t) {
					out[kw.split] = append(out[kw.split], f)
					break found
				}
			}
		}
	}
	if len(out) == 0 {
		out["train"] = files
	}
	return out
}
