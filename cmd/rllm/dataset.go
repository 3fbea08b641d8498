package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/dataset/catalog"
	"github.com/rllm-org/rllm-go/pkg/hub"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

func newDatasetCmd(a *App) *cobra.Command {
	cmd := newGroupCmd("dataset", "Register datasets by name (kept as parquet under data.datasets_dir) for data.train_files and eval --data",
		newDatasetPullCmd(a), newDatasetRegisterCmd(a), newDatasetListCmd(a), newDatasetShowCmd(a), newDatasetRmCmd(a))
	cmd.Long = `The dataset registry: a dataset registered once under a name can be used
wherever a task file is expected: data.train_files=NAME (its train split),
data.val_files=NAME or rllm eval --data NAME (its test, val or validation
split), or NAME:SPLIT for any split. Datasets live under data.datasets_dir
(default ~/.rllm/datasets), each split converted once to parquet.
rllm dataset pull fetches the datasets of rllm's catalog (and any Hub
dataset, as hf://datasets/ORG/NAME) from the Hugging Face Hub.`
	return cmd
}

// openCatalog loads the config (for data.datasets_dir) and opens it.
func openCatalog(a *App, cf *configFlags, args []string) (*catalog.Catalog, error) {
	ld, err := cf.load(a, args)
	if err != nil {
		return nil, err
	}
	return catalog.Open(ld.Config.Data.DatasetsDir)
}

// openCatalogArgs parses the arguments of a dataset command that names
// datasets: exactly want positional ones (else usage is the error) and
// key=value overrides, which open the catalog.
func openCatalogArgs(a *App, cf *configFlags, args []string, want int, usage string) ([]string, *catalog.Catalog, error) {
	pos, overrides := splitOverrides(args)
	if len(pos) != want {
		return nil, nil, usagef("%s", usage)
	}
	c, err := openCatalog(a, cf, overrides)
	return pos, c, err
}

type datasetRegisterOptions struct {
	config configFlags
	split  string
	force  bool
}

func newDatasetRegisterCmd(a *App) *cobra.Command {
	opts := &datasetRegisterOptions{}
	cmd := &cobra.Command{
		Use:   "register NAME --split SPLIT FILE [key=value ...]",
		Short: "Copy a task file (parquet, jsonl, json, csv) into the registry as NAME's SPLIT",
		Example: `  rllm dataset register gsm8k --split train gsm8k_train.parquet
  rllm dataset register gsm8k --split test gsm8k_test.jsonl`,
		RunE: func(cmd *cobra.Command, args []string) error {
			pos, c, err := openCatalogArgs(a, &opts.config, args, 2, "rllm dataset register needs a NAME and a FILE, e.g. rllm dataset register gsm8k --split train train.parquet")
			if err != nil {
				return err
			}
			sp, err := c.Register(cmd.Context(), pos[0], opts.split, pos[1], opts.force)
			if err != nil {
				return err
			}
			if a.jsonResults() {
				return writeJSON(a, map[string]any{"registered": pos[0] + ":" + opts.split, "rows": sp.Rows, "columns": sp.Columns, "sha256": sp.SHA256})
			}
			_, err = fmt.Fprintf(a.Stdout, "registered %s:%s: %d rows, columns %s\n", pos[0], opts.split, sp.Rows, strings.Join(sp.Columns, ", "))
			return err
		},
	}
	opts.config.register(cmd)
	cmd.Flags().StringVar(&opts.split, "split", "train", "split name: train, test, val, ...")
	cmd.Flags().BoolVar(&opts.force, "force", false, "replace the split if it is already registered")
	return cmd
}

// splitOverrides separates positional arguments from key=value overrides:
// an argument is an override when it is KEY=VALUE with KEY shaped like a
// config key and no file of that name exists (a file a=b.jsonl stays a
// file).
func splitOverrides(args []string) (pos, overrides []string) {
	for _, a := range args {
		key, _, isKV := strings.Cut(a, "=")
		_, statErr := os.Stat(a)
		if isKV && overrideKey.MatchString(key) && statErr != nil {
			overrides = append(overrides, a)
		} else {
			pos = append(pos, a)
		}
	}
	return pos, overrides
}

// overrideKey is a config key as typed in key=value (dots, indices, +).
var overrideKey = regexp.MustCompile(`^\+{0,2}[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+|\[[0-9]+\])*$`)

type datasetListOptions struct {
	config configFlags
}

func newDatasetListCmd(a *App) *cobra.Command {
	opts := &datasetListOptions{}
	cmd := &cobra.Command{
		Use:   "list [key=value ...]",
		Short: "List the registered datasets, then rllm's catalog of Hub datasets (rllm dataset pull NAME)",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := openCatalog(a, &opts.config, args)
			if err != nil {
				return err
			}
			list, err := c.List()
			if err != nil {
				return err
			}
			if a.jsonResults() {
				if list == nil {
					list = []catalog.Info{}
				}
				return writeJSON(a, list)
			}
			defer printCatalog(a, list)
			if len(list) == 0 {
				fmt.Fprintf(a.Stderr, "rllm: no datasets are registered in %s\n", c.Dir)
				return nil
			}
			w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tSPLITS")
			for _, in := range list {
				if in.Damaged != "" {
					fmt.Fprintf(w, "%s\tdamaged dataset.json (%s); rllm dataset rm %s removes it\n", in.Name, in.Damaged, in.Name)
					continue
				}
				var parts []string
				for _, s := range in.SplitNames() {
					parts = append(parts, fmt.Sprintf("%s (%d rows)", s, in.Splits[s].Rows))
				}
				fmt.Fprintf(w, "%s\t%s\n", in.Name, strings.Join(parts, ", "))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.Stdout)
			return err
		},
	}
	opts.config.register(cmd)
	return cmd
}

// writeJSON writes a result as --output json promises: one JSON object
// per line; a list is one line per element (JSON Lines).
func writeJSON(a *App, v any) error {
	enc := json.NewEncoder(a.Stdout)
	enc.SetEscapeHTML(false)
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice {
		for i := range rv.Len() {
			if err := enc.Encode(rv.Index(i).Interface()); err != nil {
				return err
			}
		}
		return nil
	}
	return enc.Encode(v)
}

func newDatasetShowCmd(a *App) *cobra.Command {
	opts := &datasetListOptions{}
	cmd := &cobra.Command{
		Use:   "show NAME [key=value ...]",
		Short: "Show a registered dataset: its splits, rows, columns and sources",
		RunE: func(cmd *cobra.Command, args []string) error {
			pos, c, err := openCatalogArgs(a, &opts.config, args, 1, "rllm dataset show needs one dataset NAME")
			if err != nil {
				return err
			}
			in, err := c.Show(pos[0])
			if e, ok := hub.Builtin().Lookup(pos[0]); ok && err != nil && usererr.Is(err) {
				return showCatalogEntry(a, e) // not pulled yet: what a pull would register
			}
			if err != nil {
				return err
			}
			if a.jsonResults() {
				return writeJSON(a, in)
			}
			w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SPLIT\tROWS\tCOLUMNS\tSOURCE\tREGISTERED")
			for _, s := range in.SplitNames() {
				sp := in.Splits[s]
				when := sp.RegisteredAt.Format("2006-01-02 15:04:05Z")
				if sp.Changed {
					when += " (file changed since; register again with --force)"
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", s, sp.Rows, strings.Join(sp.Columns, ","), sp.Source, when)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			return showFirstRow(cmd.Context(), a, c, in)
		},
	}
	opts.config.register(cmd)
	return cmd
}

type datasetRmOptions struct {
	config configFlags
	split  string
}

func newDatasetRmCmd(a *App) *cobra.Command {
	opts := &datasetRmOptions{}
	cmd := &cobra.Command{
		Use:   "rm NAME [--split SPLIT] [key=value ...]",
		Short: "Remove a registered dataset, or one of its splits",
		RunE: func(cmd *cobra.Command, args []string) error {
			pos, c, err := openCatalogArgs(a, &opts.config, args, 1, "rllm dataset rm needs one dataset NAME")
			if err != nil {
				return err
			}
			if err := c.Remove(cmd.Context(), pos[0], opts.split); err != nil {
				return err
			}
			what := pos[0]
			if opts.split != "" {
				what += ":" + opts.split
			}
			if a.jsonResults() {
				return writeJSON(a, map[string]string{"removed": what})
			}
			_, err = fmt.Fprintf(a.Stdout, "removed %s\n", what)
			return err
		},
	}
	opts.config.register(cmd)
	cmd.Flags().StringVar(&opts.split, "split", "", "remove only this split")
	return cmd
}
