package local

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/toolcall"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// The tokenizer is byte-level: ids 0–255 are the bytes of UTF-8 text, and
// five special tokens follow. Any text encodes (no unknown token) and
// decoding the ids of a text gives the text back byte for byte.
const (
	TokenBOS       = 256 // <|bos|>: reserved; the chat template does not use it
	TokenEOS       = 257 // <|eos|>: end of a plain-text completion
	TokenPad       = 258 // <|pad|>: never sampled by a trained model; fills batches
	TokenImStart   = 259 // <|im_start|>: opens a chat message
	TokenImEnd     = 260 // <|im_end|>: closes a chat message; ends an assistant reply
	TokenizerVocab = 261
	// TokenizerID names this tokenizer and chat template in manifests.
	TokenizerID = "rllm-byte-chatml-v1"
)

var specialText = map[int]string{
	TokenBOS:     "<|bos|>",
	TokenEOS:     "<|eos|>",
	TokenPad:     "<|pad|>",
	TokenImStart: "<|im_start|>",
	TokenImEnd:   "<|im_end|>",
}

// Tokenizer converts between text and token ids, and renders chats.
type Tokenizer struct{}

// VocabSize is 261: 256 bytes and 5 special tokens.
func (Tokenizer) VocabSize() int { return TokenizerVocab }

// IsSpecial reports whether id is one of the special tokens.
func (Tokenizer) IsSpecial(id int) bool { return id >= 256 && id < TokenizerVocab }

// StopTokens end every sampled sequence: <|eos|> and <|im_end|>.
func (Tokenizer) StopTokens() []int { return []int{TokenImEnd, TokenEOS} }

// Encode turns text into byte tokens. With special set, the literal
// strings "<|im_start|>" etc. become their special tokens (as vLLM's
// tokenizer does for a rendered chat prompt); otherwise they stay bytes.
func (Tokenizer) Encode(text string, special bool) []int {
	ids := make([]int, 0, len(text))
	for i := 0; i < len(text); {
		if special && text[i] == '<' {
			if id, n := matchSpecial(text[i:]); n > 0 {
				ids = append(ids, id)
				i += n
				continue
			}
		}
		ids = append(ids, int(text[i]))
		i++
	}
	return ids
}

func matchSpecial(s string) (id, n int) {
	for id := TokenBOS; id < TokenizerVocab; id++ {
		if strings.HasPrefix(s, specialText[id]) {
			return id, len(specialText[id])
		}
	}
	return 0, 0
}

// Decode turns ids back into text. Special tokens are written as their
// literal strings unless skipSpecial is set. It fails on an id outside the
// vocabulary.
func (Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	var b strings.Builder
	for i, id := range ids {
		switch {
		case id >= 0 && id < 256:
			b.WriteByte(byte(id))
		case id >= 256 && id < TokenizerVocab:
			if !skipSpecial {
				b.WriteString(specialText[id])
			}
		default:
			return "", usererr.Errorf("token %d is %d, outside the vocabulary [0, %d)", i, id, TokenizerVocab)
		}
	}
	return b.String(), nil
}

// TokenText is the text of one token, for logprob listings.
func (t Tokenizer) TokenText(id int) string {
	if s, ok := specialText[id]; ok {
		return s
	}
	if id >= 0 && id < 256 {
		return string([]byte{byte(id)})
	}
	return ""
}

// ChatTemplate renders messages the ChatML way, with special tokens:
//
//	<|im_start|>{role}\n{content}<|im_end|>\n      (per message)
//	<|im_start|>assistant\n                       (generation prompt)
//
// An assistant reply is its content followed by <|im_end|>, so the
// shortest reply to "3+4=" is two tokens: "7" and <|im_end|>. Reasoning
// is not rendered. Tools are RenderChat's.
func (t Tokenizer) ChatTemplate(msgs []episode.Message, addGenerationPrompt bool) []int {
	return t.RenderChat(msgs, nil, addGenerationPrompt)
}

// RenderChat is ChatTemplate with tools, which it renders as Qwen2.5's
// template does (the Hermes format, read by pkg/toolcall):
//
//   - the tools' signatures, one JSON object a line inside <tools></tools>,
//     and how to call one, end the system message (a system message of
//     their own when the chat has none);
//   - an assistant message's tool calls follow its content, each
//     <tool_call>\n{"name": …, "arguments": …}\n</tool_call> on lines of
//     its own (toolcall.Render), so a reply the model wrote that way
//     renders back to the tokens it sampled;
//   - consecutive tool results are one user message, each inside
//     <tool_response>\n…\n</tool_response> on lines of its own.
//
// A chat without tools and tool messages renders as before tools were
// rendered at all.
func (t Tokenizer) RenderChat(msgs []episode.Message, tools []sampler.Tool, addGenerationPrompt bool) []int {
	var ids []int
	open := func(role string) {
		ids = append(ids, TokenImStart)
		ids = append(ids, t.Encode(role+"\n", false)...)
	}
	closeMsg := func() { ids = append(ids, TokenImEnd, '\n') }
	if len(tools) > 0 {
		system := toolsPrompt(tools)
		if len(msgs) > 0 && msgs[0].Role == "system" {
			system = msgs[0].Content + "\n\n" + system
			msgs = msgs[1:]
		}
		open("system")
		ids = append(ids, t.Encode(system, false)...)
		closeMsg()
	}
	for i, m := range msgs {
		switch {
		case m.Role == "tool":
			if i == 0 || msgs[i-1].Role != "tool" {
				ids = append(ids, TokenImStart)
				ids = append(ids, t.Encode("user", false)...)
			}
			ids = append(ids, t.Encode("\n<tool_response>\n"+m.Content+"\n</tool_response>", false)...)
			if i == len(msgs)-1 || msgs[i+1].Role != "tool" {
				closeMsg()
			}
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			open(m.Role)
			ids = append(ids, t.Encode(toolcall.Render(m.Content, m.ToolCalls), false)...)
			closeMsg()
		default:
			open(m.Role)
			ids = append(ids, t.Encode(m.Content, false)...)
			closeMsg()
		}
	}
	if addGenerationPrompt {
		open("assistant")
	}
	return ids
}

// toolsPrompt tells the model its tools and how to call them, in
// Qwen2.5's words shortened: every byte is a token of the embedded
// model's context.
func toolsPrompt(tools []sampler.Tool) string {
	var b strings.Builder
	b.WriteString("# Tools\n\nYou may call the functions whose signatures are within <tools></tools>:\n<tools>\n")
	for _, tool := range tools {
		var line bytes.Buffer
		enc := json.NewEncoder(&line)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(tool); err != nil {
			// Parameters that are not JSON (a tool built in code): the
			// signature without them.
			line.Reset()
			tool.Function.Parameters = nil
			_ = enc.Encode(tool)
		}
		b.Write(line.Bytes())
	}
	b.WriteString("</tools>\n\nTo call one, reply with its name and arguments as a JSON object within <tool_call></tool_call>:\n" +
		"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
	return b.String()
}
