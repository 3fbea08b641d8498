package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/chattemplate"
	"github.com/rllm-org/rllm-go/pkg/tokenizer"
)

type tokenizeOptions struct {
	tokenizer    string
	decode       string
	chat         string
	count        bool
	addSpecial   bool
	noGenPrompt  bool
	templateArgs string
	text         []string
}

func newTokenizeCmd(a *App) *cobra.Command {
	opts := &tokenizeOptions{}
	cmd := &cobra.Command{
		Use:   "tokenize --tokenizer DIR|MODEL_ID [TEXT | --decode IDS | --chat FILE.json]",
		Short: "Show the token ids a model's tokenizer and chat template give",
		Long: `Encode text, decode ids, or render a conversation with the model's own chat
template, exactly as rllm does before sampling. The tokenizer is a directory
holding tokenizer.json (and tokenizer_config.json), or a model id found in the
Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub);
nothing is downloaded.

TEXT "-" reads the text from standard input. --chat takes a JSON file holding
{"messages": [...], "tools": [...], "chat_template_kwargs": {...}} or a bare
array of messages, and prints {"text", "count", "ids"}.`,
		Example: `  rllm tokenize --tokenizer Qwen/Qwen3-8B "Hello, world!"
  rllm tokenize --tokenizer ./qwen3 --decode 9707,11,1879,0
  rllm tokenize --tokenizer ./qwen3 --chat conversation.json --template-kwargs '{"enable_thinking": false}'
  rllm tokenize --tokenizer ./qwen3 --count - < prompt.txt`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.text = args
			return runTokenize(a, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.tokenizer, "tokenizer", "", "tokenizer directory or Hugging Face model id (ORG/NAME) in the local cache")
	f.StringVar(&opts.decode, "decode", "", "comma-separated token ids to turn back into text")
	f.StringVar(&opts.chat, "chat", "", "JSON file with messages (and tools) to render with the chat template")
	f.BoolVar(&opts.count, "count", false, "print only the number of tokens")
	f.BoolVar(&opts.addSpecial, "add-special-tokens", false, "add the tokens the tokenizer's post-processor adds (e.g. a bos token) when encoding TEXT")
	f.BoolVar(&opts.noGenPrompt, "no-generation-prompt", false, "with --chat: do not append the assistant header (add_generation_prompt=false)")
	f.StringVar(&opts.templateArgs, "template-kwargs", "", `with --chat: chat_template_kwargs as a JSON object, e.g. '{"enable_thinking": false}'`)
	return cmd
}

func runTokenize(a *App, opts *tokenizeOptions) error {
	modes := 0
	if opts.decode != "" {
		modes++
	}
	if opts.chat != "" {
		modes++
	}
	if len(opts.text) > 0 {
		modes++
	}
	switch {
	case opts.tokenizer == "":
		return usagef("--tokenizer is required: pass a directory holding tokenizer.json or a model id such as Qwen/Qwen3-8B")
	case len(opts.text) > 1:
		return usagef("tokenize takes one TEXT argument, got %d: quote the text", len(opts.text))
	case modes == 0:
		return usagef("nothing to do: give TEXT, --decode IDS or --chat FILE.json")
	case modes > 1:
		return usagef("give only one of TEXT, --decode and --chat")
	case opts.count && opts.decode != "":
		return usagef("--count counts tokens of TEXT or --chat, not --decode")
	}
	var ids []int
	if opts.decode != "" {
		var err error
		if ids, err = parseIDs(opts.decode); err != nil {
			return err
		}
	}
	dir, err := tokenizer.Resolve(opts.tokenizer, tokenizer.HubCacheDir(a.Getenv))
	if err != nil {
		return err
	}
	tok, err := tokenizer.LoadContext(a.context(), dir)
	if err != nil {
		return err
	}
	switch {
	case opts.decode != "":
		text, err := tok.Decode(ids)
		if err != nil {
			return usagef("--decode: %v", err)
		}
		_, err = fmt.Fprintln(a.Stdout, text)
		return err
	case opts.chat != "":
		return runTokenizeChat(a, opts, tok)
	}
	text := opts.text[0]
	if text == "-" {
		b, err := io.ReadAll(a.Stdin)
		if err != nil {
			return fmt.Errorf("read standard input: %w", err)
		}
		text = string(b)
	}
	return printIDs(a, opts, "", tok.Encode(text, opts.addSpecial))
}

func runTokenizeChat(a *App, opts *tokenizeOptions, tok *tokenizer.Tokenizer) error {
	source, ok := tok.ChatTemplate("default")
	if !ok {
		return usagef("%s/%s has no chat_template: use a tokenizer whose tokenizer_config.json has one", tok.Dir(), tokenizer.ConfigFile)
	}
	readFile := a.ReadFile
	if readFile == nil {
		readFile = func(name string) ([]byte, error) { return boundedio.ReadFile(a.context(), name, 64<<20) }
	}
	data, err := readFile(opts.chat)
	if err != nil {
		return usagef("cannot read --chat file: %v", err)
	}
	vals, err := parseChatFile(opts.chat, data)
	if err != nil {
		return err
	}
	vals.AddGenerationPrompt = !opts.noGenPrompt
	if opts.templateArgs != "" {
		kw, err := chattemplate.DecodeJSON([]byte(opts.templateArgs))
		d, isObject := kw.(*exec.Dict)
		if err != nil || !isObject {
			return usagef(`--template-kwargs must be a JSON object such as '{"enable_thinking": false}'`)
		}
		for _, p := range d.Pairs {
			vals.Kwargs[p.Key.String()] = p.Value
		}
	}
	tpl, err := chattemplate.New(source, chattemplate.Options{SpecialTokens: tok.SpecialTokenText()})
	if err != nil {
		return err
	}
	text, err := tpl.RenderValues(vals)
	if err != nil {
		return err
	}
	return printIDs(a, opts, text, tok.Encode(text, false))
}

// parseChatFile reads {"messages", "tools", "chat_template_kwargs"} or a
// bare messages array, keeping key order (tojson prints it).
func parseChatFile(name string, data []byte) (chattemplate.Values, error) {
	vals := chattemplate.Values{Kwargs: map[string]any{}}
	v, err := chattemplate.DecodeJSON(data)
	if err != nil {
		var syn *chattemplate.SyntaxError
		if errors.As(err, &syn) {
			return vals, usagef("%s:%d: invalid JSON: %s", name, lineAt(data, syn.Offset), syn.Msg)
		}
		return vals, usagef("%s: invalid JSON: %v", name, err)
	}
	var messages any
	switch x := v.(type) {
	case []any:
		messages = x
	case *exec.Dict:
		for _, p := range x.Pairs {
			switch key := p.Key.String(); key {
			case "messages":
				messages = p.Value.Interface()
			case "tools":
				tools, ok := p.Value.Interface().([]any)
				if !ok && !p.Value.IsNil() {
					return vals, usagef("%s: tools must be a list of tool objects", name)
				}
				vals.Tools = tools
			case "chat_template_kwargs":
				kw, ok := p.Value.Interface().(*exec.Dict)
				if !ok {
					return vals, usagef("%s: chat_template_kwargs must be an object", name)
				}
				for _, kp := range kw.Pairs {
					vals.Kwargs[kp.Key.String()] = kp.Value
				}
			default:
				return vals, usagef("%s: unknown key %q (expected messages, tools, chat_template_kwargs)", name, key)
			}
		}
	default:
		return vals, usagef(`%s: expected {"messages": [...]} or a list of messages`, name)
	}
	list, ok := messages.([]any)
	if !ok {
		return vals, usagef(`%s: "messages" must be a list of {"role", "content"} objects`, name)
	}
	for i, m := range list {
		d, ok := m.(*exec.Dict)
		if !ok {
			return vals, usagef("%s: messages[%d] is not an object", name, i)
		}
		role := d.Get(exec.AsValue("role"))
		if !role.IsString() || role.String() == "" {
			return vals, usagef("%s: messages[%d] has no \"role\" string", name, i)
		}
	}
	vals.Messages = list
	return vals, nil
}

func lineAt(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return strings.Count(string(data[:off]), "\n") + 1
}

func parseIDs(s string) ([]int, error) {
	s = strings.TrimSpace(strings.Trim(strings.TrimSpace(s), "[]"))
	if s == "" {
		return nil, usagef("--decode needs token ids such as 9707,11,1879")
	}
	parts := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	ids := make([]int, 0, len(parts))
	for _, p := range parts {
		id, err := strconv.Atoi(p)
		if err != nil || id < 0 {
			return nil, usagef("--decode: %q is not a token id (a non-negative integer)", p)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func printIDs(a *App, opts *tokenizeOptions, text string, ids []int) error {
	if opts.count {
		_, err := fmt.Fprintln(a.Stdout, len(ids))
		return err
	}
	if ids == nil {
		ids = []int{}
	}
	var out any = ids
	if opts.chat != "" {
		out = struct {
			Text  string `json:"text"`
			Count int    `json:"count"`
			IDs   []int  `json:"ids"`
		}{text, len(ids), ids}
	}
	enc := json.NewEncoder(a.Stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}
