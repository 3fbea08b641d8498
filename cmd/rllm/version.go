package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and commit are set at build time:
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=$(git rev-parse HEAD)" ./cmd/rllm
//
// Without them, the module version and the VCS revision that the Go
// toolchain stamps into the binary are used (none under -buildvcs=false).
var (
	version = "dev"
	commit  = ""
)

type buildVersion struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func currentVersion() buildVersion {
	v := buildVersion{Version: version, Commit: commit, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if v.Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if v.Commit == "" {
				v.Commit = s.Value
			}
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// versionLine is what rllm --version and rllm version print:
// "rllm v1.2.3 (commit 0123abcd4567) linux/amd64 go1.26.8".
func versionLine() string {
	v := currentVersion()
	c := v.Commit
	switch {
	case c == "":
		c = "unknown"
	case len(c) > 12:
		c = c[:12]
	}
	if v.Modified {
		c += ", modified"
	}
	return fmt.Sprintf("rllm %s (commit %s) %s %s", v.Version, c, v.Platform, v.Go)
}

func newVersionCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the rllm version and the commit it was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runVersion(a)
		},
	}
}

func runVersion(a *App) error {
	if a.jsonResults() {
		b, err := json.Marshal(currentVersion())
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.Stdout, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintln(a.Stdout, versionLine())
	return err
}
