// Package harness is rllm's registry of coding harnesses (Codex, Claude
// Code, OpenCode, Qwen Code, pi, and the pip ones): for each, the package
// and pinned version to install, the files and environment that point it
// at one gateway session and nothing else, and its headless command line.
// An entry is data; one code path installs them all (Install) and one
// renders any of them for a session (Entry.Render). The harness workflow
// (pkg/workflow/harness) runs them.
package harness

import (
	"fmt"
	"slices"
	"strings"
)

// Installers an entry names.
const (
	NPM = "npm"
	Pip = "pip"
)

// Wire formats a harness speaks to the model.
const (
	WireChat      = "chat.completions"
	WireMessages  = "messages"
	WireResponses = "responses"
)

// Entry is one harness.
type Entry struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Installer is npm or pip.
	Installer string `json:"installer"`
	Package   string `json:"package"`
	Version   string `json:"version"`
	// Node, for npm harnesses that need a newer Node than a machine may
	// have, is the version of npm's `node` package installed beside them
	// (its binary comes first on the harness's PATH).
	Node string `json:"node,omitempty"`
	// Bin is the program the package installs (node_modules/.bin/BIN,
	// or bin/BIN of a pip install).
	Bin string `json:"bin"`
	// Model is the model name the harness is told; empty is "policy".
	// The gateway answers with the session's model whatever a client
	// names; some harnesses accept only names they know.
	Model string `json:"model,omitempty"`
	// Wire is the API it calls the model with.
	Wire string `json:"wire"`
	// Env is its environment, templated (see Session).
	Env map[string]string `json:"env"`
	// Files are written under the sandbox's home before it starts,
	// templated.
	Files []File `json:"files,omitempty"`
	// Command is the headless command line, each argument templated;
	// {{.Prompt}} is the task's instruction, as one argument.
	Command []string `json:"command"`
	// Calls says what it calls besides the agent's own turns.
	Calls string `json:"calls"`
	// SizeMB is about what the install takes on disk.
	SizeMB int `json:"size_mb"`
}

// File is a file an entry writes, relative to the sandbox's home.
type File struct {
	Path     string `json:"path"`
	Template string `json:"template"`
}

// The model name every harness is told to use: the gateway answers with
// the session's model whatever a client names, so this only has to be a
// name each harness accepts for a custom provider.
const modelName = "policy"

// Entries are the registered harnesses, by name.
var Entries = []Entry{
	{
		Name: "claude-code", Description: "Anthropic's Claude Code CLI (native binary)",
		Installer: NPM, Package: "@anthropic-ai/claude-code", Version: "2.1.332", Node: "22.23.3", Bin: "claude", Model: "claude-sonnet-4-5",
		Wire: WireMessages, SizeMB: 570,
		Env: map[string]string{
			"ANTHROPIC_BASE_URL":   "{{.AnthropicURL}}",
			"ANTHROPIC_AUTH_TOKEN": "{{.Key}}",
			// Every alias is the session's model: small-model probes and
			// subagents go to the same policy.
			"ANTHROPIC_MODEL":                          "{{.Model}}",
			"ANTHROPIC_SMALL_FAST_MODEL":               "{{.Model}}",
			"ANTHROPIC_DEFAULT_SONNET_MODEL":           "{{.Model}}",
			"ANTHROPIC_DEFAULT_OPUS_MODEL":             "{{.Model}}",
			"ANTHROPIC_DEFAULT_HAIKU_MODEL":            "{{.Model}}",
			"CLAUDE_CODE_SUBAGENT_MODEL":               "{{.Model}}",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
			"DISABLE_TELEMETRY":                        "1",
			"DISABLE_AUTOUPDATER":                      "1",
			"DISABLE_ERROR_REPORTING":                  "1",
			"DISABLE_BUG_COMMAND":                      "1",
			"CLAUDE_CODE_DISABLE_TERMINAL_TITLE":       "1",
			"CLAUDE_CONFIG_DIR":                        "{{.Home}}/.claude",
			"IS_SANDBOX":                               "1",
		},
		Command: []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions", "--model", "{{.Model}}", "--", "{{.Prompt}}"},
		Calls:   "count_tokens before long prompts; small-model calls (a session title, a topic probe) with no tools",
	},
	{
		Name: "codex", Description: "OpenAI's Codex CLI (native binary)",
		Installer: NPM, Package: "@openai/codex", Version: "0.171.0", Bin: "codex",
		Wire: WireResponses, SizeMB: 444,
		Env: map[string]string{
			"CODEX_HOME":         "{{.Home}}/.codex",
			"RLLM_API_KEY":       "{{.Key}}",
			"NO_UPDATE_NOTIFIER": "1",
		},
		Files: []File{{Path: ".codex/config.toml", Template: `model = {{json .Model}}
model_provider = "rllm"
check_for_update_on_startup = false
# Hosted tools run on OpenAI's side; the gateway has none.
web_search = "disabled"

[model_providers.rllm]
name = "rllm gateway session"
base_url = {{json .BaseURL}}
env_key = "RLLM_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[otel]
exporter = "none"

# Tool namespaces (sub-agents) and goal tools are not function tools a
# policy is trained to call; off.
[features]
multi_agent = false
goals = false
`}},
		Command: []string{"codex", "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--model", "{{.Model}}", "--", "{{.Prompt}}"},
		Calls:   "the Responses API only (a custom provider: the built-in one tries websockets first)",
	},
	{
		Name: "opencode", Description: "OpenCode (native binary)",
		Installer: NPM, Package: "opencode-ai", Version: "1.18.33", Bin: "opencode",
		Wire: WireChat, SizeMB: 354,
		Env: map[string]string{
			"OPENCODE_CONFIG":                  "{{.Home}}/opencode.json",
			"OPENCODE_DISABLE_MODELS_FETCH":    "1",
			"OPENCODE_DISABLE_AUTOUPDATE":      "1",
			"OPENCODE_DISABLE_SHARE":           "1",
			"OPENCODE_DISABLE_LSP_DOWNLOAD":    "1",
			"OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
			"OPENCODE_DISABLE_CLAUDE_CODE":     "1",
			"OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
			"OPENCODE_DISABLE_EMBEDDED_WEB_UI": "1",
			"XDG_CONFIG_HOME":                  "{{.Home}}/.config",
			"XDG_DATA_HOME":                    "{{.Home}}/.local/share",
			"XDG_CACHE_HOME":                   "{{.Home}}/.cache",
			"XDG_STATE_HOME":                   "{{.Home}}/.local/state",
		},
		Files: []File{{Path: "opencode.json", Template: `{
  "$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "model": "rllm/{{.Model}}",
  "small_model": "rllm/{{.Model}}",
  "provider": {
    "rllm": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "rllm gateway session",
      "options": {"baseURL": {{json .BaseURL}}, "apiKey": {{json .Key}}},
      "models": {{printf "{%q: {\"name\": %q, \"tool_call\": true}}" .Model .Model}}
    }
  }
}
`}},
		Command: []string{"opencode", "run", "--model", "rllm/{{.Model}}", "--", "{{.Prompt}}"},
		Calls:   "a call without tools to title the session",
	},
	{
		Name: "qwen-code", Description: "Qwen Code (a JS bundle)",
		Installer: NPM, Package: "@qwen-code/qwen-code", Version: "0.24.4", Node: "22.23.3", Bin: "qwen",
		Wire: WireChat, SizeMB: 329,
		Env: map[string]string{
			"OPENAI_BASE_URL": "{{.BaseURL}}",
			"OPENAI_API_KEY":  "{{.Key}}",
			"OPENAI_MODEL":    "{{.Model}}",
		},
		Files: []File{{Path: ".qwen/settings.json", Template: `{
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false},
  "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
  "tools": {"shell": {"enableInteractiveShell": true}},
  "security": {"auth": {"selectedType": "openai"}},
  "model": {"name": {{json .Model}}}
}
`}},
		Command: []string{"qwen", "-p", "{{.Prompt}}", "--yolo", "--output-format", "json"},
		Calls:   "calls without tools (a next-speaker check, loop detection) besides its agent turns",
	},
	{
		Name: "pi", Description: "pi, Mario Zechner's coding agent (plain JS)",
		Installer: NPM, Package: "@mariozechner/pi-coding-agent", Version: "0.73.1", Bin: "pi",
		Wire: WireChat, SizeMB: 204,
		Env: map[string]string{
			"PI_CODING_AGENT_DIR":   "{{.Home}}/.pi/agent",
			"PI_OFFLINE":            "1",
			"PI_SKIP_VERSION_CHECK": "1",
			"PI_TELEMETRY":          "0",
		},
		Files: []File{{Path: ".pi/agent/models.json", Template: `{
  "providers": {
    "rllm": {
      "baseUrl": {{json .BaseURL}},
      "api": "openai-completions",
      "apiKey": {{json .Key}},
      "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
      "models": [{"id": {{json .Model}}, "name": "rllm policy", "reasoning": false}]
    }
  }
}
`}, {Path: ".pi/agent/settings.json", Template: `{"enableInstallTelemetry": false}
`}},
		Command: []string{"pi", "-p", "--provider", "rllm", "--model", "{{.Model}}", "--no-session", "--mode", "json", "{{.Prompt}}"},
		Calls:   "nothing but its agent turns",
	},
	{
		Name: "mini-swe-agent", Description: "mini-swe-agent (Python, litellm)",
		Installer: Pip, Package: "mini-swe-agent", Version: "1.17.5", Bin: "mini",
		Wire: WireChat, SizeMB: 120,
		Env: map[string]string{
			"MSWEA_CONFIG_DIR":             "{{.Home}}/.config/mini-swe-agent",
			"MSWEA_MODEL_NAME":             "openai/{{.Model}}",
			"OPENAI_API_BASE":              "{{.BaseURL}}",
			"OPENAI_API_KEY":               "{{.Key}}",
			"MSWEA_CONFIGURED":             "true",
			"LITELLM_LOCAL_MODEL_COST_MAP": "True",
		},
		Command: []string{"mini", "-y", "--exit-immediately", "-t", "{{.Prompt}}"},
		Calls:   "nothing but its agent turns",
	},
	{
		Name: "aider", Description: "aider (Python, litellm)",
		Installer: Pip, Package: "aider-chat", Version: "0.86.1", Bin: "aider",
		Wire: WireChat, SizeMB: 400,
		Env: map[string]string{
			"OPENAI_API_BASE":              "{{.BaseURL}}",
			"OPENAI_API_KEY":               "{{.Key}}",
			"AIDER_ANALYTICS":              "false",
			"AIDER_CHECK_UPDATE":           "false",
			"LITELLM_LOCAL_MODEL_COST_MAP": "True",
		},
		Command: []string{"aider", "--model", "openai/{{.Model}}", "--yes-always", "--no-git", "--no-show-model-warnings", "--message", "{{.Prompt}}"},
		Calls:   "a weak-model call to write commit messages and summaries (the same model here)",
	},
}

// Lookup finds a harness by name; the error lists the registered ones.
func Lookup(name string) (Entry, error) {
	for _, e := range Entries {
		if e.Name == name {
			return e, nil
		}
	}
	return Entry{}, fmt.Errorf("%q is not a registered harness; use one of: %s", name, strings.Join(Names(), ", "))
}

// Names lists the registered harnesses.
func Names() []string {
	out := make([]string, len(Entries))
	for i, e := range Entries {
		out[i] = e.Name
	}
	slices.Sort(out)
	return out
}
