package main

import (
	"github.com/spf13/cobra"
)

func newConfigCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Inspect the resolved configuration",
	}
	cmd.AddCommand(newConfigShowCmd(a))
	return cmd
}

type configShowOptions struct {
	config configFlags
	args   []string
	output string
	origin bool
}

func newConfigShowCmd(a *App) *cobra.Command {
	opts := &configShowOptions{}
	cmd := &cobra.Command{
		Use:   "show [key=value ...]",
		Short: "Print the resolved configuration (YAML, or JSON with --output json)",
		Example: `  rllm config show
  rllm config show --origin --config my.yaml rollout.n=4
  rllm config show --output json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.output = "yaml"
			if a.jsonResults() {
				opts.output = outputJSON
			}
			opts.args = args
			return runConfigShow(a, opts)
		},
		ValidArgsFunction: completeConfigKeys,
	}
	opts.config.register(cmd)
	cmd.Flags().BoolVar(&opts.origin, "origin", false, "show which layer set each key (file:line, variable, --set)")
	return cmd
}

func runConfigShow(a *App, opts *configShowOptions) error {
	ld, err := opts.config.load(a, opts.args)
	if err != nil {
		return err
	}
	var out []byte
	if opts.output == "json" {
		out, err = ld.JSON(opts.origin)
	} else {
		out, err = ld.YAML(opts.origin)
	}
	if err != nil {
		return err
	}
	_, err = a.Stdout.Write(out)
	return err
}
