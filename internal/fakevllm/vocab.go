package fakevllm

import (
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// The fake model's vocabulary: a few special tokens of the Qwen chat
// format, a handful of words the fake samples from, and the 256 bytes as a
// fallback so that any text tokenizes and detokenizes exactly.
var (
	specialTokens = []string{
		"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
		"<tool_call>", "</tool_call>",
	}
	wordTokens = []string{
		"\n", "system", "user", "assistant", "tool",
		" the", " a", " cat", " dog", " sat", " on", " mat", " is", " answer",
		" 42", " yes", " no", " and", " so", ".", ",", " think", " step",
		" boxed", " seven", " plus", " equals", " move", " left", " right",
	}
)

// Token ids the fake uses in its chat template.
const (
	TokenEndOfText = 0
	TokenImStart   = 1
	TokenImEnd     = 2
	TokenThink     = 3
	TokenEndThink  = 4
)

// Vocab is the fake tokenizer: ids are positions in Tokens.
type Vocab struct {
	Tokens    []string
	firstWord int // index of the first word the fake samples from
	firstByte int // index of byte 0
	index     map[string]int
	maxLen    int
}

// DefaultVocab returns the fake's vocabulary (specials, words, bytes).
func DefaultVocab() *Vocab {
	v := &Vocab{index: map[string]int{}}
	v.Tokens = append(v.Tokens, specialTokens...)
	v.firstWord = len(v.Tokens)
	v.Tokens = append(v.Tokens, wordTokens...)
	v.firstByte = len(v.Tokens)
	for b := 0; b < 256; b++ {
		v.Tokens = append(v.Tokens, string([]byte{byte(b)}))
	}
	for i, t := range v.Tokens[:v.firstByte] {
		v.index[t] = i
		v.maxLen = max(v.maxLen, len(t))
	}
	return v
}

// Size is the vocabulary size (what a client compares token ids against).
func (v *Vocab) Size() int { return len(v.Tokens) }

// Encode tokenizes text by longest match over specials and words, falling
// back to one token per byte.
func (v *Vocab) Encode(text string) []int {
	ids := make([]int, 0, len(text)/3+1)
	for i := 0; i < len(text); {
		best, bestLen := -1, 0
		for l := min(v.maxLen, len(text)-i); l > 0; l-- {
			if id, ok := v.index[text[i:i+l]]; ok {
				best, bestLen = id, l
				break
			}
		}
		if best < 0 {
			best, bestLen = v.firstByte+int(text[i]), 1
		}
		ids = append(ids, best)
		i += bestLen
	}
	return ids
}

// Decode joins the tokens of ids; ids outside the vocabulary are skipped.
func (v *Vocab) Decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		if id >= 0 && id < len(v.Tokens) {
			b.WriteString(v.Tokens[id])
		}
	}
	return b.String()
}

// Token returns the text of one id ("" when out of range).
func (v *Vocab) Token(id int) string {
	if id < 0 || id >= len(v.Tokens) {
		return ""
	}
	return v.Tokens[id]
}

// sampleWord maps a random number onto one of the words.
func (v *Vocab) sampleWord(r uint64) int {
	return v.firstWord + 1 + int(r%uint64(v.firstByte-v.firstWord-1)) // never "\n"
}

// Message is a chat message as the fake's template renders it.
type Message struct {
	Role       string             `json:"role"`
	Content    *string            `json:"content"`
	Reasoning  string             `json:"reasoning,omitempty"`
	ToolCalls  []episode.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string             `json:"tool_call_id,omitempty"`
	Name       string             `json:"name,omitempty"`
}

// RenderChat applies the fake's Qwen-style chat template:
// <|im_start|>role\ncontent<|im_end|>\n per message, then
// <|im_start|>assistant\n when addGenerationPrompt. Like Qwen3's template
// it renders an assistant message's content only, never its reasoning, so
// multi-turn prompts re-tokenized from messages drift from the sampled
// tokens exactly when the model was thinking.
func RenderChat(msgs []Message, addGenerationPrompt bool) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|im_start|>")
		b.WriteString(m.Role)
		b.WriteString("\n")
		if m.Content != nil {
			b.WriteString(*m.Content)
		}
		for _, tc := range m.ToolCalls {
			b.WriteString("<tool_call>")
			b.WriteString(`{"name": "` + tc.Function.Name + `", "arguments": ` + tc.Function.Arguments + `}`)
			b.WriteString("</tool_call>")
		}
		b.WriteString("<|im_end|>\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String()
}
