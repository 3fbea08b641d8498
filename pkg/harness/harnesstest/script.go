// Package harnesstest is a stand-in model for runs of real coding
// harnesses: a gatewaytest sampler scripted to do what a task asks with
// whatever tools the harness offers — write a file with its write tool,
// run a command with its shell tool, then answer — filling each tool's
// arguments by the names its JSON schema gives them.
package harnesstest

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/gateway/gatewaytest"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// Task is what the script does.
type Task struct {
	// Path is the file to create (absolute), Content its content.
	Path, Content string
	// Command is the shell command to run after.
	Command string
	// Answer is the final reply.
	Answer string
}

// Tool names harnesses give their write and shell tools.
var (
	writeTools = []string{"write", "write_file", "create_file", "str_replace_based_edit_tool"}
	shellTools = []string{"bash", "shell", "run_shell_command", "exec_command", "shell_command", "local_shell"}
)

// Sampler returns the scripted stand-in model.
func Sampler(t Task) *gatewaytest.Sampler {
	return &gatewaytest.Sampler{Reply: func(req sampler.Request) gatewaytest.Reply { return Reply(t, req) }}
}

// Reply is the script's answer to one call: a call offering no tools (a
// title, a probe) gets a short text; an agent turn gets the next step.
func Reply(t Task, req sampler.Request) gatewaytest.Reply {
	if len(req.Tools) == 0 {
		return gatewaytest.Reply{Text: "Create a file and run a command"}
	}
	done := 0
	for _, m := range req.Messages {
		if m.Role == "tool" {
			done++
		}
	}
	switch done {
	case 0:
		if tl, ok := find(req.Tools, writeTools); ok {
			args := map[string]any{}
			props := properties(tl)
			for _, k := range []string{"file_path", "filePath", "path", "absolute_path"} {
				if _, ok := props[k]; ok {
					args[k] = t.Path
					break
				}
			}
			for _, k := range []string{"content", "file_text", "text"} {
				if _, ok := props[k]; ok {
					args[k] = t.Content
					break
				}
			}
			if _, ok := props["command"]; ok && tl.Function.Name == "str_replace_based_edit_tool" {
				args["command"] = "create"
			}
			return call(tl.Function.Name, args)
		}
		fallthrough
	case 1:
		if tl, ok := find(req.Tools, shellTools); ok {
			cmd := t.Command
			if done == 0 { // no write tool: write the file with the shell
				cmd = "printf '%s' '" + strings.ReplaceAll(t.Content, "'", `'\''`) + "' > " + t.Path + " && " + t.Command
			}
			args := map[string]any{}
			props := properties(tl)
			key := "command"
			if _, ok := props["cmd"]; ok { // Codex's exec_command
				key = "cmd"
			}
			if p, ok := props[key]; ok && strings.Contains(string(p), `"array"`) {
				args[key] = []string{"bash", "-lc", cmd}
			} else {
				args[key] = cmd
			}
			if _, ok := props["description"]; ok {
				args["description"] = "run the command"
			}
			return call(tl.Function.Name, args)
		}
	}
	return gatewaytest.Reply{Text: t.Answer}
}

func call(name string, args map[string]any) gatewaytest.Reply {
	b, _ := json.Marshal(args)
	return gatewaytest.Reply{ToolCalls: []episode.ToolCall{{Type: "function", Function: episode.FunctionCall{Name: name, Arguments: string(b)}}}}
}

func find(tools []sampler.Tool, names []string) (sampler.Tool, bool) {
	for _, n := range names {
		for _, t := range tools {
			if strings.EqualFold(t.Function.Name, n) {
				return t, true
			}
		}
	}
	return sampler.Tool{}, false
}

func properties(t sampler.Tool) map[string]json.RawMessage {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(t.Function.Parameters, &s)
	return s.Properties
}

// ToolNames lists the tools a call offered (for messages).
func ToolNames(tools []sampler.Tool) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Function.Name)
	}
	slices.Sort(out)
	return out
}
