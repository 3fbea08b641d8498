package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/harness"
)

// harnessDir is where harnesses are installed: --dir, else rllm's cache.
func harnessDir(a *App, dir string) string {
	if dir != "" {
		return dir
	}
	getenv := a.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return harness.CacheDir(getenv, os.Geteuid())
}

type harnessOptions struct {
	dir string
}

func (o *harnessOptions) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.dir, "dir", "", "`DIR` harnesses are installed in (default: rllm's cache, $XDG_CACHE_HOME/rllm/harnesses; /var/cache/rllm/harnesses for root)")
}

func newHarnessCmd(a *App) *cobra.Command {
	return newGroupCmd("harness", "List, show and install the coding harnesses workflow.name=harness runs",
		newHarnessListCmd(a), newHarnessShowCmd(a), newHarnessInstallCmd(a))
}

func newHarnessListCmd(a *App) *cobra.Command {
	opts := &harnessOptions{}
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List the registered harnesses, their pinned versions and whether they are installed",
		Example: `  rllm harness list`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runHarnessList(a, opts)
		},
	}
	opts.register(cmd)
	return cmd
}

type harnessRow struct {
	harness.Entry
	Installed bool   `json:"installed"`
	Dir       string `json:"dir"`
}

func runHarnessList(a *App, opts *harnessOptions) error {
	dir := harnessDir(a, opts.dir)
	var rows []harnessRow
	for _, e := range harness.Entries {
		rows = append(rows, harnessRow{Entry: e, Installed: e.Installed(dir), Dir: e.Dir(dir)})
	}
	if a.jsonResults() {
		enc := json.NewEncoder(a.Stdout)
		for _, r := range rows {
			if err := enc.Encode(map[string]any{"name": r.Name, "package": r.Package, "version": r.Version, "installer": r.Installer,
				"wire": r.Wire, "installed": r.Installed, "dir": r.Dir}); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tPACKAGE\tVERSION\tWIRE\tSIZE\tINSTALLED")
	for _, r := range rows {
		inst := "no"
		if r.Installed {
			inst = "yes"
		}
		fmt.Fprintf(w, "%s\t%s %s\t%s\t%s\t~%d MB\t%s\n", r.Name, r.Installer, r.Package, r.Version, r.Wire, r.SizeMB, inst)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.Stderr, "rllm: harnesses install into %s (rllm harness install NAME)\n", dir)
	return nil
}

func newHarnessShowCmd(a *App) *cobra.Command {
	opts := &harnessOptions{}
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Print a harness's entry: package, version, wire format, environment, files and headless command",
		Example: `  rllm harness show claude-code
  rllm harness show codex --output json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("rllm harness show needs one harness: %s", strings.Join(harness.Names(), ", "))
			}
			return runHarnessShow(a, opts, args[0])
		},
	}
	opts.register(cmd)
	return cmd
}

func runHarnessShow(a *App, opts *harnessOptions, name string) error {
	e, err := harness.Lookup(name)
	if err != nil {
		return usagef("%v", err)
	}
	dir := harnessDir(a, opts.dir)
	row := harnessRow{Entry: e, Installed: e.Installed(dir), Dir: e.Dir(dir)}
	b, err := json.MarshalIndent(row, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.Stdout, "%s\n", b)
	return err
}

func newHarnessInstallCmd(a *App) *cobra.Command {
	opts := &harnessOptions{}
	cmd := &cobra.Command{
		Use:   "install NAME...",
		Short: "Install harnesses at their pinned versions (npm, or pip in a virtualenv) into rllm's cache",
		Example: `  rllm harness install pi qwen-code
  rllm harness install claude-code --dir harnesses`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("rllm harness install needs one or more harnesses: %s", strings.Join(harness.Names(), ", "))
			}
			return runHarnessInstall(a, cmd, opts, args)
		},
	}
	opts.register(cmd)
	return cmd
}

func runHarnessInstall(a *App, cmd *cobra.Command, opts *harnessOptions, names []string) error {
	var entries []harness.Entry
	for _, n := range names {
		e, err := harness.Lookup(n)
		if err != nil {
			return usagef("%v", err)
		}
		entries = append(entries, e)
	}
	dir := harnessDir(a, opts.dir)
	t := harness.Tools{}
	if p, err := exec.LookPath("npm"); err == nil {
		t.NPM = p
	}
	if p, err := exec.LookPath("python3"); err == nil {
		t.Python = p
	}
	if a.Environ != nil {
		t.Env = a.Environ()
	}
	for _, e := range entries {
		if e.Installed(dir) {
			fmt.Fprintf(a.Stderr, "rllm: %s %s is installed in %s\n", e.Name, e.Version, e.Dir(dir))
			continue
		}
		fmt.Fprintf(a.Stderr, "rllm: installing %s (%s %s@%s, ~%d MB) into %s\n", e.Name, e.Installer, e.Package, e.Version, e.SizeMB, e.Dir(dir))
		if err := harness.Install(cmd.Context(), dir, e, t, a.Stderr); err != nil {
			return err
		}
		fmt.Fprintf(a.Stdout, "%s %s installed in %s\n", e.Name, e.Version, e.Dir(dir))
	}
	return nil
}
