package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/dataset/catalog"
	"github.com/rllm-org/rllm-go/pkg/hub"
)

type datasetPullOptions struct {
	config configFlags
	split  string
	name   string
	force  bool
}

func newDatasetPullCmd(a *App) *cobra.Command {
	opts := &datasetPullOptions{}
	cmd := &cobra.Command{
		Use:   "pull NAME|hf://datasets/ORG/NAME[@REV][/CONFIG][/SPLIT] [--split SPLIT] [key=value ...]",
		Short: "Download a dataset of the catalog (or any Hub dataset), map it to task fields and register it",
		Long: `Pull a dataset from the Hugging Face Hub into the registry: rllm dataset list
shows the catalog; any Hub dataset can be named as an hf:// URI (with
data.field_map=... to map its columns). Files are kept in Hugging Face's own
cache (HF_HUB_CACHE, HF_HOME), shared with Python; HF_ENDPOINT, HF_TOKEN and
HF_HUB_OFFLINE=1 are honoured as huggingface_hub honours them. The result is
registered under its name, so data.train_files=[NAME] works.`,
		Example: `  rllm dataset pull gsm8k
  rllm dataset pull math500 --split test
  rllm dataset pull hf://datasets/openai/gsm8k/main/train --name gsm8k-main`,
		RunE: func(cmd *cobra.Command, args []string) error {
			pos, overrides := splitOverrides(args)
			if len(pos) != 1 {
				return usagef("rllm dataset pull needs one catalog NAME or hf:// URI, e.g. rllm dataset pull gsm8k")
			}
			return runDatasetPull(cmd.Context(), a, opts, pos[0], overrides)
		},
	}
	opts.config.register(cmd)
	cmd.Flags().StringVar(&opts.split, "split", "", "pull only this split")
	cmd.Flags().StringVar(&opts.name, "name", "", "register under this name (default: the catalog name, or the Hub dataset's NAME)")
	cmd.Flags().BoolVar(&opts.force, "force", false, "replace splits registered from a file of your own")
	return cmd
}

func runDatasetPull(ctx context.Context, a *App, opts *datasetPullOptions, arg string, overrides []string) error {
	ld, err := opts.config.load(a, overrides)
	if err != nil {
		return err
	}
	reg, err := catalog.Open(ld.Config.Data.DatasetsDir)
	if err != nil {
		return err
	}
	src, name, err := hubSourceFor(arg, ld.Config.Data.FieldMap)
	if err != nil {
		return err
	}
	if opts.name != "" {
		name = opts.name
	}
	if err := catalog.CheckName("dataset", name); err != nil {
		return usagef("%v; pass --name NAME", err)
	}
	if opts.split != "" {
		src.Split = opts.split
	}
	p, err := hubClient(a).Pull(ctx, src)
	if err != nil {
		return err
	}
	have, _ := reg.Show(name)
	config := strings.Join(p.Configs, ",")
	var results []map[string]any
	for _, split := range p.SplitNames() {
		old, exists := have.Splits[split]
		force := opts.force || (exists && strings.HasPrefix(old.Source, "hf://"))
		uri := sourceURI(p, config, split)
		sp, err := reg.RegisterRows(ctx, name, split, p.Splits[split], uri, force)
		if err != nil {
			return err
		}
		results = append(results, map[string]any{"registered": name + ":" + split, "rows": sp.Rows, "source": uri, "commit": p.Commit, "revision": p.Revision, "files": p.Files[split]})
		if !a.jsonResults() {
			fmt.Fprintf(a.Stdout, "pulled %s:%s: %d rows from %s\n", name, split, sp.Rows, uri)
		}
	}
	if a.jsonResults() {
		return writeJSON(a, results)
	}
	return nil
}

// printCatalog writes rllm's catalog, marking what is registered.
func printCatalog(a *App, local []catalog.Info) {
	if a.jsonResults() {
		return
	}
	have := map[string]bool{}
	for _, in := range local {
		have[in.Name] = true
	}
	w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CATALOG\tREPO\tENV\tSPLITS\tLOCAL")
	for _, e := range hub.Builtin().Datasets {
		mark := "-"
		if have[e.Name] {
			mark = "pulled"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.Name, e.Repo, e.Env, strings.Join(e.Splits, ","), mark)
	}
	w.Flush()
}

// showCatalogEntry describes a catalog dataset not pulled yet.
func showCatalogEntry(a *App, e hub.Entry) error {
	if a.jsonResults() {
		return writeJSON(a, e)
	}
	w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "name\t%s (not pulled: rllm dataset pull %s)\n", e.Name, e.Name)
	fmt.Fprintf(w, "repo\t%s\n", e.Repo)
	fmt.Fprintf(w, "revision\t%s\n", e.Revision)
	if cf := strings.Join(e.ConfigList(), ","); cf != "" {
		fmt.Fprintf(w, "config\t%s\n", cf)
	}
	fmt.Fprintf(w, "splits\t%s\n", strings.Join(e.Splits, ", "))
	fmt.Fprintf(w, "env\t%s (reward %s)\n", e.Env, e.Reward)
	for _, k := range slices.Sorted(maps.Keys(e.Fields)) {
		fmt.Fprintf(w, "field %s\t%s\n", k, e.Fields[k])
	}
	return w.Flush()
}

// showFirstRow prints one row of a registered dataset.
func showFirstRow(ctx context.Context, a *App, c *catalog.Catalog, in catalog.Info) error {
	names := in.SplitNames()
	if len(names) == 0 {
		return nil
	}
	p, err := c.Path(in.Name + ":" + names[0])
	if err != nil {
		return nil // said in the table (changed since registered)
	}
	rows, err := dataset.ReadAll(ctx, p, dataset.Options{})
	if err != nil || len(rows) == 0 {
		return err
	}
	b, err := json.Marshal(rows[0])
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.Stdout, "\nrow 0 of %s:\n%s\n", names[0], b)
	return err
}
