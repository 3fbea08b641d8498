// Package qa registers the single-turn question-answer tasks: math
// (answers in \boxed{}, graded by the math reward) and search-style QA
// (exact match and token F1). Task rows carry question (or problem),
// ground_truth (or answer) and data_source.
package qa

import (
	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/env"
)

// MathInstruction is the instruction rLLM's math datasets append to each
// problem.
const MathInstruction = `Let's think step by step and output the final answer within \boxed{}.`

// SearchInstruction asks for the short answer in tags the QA reward reads.
const SearchInstruction = "Answer with a short phrase inside <answer></answer>."

func init() {
	agent.RegisterPrompt("math", `asks the question with an instruction to answer in \boxed{}`, agent.PromptParams{Instruction: MathInstruction})
	env.RegisterScored("math", "math", "single turn: scores the reply's last \\boxed{} against ground_truth")
	agent.RegisterPrompt("search", "asks a QA question and expects the answer in <answer></answer>", agent.PromptParams{Instruction: SearchInstruction})
	env.RegisterScored("search", "search", "single turn: exact match or token F1 ≥ 0.3 against ground_truth")
}
