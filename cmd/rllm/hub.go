package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/dataset/catalog"
	"github.com/rllm-org/rllm-go/pkg/hub"
	"github.com/rllm-org/rllm-go/pkg/progress"
	"github.com/rllm-org/rllm-go/pkg/tokenizer"
	"github.com/rllm-org/rllm-go/pkg/trainer"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// hubClient is the Hub client the environment describes, as
// huggingface_hub reads it: HF_ENDPOINT, HF_TOKEN (else the token file
// huggingface-cli login writes: HF_TOKEN_PATH, else $HF_HOME/token),
// HF_HUB_CACHE (else $HF_HOME/hub) and HF_HUB_OFFLINE.
func hubClient(a *App) *hub.Client {
	c := &hub.Client{
		Endpoint: a.Getenv("HF_ENDPOINT"),
		Token:    hubToken(a),
		CacheDir: tokenizer.HubCacheDir(a.Getenv),
		Offline:  envTrue(a.Getenv("HF_HUB_OFFLINE")),
	}
	if a.StderrIsTerminal {
		c.Progress = progress.NewText(a.Stderr, progress.Options{})
	}
	return c
}

func envTrue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

func hubHome(a *App) string {
	if d := a.Getenv("HF_HOME"); d != "" {
		return d
	}
	if d := a.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface")
	}
	if d := a.Getenv("HOME"); d != "" {
		return filepath.Join(d, ".cache", "huggingface")
	}
	return ""
}

func hubToken(a *App) string {
	if t := strings.TrimSpace(a.Getenv("HF_TOKEN")); t != "" {
		return t
	}
	path := a.Getenv("HF_TOKEN_PATH")
	if path == "" && hubHome(a) != "" {
		path = filepath.Join(hubHome(a), "token")
	}
	if path == "" {
		return ""
	}
	read := a.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	b, err := read(path)
	if err != nil || len(b) > 4096 {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// hubSourceFor is what rllm dataset pull and hf:// entries fetch: a
// catalog name or an hf:// URI (a catalog dataset's URI takes its field
// map; others the given one, or none).
func hubSourceFor(arg string, fields map[string]string) (hub.Source, string, error) {
	cat := hub.Builtin()
	if hub.IsURI(arg) {
		u, err := hub.ParseURI(arg)
		if err != nil {
			return hub.Source{}, "", err
		}
		var fm hub.FieldMap
		if len(fields) > 0 {
			fm = fields
		}
		name := u.Repo[strings.IndexByte(u.Repo, '/')+1:]
		if e, ok := cat.ByRepo(u.Repo); ok {
			name = e.Name
		}
		return hub.FromURI(u, cat, fm), name, nil
	}
	e, err := cat.Find(arg)
	if err != nil {
		return hub.Source{}, "", err
	}
	return hub.FromEntry(e, ""), e.Name, nil
}

// sourceURI names exactly what was pulled: the repo at its commit, the
// config and the split.
func sourceURI(p *hub.Pulled, config, split string) string {
	u := hub.URI{Repo: p.Repo, Revision: p.Commit}
	if config != "" && config != "default" {
		u.Config, u.Split = config, split
	} else {
		u.One = split
	}
	return u.String()
}

// resolveHubFiles fetches the hf:// entries of a file list into local
// parquet files (mapped to task fields, kept under data.datasets_dir/.hf
// by commit, so a second run reads them without fetching), leaving other
// entries as they are. key picks the split of a URI that names none.
func resolveHubFiles(ctx context.Context, a *App, c *config.Config, key string, files []string) ([]string, []trainer.DataSource, error) {
	var out []string
	var srcs []trainer.DataSource
	for _, f := range files {
		if !hub.IsURI(f) {
			out = append(out, f)
			continue
		}
		src, _, err := hubSourceFor(f, c.Data.FieldMap)
		if err != nil {
			return nil, nil, usererr.Errorf("%s: %v", key, err)
		}
		src.Prefer = []string{"test", "validation", "val"}
		if key == "data.train_files" {
			src.Prefer = []string{"train"}
		}
		reg, err := catalog.Open(c.Data.DatasetsDir)
		if err != nil {
			return nil, nil, err
		}
		cl := hubClient(a)
		pl, err := cl.Resolve(ctx, src)
		if err != nil {
			return nil, nil, err
		}
		split, config := pl.Parts[0].Splits[0], pl.Parts[0].Config
		if len(pl.Parts) > 1 {
			var cs []string
			for _, pt := range pl.Parts {
				cs = append(cs, pt.Config)
			}
			config = strings.Join(cs, ",")
		}
		// The mapped split is kept by commit and by what was asked: a
		// second run reads it without fetching or mapping again.
		spec, _ := json.Marshal(struct {
			S hub.Source
			C string
			F []string
		}{src, pl.Commit, pl.Files()})
		sum := sha256.Sum256(spec)
		local := filepath.Join(reg.Dir, ".hf", filepath.Base(hub.RepoDir("", pl.Repo)), pl.Commit, split+"-"+hex.EncodeToString(sum[:6])+".parquet")
		var meta struct {
			Rows int `json:"rows"`
		}
		if b, err := os.ReadFile(local + ".json"); err != nil || json.Unmarshal(b, &meta) != nil || !isFile(local) {
			p, err := cl.Fetch(ctx, src, pl)
			if err != nil {
				return nil, nil, err
			}
			if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
				return nil, nil, usererr.Errorf("%s: cannot write under data.datasets_dir: %v", key, err)
			}
			if err := dataset.Write(ctx, local, p.Splits[split], dataset.WriteOptions{}); err != nil {
				return nil, nil, err
			}
			meta.Rows = len(p.Splits[split])
			b, _ := json.Marshal(meta)
			if err := atomicfile.WriteFile(local+".json", b); err != nil {
				return nil, nil, err
			}
		}
		files := pl.Files()
		srcs = append(srcs, trainer.DataSource{Key: key, URI: f, Repo: pl.Repo, Revision: pl.Revision, Commit: pl.Commit, Config: config, Split: split, Files: files, Rows: meta.Rows})
		fmt.Fprintf(a.Stderr, "rllm: %s: %s is %s (%d rows)\n", key, f, sourceURI(&hub.Pulled{Repo: pl.Repo, Commit: pl.Commit}, config, split), meta.Rows)
		out = append(out, local)
	}
	return out, srcs, nil
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}
