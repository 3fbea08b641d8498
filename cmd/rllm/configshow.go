package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

type configShowOptions struct {
	config configFlags
	args   []string
	output string
	origin bool
	doc    string
}

func newConfigShowCmd(a *App) *cobra.Command {
	opts := &configShowOptions{}
	cmd := &cobra.Command{
		Use:   "show [key=value ...]",
		Short: "Print the resolved configuration (YAML, or JSON with --output json)",
		Example: `  rllm config show
  rllm config show --origin --config my.yaml rollout.n=4
  rllm config show --output json
  rllm config show --doc data.train_batch_size
  rllm config show --doc rollout.retry`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.output = a.resultFormat("yaml")
			opts.args = args
			if opts.doc != "" {
				return runConfigDoc(a, opts.doc)
			}
			return runConfigShow(a, opts)
		},
		ValidArgsFunction: completeConfigKeys,
	}
	opts.config.register(cmd)
	cmd.Flags().BoolVar(&opts.origin, "origin", false, "show which layer set each key (file:line, variable, --set)")
	cmd.Flags().StringVar(&opts.doc, "doc", "", "print a `KEY`'s meaning, default and range (a section prints all its keys)")
	_ = cmd.RegisterFlagCompletionFunc("doc", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return config.Keys(), cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func runConfigShow(a *App, opts *configShowOptions) error {
	ld, err := opts.config.load(a, opts.args)
	if err != nil {
		return err
	}
	var out []byte
	if opts.output == "json" {
		// One line: --output json promises one JSON object per line.
		if out, err = ld.JSON(opts.origin); err == nil {
			var b bytes.Buffer
			if err = json.Compact(&b, out); err == nil {
				out = append(b.Bytes(), '\n')
			}
		}
	} else {
		out, err = ld.YAML(opts.origin)
	}
	if err != nil {
		return err
	}
	_, err = a.Stdout.Write(out)
	return err
}

// runConfigDoc prints what configs/default.yaml and the validator say of
// a key: its meaning, default, type and range.
func runConfigDoc(a *App, key string) error {
	docs, err := config.Doc(key)
	if err != nil {
		return usererr.Wrap(err)
	}
	if a.jsonResults() {
		return writeJSON(a, docs)
	}
	var b strings.Builder
	for i, d := range docs {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s\n  %s\n  default: %s\n  type:    %s\n", d.Key, d.Doc, d.Default, d.Type)
		if len(d.Range) > 0 {
			fmt.Fprintf(&b, "  range:   %s\n", strings.Join(d.Range, "; "))
		}
	}
	_, err = io.WriteString(a.Stdout, b.String())
	return err
}
