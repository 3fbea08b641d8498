package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/reward"
	"github.com/rllm-org/rllm-go/pkg/tool"
	"github.com/rllm-org/rllm-go/pkg/workflow"

	_ "github.com/rllm-org/rllm-go/pkg/tasks" // registers the built-in tasks
)

// listings maps what `rllm list` accepts to its registry.
var listings = map[string]func() []registry.Info{
	"agents":    agent.List,
	"envs":      env.List,
	"workflows": workflow.List,
	"rewards":   reward.List,
	"tools":     tool.List,
}

var listKinds = []string{"agents", "envs", "workflows", "rewards", "tools"}

type listOptions struct {
	kind   string
	output string
}

func newListCmd(a *App) *cobra.Command {
	opts := &listOptions{}
	cmd := &cobra.Command{
		Use:   "list agents|envs|workflows|rewards|tools",
		Short: "List the registered agents, envs, workflows, reward functions or tools and their args",
		Example: `  rllm list envs
  rllm list rewards --output json`,
		ValidArgs: listKinds,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("rllm list needs one of: %s", strings.Join(listKinds, ", "))
			}
			opts.kind = args[0]
			opts.output = outputText
			if a.jsonResults() {
				opts.output = outputJSON
			}
			return runList(a, opts)
		},
	}
	return cmd
}

func runList(a *App, opts *listOptions) error {
	list, ok := listings[opts.kind]
	if !ok {
		msg := fmt.Sprintf("rllm list does not know %q; use one of: %s", opts.kind, strings.Join(listKinds, ", "))
		if s := registry.Suggest(opts.kind, listKinds); s != "" {
			msg = fmt.Sprintf("rllm list does not know %q; did you mean %q?", opts.kind, s)
		}
		return usagef("%s", msg)
	}
	infos := list()
	if opts.output == "json" {
		enc := json.NewEncoder(a.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(infos)
	}
	w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	for _, in := range infos {
		fmt.Fprintf(w, "%s\t%s\n", in.Name, in.Description)
		for _, arg := range in.Args {
			fmt.Fprintf(w, "  %s\t%s (default %s)\t%s\n", arg.Name, arg.Type, formatDefault(arg.Default), arg.Doc)
		}
	}
	return w.Flush()
}

func formatDefault(v any) string {
	switch x := v.(type) {
	case nil:
		return "none"
	case string:
		if x == "" {
			return `""`
		}
		if len(x) > 40 || strings.Contains(x, "\n") {
			x = strings.ReplaceAll(x, "\n", " ")
			if len(x) > 40 {
				x = x[:37] + "..."
			}
		}
		return fmt.Sprintf("%q", x)
	case []any:
		if x == nil {
			return "none"
		}
	case map[string]any:
		if x == nil {
			return "none"
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
