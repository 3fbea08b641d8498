// Package code is rLLM's code task: the reply's last fenced code block
// runs in the sandbox (pkg/sandbox) against the task's hidden tests in
// ground_truth — stdin/stdout tests (LiveCodeBench, TACO, Codeforces),
// function tests (fn_name with inputs and outputs) and HumanEval/MBPP
// style assert programs — and scores 1 when every test passes (or the
// fraction passed with env.args.partial=true).
package code

import (
	"regexp"
	"strings"
)

// reFence is rLLM's extract_code_from_model pattern
// (rllm/rewards/code_utils/utils.py): three backticks, an optional word
// tag, a newline, the code, three backticks. A block without the newline
// (one-line, or a tag such as c++ that is not a word) does not match.
var reFence = regexp.MustCompile("(?s)```(\\w*)\\n(.*?)```")

// Extract returns the last fenced code block of reply, stripped, and its
// tag; ok is false when the reply has none. Like rLLM, the last block is
// taken whatever its tag, and <think> is not removed.
func Extract(reply string) (code, tag string, ok bool) {
	m := reFence.FindAllStringSubmatch(reply, -1)
	if len(m) == 0 {
		return "", "", false
	}
	last := m[len(m)-1]
	return strings.TrimSpace(last[2]), last[1], true
}
