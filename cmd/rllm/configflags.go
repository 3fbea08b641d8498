package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/dataset/catalog"
)

// configFlags are the layering flags every command that reads the
// configuration shares: --config FILE, --set key=value, and bare
// key=value arguments (the Hydra habit of rLLM/verl users).
type configFlags struct {
	files []string
	sets  []string
	// hydra is what --config-name/--config-path were given: Hydra's
	// selectors of a Python entry point's own YAML, refused in one line.
	hydraName, hydraPath string
}

func (f *configFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVarP(&f.files, "config", "c", nil, "YAML config `FILE` layered over the defaults (repeatable; later files win)")
	cmd.Flags().StringArrayVar(&f.sets, "set", nil, "override one key: key=value, key+=value (append to a list) or ~key (delete) (repeatable)")
	_ = cmd.RegisterFlagCompletionFunc("set", completeConfigKeys)
	cmd.Flags().StringVar(&f.hydraName, "config-name", "", "Hydra's config selector (refused: use --config FILE)")
	cmd.Flags().StringVar(&f.hydraPath, "config-path", "", "Hydra's config directory (refused: use --config FILE)")
	_ = cmd.Flags().MarkHidden("config-name")
	_ = cmd.Flags().MarkHidden("config-path")
}

// load resolves the configuration from the defaults, the flags, the
// environment and the bare arguments, printing notices to stderr.
func (f *configFlags) load(a *App, args []string) (*config.Loaded, error) {
	ld, err := f.loadAll(a, args)
	if err != nil {
		return nil, err
	}
	return ld, nil
}

// loadAll is load that also returns the configuration with the error
// when config.LoadAll does (keys refused, values all valid), so that
// validate-config and train can go on checking and report every problem
// at once; such a configuration must not run.
func (f *configFlags) loadAll(a *App, args []string) (*config.Loaded, error) {
	if f.hydraName != "" || f.hydraPath != "" {
		flag, v := "--config-name", f.hydraName
		if v == "" {
			flag, v = "--config-path", f.hydraPath
		}
		return nil, usagef("%s %s selects a Hydra config of a Python entry point, its own YAML; rllm has one configuration: give its settings as key=value arguments, or in a YAML file with --config FILE", flag, v)
	}
	for _, arg := range args {
		if !strings.Contains(arg, "=") && !strings.HasPrefix(arg, "~") {
			return nil, usagef("unexpected argument %q: overrides are written key=value (or --set key=value)", arg)
		}
	}
	var environ []string
	if a.Environ != nil {
		environ = a.Environ()
	}
	ld, err := config.LoadAll(config.Sources{
		Context:  a.ctx,
		Files:    f.files,
		ReadFile: a.ReadFile,
		Environ:  environ,
		Sets:     f.sets,
		Args:     args,
	})
	if ld == nil {
		return nil, err
	}
	for _, n := range ld.Notices {
		a.notef("%s", n)
	}
	if a.Getenv != nil {
		ld.Config.Data.DatasetsDir = catalog.FollowXDG(ld.Config.Data.DatasetsDir, a.Getenv("XDG_DATA_HOME"))
	}
	// The harness workflow finds its installs where rllm harness install
	// put them, unless workflow.args.dir says otherwise.
	if w := &ld.Config.Workflow; w.Name == "harness" {
		if d, _ := w.Args["dir"].(string); d == "" {
			if w.Args == nil {
				w.Args = map[string]any{}
			}
			w.Args["dir"] = harnessDir(a, "")
		}
	}
	return ld, err
}

func completeConfigKeys(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	var out []string
	for _, k := range config.Keys() {
		if strings.HasPrefix(k, toComplete) {
			out = append(out, k+"=")
		}
	}
	return out, cobra.ShellCompDirectiveNoSpace
}
