package harbor

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/toolcall"
)

// toolResultEnd is how a rendered prompt ends after a tool's result (the
// embedded policy's template, Tokenizer.RenderChat, and Qwen's).
var toolResultEnd = regexp.MustCompile(`</tool_response>\s*(<\|im_end\|>)?\s*(<\|im_start\|>assistant\s*)?$`)

// rePath finds the paths an instruction names in backquotes
// (`pkg/stats.py`, `/app`; not `stats.mean`, which has no slash).
var rePath = regexp.MustCompile("`(/?[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*)`")

// reCommand finds a command an instruction shows as an indented line.
var reCommand = regexp.MustCompile(`(?m)^ {4}(\S.*)$`)

// FormatExample is a turn of a task episode in the format the agent
// works in, solving nothing, for the embedded policy's warm-up: first a
// bash tool call (toolcall.Render) that looks around, reading a file the
// instruction names, running the command it shows or listing /app;
// after a tool's result, a short final reply, which ends the episode.
// The model learns to call the tool and to stop; what to change, RL.
func FormatExample(prompt string, rng *rand.Rand) string {
	if toolResultEnd.MatchString(prompt) {
		return []string{"Done.", "I have looked at the task.", "Finished."}[rng.IntN(3)]
	}
	commands := []string{"ls -R /app"}
	for _, m := range rePath.FindAllStringSubmatch(prompt, -1) {
		p := m[1]
		if !strings.Contains(p, "/") {
			continue
		}
		if !strings.HasPrefix(p, "/") {
			p = "/app/" + p
		}
		if strings.Contains(p[strings.LastIndex(p, "/"):], ".") {
			commands = append(commands, "cat "+p)
		} else {
			commands = append(commands, "ls "+p)
		}
	}
	for _, m := range reCommand.FindAllStringSubmatch(prompt, -1) {
		commands = append(commands, strings.TrimSpace(m[1]))
	}
	var args bytes.Buffer
	enc := json.NewEncoder(&args)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"command": commands[rng.IntN(len(commands))]}) // strings always encode
	return toolcall.Render("", []episode.ToolCall{{Type: "function",
		Function: episode.FunctionCall{Name: "bash", Arguments: strings.TrimSpace(args.String())}}})
}
