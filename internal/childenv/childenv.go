// Package childenv builds the environment of the processes rllm starts
// (exec environments, stdio MCP servers): a short allowlist of what
// programs and Python/node installs need to find themselves, plus what
// the config names. Nothing else of rllm's environment is passed on, so
// an API key rllm holds never reaches a child (the reference MCP server's
// get-env tool would otherwise hand it to the model).
package childenv

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

// Allowed are the variables a child inherits from rllm without being
// named in the config.
var Allowed = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ",
	"TMPDIR", "TMP", "TEMP",
	// Python: pyenv, virtualenv/venv, conda, uv.
	"PYENV_ROOT", "PYENV_VERSION", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "CONDA_EXE", "UV_PYTHON",
	// node: nvm, volta, global modules.
	"NVM_DIR", "NVM_BIN", "VOLTA_HOME", "NODE_PATH",
	// Windows needs these to start anything.
	"SYSTEMROOT", "WINDIR", "COMSPEC", "PATHEXT",
}

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckName reports a variable name that cannot be set.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%q is not an environment variable name", name)
	}
	return nil
}

// Build returns the child's environment as KEY=value strings: the
// allowed variables and those in pass taken from parent (KEY=value
// strings, usually os.Environ()), then set, which wins. It is sorted, so
// the same config gives the same environment.
func Build(parent []string, pass []string, set map[string]string) []string {
	from := make(map[string]string, len(parent))
	for _, kv := range parent {
		if k, v, ok := strings.Cut(kv, "="); ok {
			from[k] = v
		}
	}
	out := map[string]string{}
	for _, k := range append(append([]string(nil), Allowed...), pass...) {
		if v, ok := from[k]; ok {
			out[k] = v
		}
	}
	return List(out, set)
}

// List returns the variables of layers as sorted KEY=value strings; a
// later layer's value wins.
func List(layers ...map[string]string) []string {
	merged := map[string]string{}
	for _, m := range layers {
		for k, v := range m {
			merged[k] = v
		}
	}
	list := make([]string, 0, len(merged))
	for k, v := range merged {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	return list
}

// FromProcess is Build over this process's own environment. Only the
// allowed and explicitly passed variables are read.
func FromProcess(pass []string, set map[string]string) []string {
	return Build(os.Environ(), pass, set)
}
