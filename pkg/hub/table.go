package hub

import (
	"fmt"
	"strings"
)

// Markers around the generated catalog table in docs/datasets.md.
const (
	TableBegin = "<!-- catalog table: generated from pkg/hub/catalog.json by go test ./pkg/hub -run TestDocsTable -update -->"
	TableEnd   = "<!-- end of catalog table -->"
)

// Table writes the catalog as the Markdown table docs/datasets.md holds.
func (c *Catalog) Table() string {
	var b strings.Builder
	b.WriteString("| name | Hub repo | config | splits (rows) | env | reward |\n|---|---|---|---|---|---|\n")
	for _, e := range c.Datasets {
		name := "`" + e.Name + "`"
		if len(e.Aliases) > 0 {
			name += " (" + strings.Join(e.Aliases, ", ") + ")"
		}
		cfg := strings.Join(e.ConfigList(), ", ")
		if len(e.Configs) > 0 {
			cfg = fmt.Sprintf("%d configs, together", len(e.Configs))
		}
		if cfg == "" {
			cfg = "default"
		}
		var splits []string
		for _, s := range e.Splits {
			if n, ok := e.Rows[s]; ok {
				splits = append(splits, fmt.Sprintf("%s (%d)", s, n))
			} else {
				splits = append(splits, s)
			}
		}
		fmt.Fprintf(&b, "| %s | [%s](https://huggingface.co/datasets/%s) | %s | %s | %s | %s |\n", name, e.Repo, e.Repo, cfg, strings.Join(splits, ", "), e.Env, e.Reward)
	}
	return b.String()
}
