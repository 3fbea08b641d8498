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
	"agents":    agent.Registry.List,
	"envs":      env.Registry.List,
	"workflows": workflow.Registry.List,
	"rewards":   reward.Registry.List,
	"tools":     tool.Registry.List,
}

var listKinds = []string{"agents", "envs", "workflows", "rewards", "tools"}

type listOptions struct {
	kind   string
	output string
	args   string
}

func newListCmd(a *App) *cobra.Command {
	opts := &listOptions{}
	cmd := &cobra.Command{
		Use:   "list agents|envs|workflows|rewards|tools | list --args NAME",
		Short: "List the registered agents, envs, workflows, reward functions or tools and their args",
		Example: `  rllm list envs
  rllm list rewards --output json
  rllm list --args frozenlake`,
		ValidArgs: listKinds,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.output = a.resultFormat(outputText)
			if opts.args != "" {
				if len(args) > 1 {
					return usagef("rllm list --args NAME takes at most one kind (%s), got %d arguments", strings.Join(listKinds, ", "), len(args))
				}
				if len(args) == 1 {
					opts.kind = args[0]
				}
				return runListArgs(a, opts)
			}
			if len(args) != 1 {
				return usagef("rllm list needs one of: %s (or --args NAME)", strings.Join(listKinds, ", "))
			}
			opts.kind = args[0]
			return runList(a, opts)
		},
	}
	cmd.Flags().StringVar(&opts.args, "args", "", "print the arguments of the agent, env, workflow, reward or tool `NAME` (a kind first narrows it: rllm list envs --args NAME)")
	return cmd
}

// runListArgs prints the arguments of every component called opts.args
// (an agent and an env often share a name), or of the one of kind
// opts.kind.
func runListArgs(a *App, opts *listOptions) error {
	type found struct {
		Kind string `json:"kind"`
		registry.Info
	}
	var hits []found
	var names []string
	for _, k := range listKinds {
		if opts.kind != "" && k != opts.kind {
			continue
		}
		for _, in := range listings[k]() {
			names = append(names, in.Name)
			if in.Name == opts.args {
				hits = append(hits, found{Kind: strings.TrimSuffix(k, "s"), Info: in})
			}
		}
	}
	if opts.kind != "" && listings[opts.kind] == nil {
		return usagef("rllm list does not know %q; use one of: %s", opts.kind, strings.Join(listKinds, ", "))
	}
	if len(hits) == 0 {
		msg := fmt.Sprintf("no %s is called %q", strings.Join(kindsOr(opts.kind), ", "), opts.args)
		if s := registry.Suggest(opts.args, names); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		return usagef("%s", msg)
	}
	if opts.output == "json" {
		return writeJSON(a, hits)
	}
	w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	for i, h := range hits {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s %s: %s\n", h.Kind, h.Name, h.Description)
		if len(h.Args) == 0 {
			fmt.Fprintln(w, "  (no arguments)")
			continue
		}
		fmt.Fprintln(w, "  ARG\tTYPE\tDEFAULT\tRANGE\tTASK ROW\tDOC")
		for _, arg := range h.Args {
			row := ""
			if arg.FromTask {
				row = "yes"
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\n", arg.Name, arg.Type, formatDefault(arg.Default), orDash(arg.Range), orDash(row), arg.Doc)
		}
	}
	return w.Flush()
}

func kindsOr(kind string) []string {
	if kind != "" {
		return []string{strings.TrimSuffix(kind, "s")}
	}
	return []string{"agent", "env", "workflow", "reward", "tool"}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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
		return writeJSON(a, infos)
	}
	w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	for _, in := range infos {
		fmt.Fprintf(w, "%s\t%s\n", in.Name, in.Description)
		for _, arg := range in.Args {
			rng := ""
			if arg.Range != "" {
				rng = ", in " + arg.Range
			}
			fmt.Fprintf(w, "  %s\t%s (default %s%s)\t%s\n", arg.Name, arg.Type, formatDefault(arg.Default), rng, arg.Doc)
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
	case []string:
		if x == nil {
			return "none"
		}
	case map[string]string:
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
