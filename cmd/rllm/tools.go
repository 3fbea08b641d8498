package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/tool"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// toolConfig is the tools section of the config as pkg/tool takes it;
// stdio MCP servers start from the App's environment (filtered there).
// The python tool runs in the sandbox the config sets (sandbox.*).
func toolConfig(a *App, c *config.Config) tool.Config {
	sandbox.Configure(workflow.SandboxConfig(c))
	tc := tool.Config{Builtin: c.Tools.Builtin, Args: c.Tools.Args, MCP: c.Tools.MCP, CallTimeoutS: c.Tools.CallTimeoutS}
	if a.Environ != nil {
		tc.Environ = a.Environ()
	}
	return tc
}

type toolsListOptions struct {
	config configFlags
	output string
}

func newToolsListCmd(a *App) *cobra.Command {
	opts := &toolsListOptions{}
	cmd := &cobra.Command{
		Use:   "list [key=value ...]",
		Short: "Connect to the configured MCP servers and print every tool's name and description",
		Example: `  rllm tools list tools.builtin=[calculator]
  rllm tools list --config tools.yaml --output json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.output = a.resultFormat(outputText)
			return runToolsList(cmd.Context(), a, opts, args)
		},
	}
	opts.config.register(cmd)
	return cmd
}

func openTools(ctx context.Context, a *App, cf *configFlags, args []string) (*tool.Set, error) {
	ld, err := cf.load(a, args)
	if err != nil {
		return nil, err
	}
	tc := toolConfig(a, ld.Config)
	if tc.Empty() {
		return nil, usagef("no tools are configured; set tools.builtin (e.g. tools.builtin=[calculator]) or tools.mcp")
	}
	s, err := tool.Open(ctx, tc)
	if err != nil {
		return nil, withOrigins(ld, err)
	}
	return s, nil
}

func runToolsList(ctx context.Context, a *App, opts *toolsListOptions, args []string) error {
	s, err := openTools(ctx, a, &opts.config, args)
	if err != nil {
		return err
	}
	defer s.Close()
	type item struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		From        string          `json:"from"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	items := []item{}
	for _, sp := range s.Specs() {
		items = append(items, item{Name: sp.Function.Name, Description: sp.Function.Description, From: s.Origin(sp.Function.Name), Parameters: sp.Function.Parameters})
	}
	if opts.output == "json" {
		return writeJSON(a, items)
	}
	w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	for _, it := range items {
		fmt.Fprintf(w, "%s\t%s\t(%s)\n", it.Name, strings.ReplaceAll(it.Description, "\n", " "), it.From)
	}
	return w.Flush()
}

type toolsCallOptions struct {
	config configFlags
}

func newToolsCallCmd(a *App) *cobra.Command {
	opts := &toolsCallOptions{}
	cmd := &cobra.Command{
		Use:   "call NAME 'JSON-ARGS' [key=value ...]",
		Short: "Call one tool as the model would and print its result",
		Long: `Call one tool with JSON arguments and print the text it returns. A result
the tool marks as an error (MCP's isError, which is how servers report bad
arguments), an unknown tool or arguments that are not JSON exit non-zero
with a line naming the problem.`,
		Example: `  rllm tools call calculator '{"expression": "2/3 + 1/6"}' tools.builtin=[calculator]`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 || strings.Contains(args[0], "=") {
				return usagef("rllm tools call needs a tool name and its JSON arguments, e.g. rllm tools call calculator '{\"expression\": \"1+2\"}'")
			}
			return runToolsCall(cmd.Context(), a, opts, args[0], args[1], args[2:])
		},
	}
	opts.config.register(cmd)
	return cmd
}

func runToolsCall(ctx context.Context, a *App, opts *toolsCallOptions, name, arguments string, args []string) error {
	var probe any
	if err := json.Unmarshal([]byte(arguments), &probe); err != nil {
		return usagef("the arguments of %s are not valid JSON: %v; write them as one JSON object, e.g. '{\"a\": 1}'", name, err)
	}
	s, err := openTools(ctx, a, &opts.config, args)
	if err != nil {
		return err
	}
	defer s.Close()
	known := false
	for _, n := range s.Names() {
		known = known || n == name
	}
	res, err := s.Call(ctx, name, arguments)
	if err != nil {
		return err
	}
	if !known {
		return usagef("%s", strings.TrimPrefix(res.Text, "error: "))
	}
	if res.IsError {
		return fmt.Errorf("tool %s reported an error: %s", name, strings.TrimPrefix(res.Text, "error: "))
	}
	_, err = fmt.Fprintln(a.Stdout, res.Text)
	return err
}
