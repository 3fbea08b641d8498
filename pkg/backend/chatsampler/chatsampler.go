// Package chatsampler turns any backend.TokenSampler (a Tinker sampler, a
// snapshot of a model) into a sampler.Sampler for workflows, with the
// policy model's own tokenizer and chat template: chats are rendered by
// the template from tokenizer_config.json (tools and chat_template_kwargs
// included) and encoded by tokenizer.json, and the exact token ids go to
// the sampler and come back unchanged (prompt ids, sampled ids and their
// logprobs), so what is trained is exactly what was sampled.
package chatsampler

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/chattemplate"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/tokenizer"
	"github.com/rllm-org/rllm-go/pkg/toolcall"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Options configure a chat sampler.
type Options struct {
	// ChatTemplateKwargs are passed to every render (a request's own
	// kwargs override them), e.g. {"enable_thinking": false}.
	ChatTemplateKwargs map[string]any
	// StopTokenIDs end every reply; nil means the tokenizer's eos token.
	StopTokenIDs []int
	// ParseToolCalls turns <tool_call>{"name", "arguments"}</tool_call>
	// blocks in a reply (the Hermes/Qwen format) into ToolCalls, as vLLM's
	// hermes tool parser does.
	ParseToolCalls bool
}

// Sampler renders chats with a model's template and samples from the
// current snapshot. Safe for concurrent use; a call in flight keeps the
// snapshot it started with.
type Sampler struct {
	tok   *tokenizer.Tokenizer
	tpl   *chattemplate.Template
	opts  Options
	stops []int
	// Snapshot is the weights new calls sample from (Swap, Current).
	backend.Snapshot
}

var _ sampler.Sampler = (*Sampler)(nil)

// LoadTokenizer resolves rollout.tokenizer (a directory holding
// tokenizer.json and tokenizer_config.json, or a Hugging Face model id
// found in the local cache; nothing is downloaded) and loads it. getenv
// locates the cache (HF_HUB_CACHE, HF_HOME, ...).
func LoadTokenizer(ref string, getenv func(string) string) (*tokenizer.Tokenizer, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	dir, err := tokenizer.Resolve(ref, tokenizer.HubCacheDir(getenv))
	if err != nil {
		return nil, usererr.Errorf("rollout.tokenizer: %v", err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, usererr.Errorf("rollout.tokenizer: %v", err)
	}
	return tok, nil
}

// New samples from s with tok's chat template.
func New(s backend.TokenSampler, tok *tokenizer.Tokenizer, opts Options) (*Sampler, error) {
	source, ok := tok.ChatTemplate("default")
	if !ok {
		return nil, usererr.Errorf("rollout.tokenizer: %s has no chat_template in %s; use the model's own tokenizer files", tok.Dir(), tokenizer.ConfigFile)
	}
	tpl, err := chattemplate.New(source, chattemplate.Options{SpecialTokens: tok.SpecialTokenText()})
	if err != nil {
		return nil, usererr.Errorf("rollout.tokenizer: %v", err)
	}
	stops := opts.StopTokenIDs
	if stops == nil {
		if eos := tok.Special().EOS; eos >= 0 {
			stops = []int{eos}
		}
	}
	if len(stops) == 0 {
		return nil, usererr.Errorf("rollout.tokenizer: %s names no eos_token, so replies would never stop; use the model's own tokenizer_config.json", tok.Dir())
	}
	c := &Sampler{tok: tok, tpl: tpl, opts: opts, stops: stops}
	c.Swap(s)
	return c, nil
}

// Prompt renders and encodes a chat as the model sees it, with the
// header that starts the assistant's reply.
func (c *Sampler) Prompt(ctx context.Context, msgs []episode.Message, tools []sampler.Tool, kwargs map[string]any) ([]int, error) {
	kw := maps.Clone(c.opts.ChatTemplateKwargs)
	if kw == nil {
		kw = map[string]any{}
	}
	maps.Copy(kw, kwargs)
	// Templates come from downloaded repositories: render under the
	// template engine's bounds and stop when ctx is cancelled.
	text, err := c.tpl.RenderContext(ctx, chattemplate.Input{Messages: msgs, Tools: tools, AddGenerationPrompt: true, Kwargs: kw})
	if err != nil {
		return nil, usererr.Wrap(err)
	}
	return c.tok.Encode(text, false), nil
}

// CountPromptTokens is the length of the prompt Sample would send
// (sampler.Counter).
func (c *Sampler) CountPromptTokens(ctx context.Context, req sampler.Request) (int, error) {
	if len(req.Messages) == 0 {
		return len(req.PromptIDs), nil
	}
	ids, err := c.Prompt(ctx, req.Messages, req.Tools, req.ChatTemplateKwargs)
	return len(ids), err
}

// Sample produces one completion.
func (c *Sampler) Sample(ctx context.Context, req sampler.Request) (sampler.Response, error) {
	snap := c.Current()
	var prompt []int
	switch {
	case len(req.Messages) > 0 && len(req.PromptIDs) > 0:
		return sampler.Response{}, usererr.Errorf("a sampler request sets both messages and prompt_ids; set exactly one")
	case len(req.Messages) > 0:
		var err error
		if prompt, err = c.Prompt(ctx, req.Messages, req.Tools, req.ChatTemplateKwargs); err != nil {
			return sampler.Response{}, err
		}
	case len(req.PromptIDs) > 0:
		prompt = req.PromptIDs
	default:
		return sampler.Response{}, usererr.Errorf("a sampler request with neither messages nor prompt_ids")
	}
	params := c.params(req.Params)
	res, err := snap.Sample(ctx, backend.SampleRequest{Prompt: prompt, NumSamples: 1, Params: params})
	if err != nil {
		return sampler.Response{}, err
	}
	if len(res.Sequences) != 1 {
		return sampler.Response{}, usererr.Errorf("the sampler %s returned %d sequences for one", snap.Name(), len(res.Sequences))
	}
	seq := res.Sequences[0]
	out := sampler.Response{
		PromptIDs:     prompt,
		CompletionIDs: seq.Tokens,
		Logprobs:      seq.Logprobs,
		FinishReason:  seq.StopReason,
		Model:         snap.Name(),
		WeightVersion: strconv.Itoa(snap.Version()),
	}
	if err := c.fillText(&out, seq, req.Params); err != nil {
		return sampler.Response{}, err
	}
	return out, nil
}

// params maps the request's settings onto the token sampler's. The stop
// tokens always include the eos. The Tinker API takes either stop token
// ids or stop strings, so when the request has stop strings the stop
// tokens are sent as their text too.
func (c *Sampler) params(p sampler.Params) backend.SamplingParams {
	ids := append(append([]int(nil), c.stops...), p.StopTokenIDs...)
	out := backend.SamplingParams{MaxTokens: p.MaxTokens, Temperature: p.Temperature, TopP: p.TopP, TopK: p.TopK, Seed: p.Seed}
	if len(p.Stop) == 0 {
		out.StopTokenIDs = ids
		return out
	}
	out.Stop = append(out.Stop, p.Stop...)
	for _, id := range ids {
		if s, err := c.tok.Decode([]int{id}); err == nil && s != "" && !slices.Contains(out.Stop, s) {
			out.Stop = append(out.Stop, s)
		}
	}
	return out
}

// fillText decodes the reply as vLLM returns it: the stop token and
// special tokens left out of the text, a matched stop string cut off, the
// stop reason empty for the eos and the token id or string otherwise,
// and (with ParseToolCalls) tool calls taken out of the text.
func (c *Sampler) fillText(out *sampler.Response, seq backend.SampledSequence, p sampler.Params) error {
	ids := seq.Tokens
	stopped := seq.StopReason == backend.StopReasonStop
	if stopped && len(ids) > 0 {
		last := ids[len(ids)-1]
		switch {
		case slices.Contains(c.stops, last):
			ids = ids[:len(ids)-1]
		case slices.Contains(p.StopTokenIDs, last):
			ids = ids[:len(ids)-1]
			out.StopReason = strconv.Itoa(last)
		}
	}
	var text strings.Builder
	for _, id := range ids {
		s, err := c.tok.Decode([]int{id})
		if err != nil {
			return usererr.Errorf("the sampler returned token id %d, which %s does not have; rollout.tokenizer must be the policy model's tokenizer", id, c.tok.Dir())
		}
		if !c.tok.IsSpecial(id) {
			text.WriteString(s)
		}
	}
	t := text.String()
	if stopped && len(ids) == len(seq.Tokens) && len(p.Stop) > 0 {
		// No stop token ended it: a stop string did. Longest match wins.
		stops := slices.Clone(p.Stop)
		slices.SortFunc(stops, func(a, b string) int { return len(b) - len(a) })
		for _, s := range stops {
			if s != "" && strings.HasSuffix(t, s) {
				out.StopReason = s
				t = strings.TrimSuffix(t, s)
				break
			}
		}
	}
	out.Text = t
	if c.opts.ParseToolCalls {
		out.Text, out.ToolCalls = toolcall.Strip(t, "call_")
		if len(out.ToolCalls) > 0 && out.FinishReason == backend.StopReasonStop {
			out.FinishReason = "tool_calls"
		}
	}
	return nil
}

// Codec adapts a Hugging Face tokenizer to backend.Codec: Decode can skip
// special tokens, and StopTokens are the reply-ending ids (the eos first).
type Codec struct {
	Tok   *tokenizer.Tokenizer
	Stops []int
}

var _ backend.Codec = Codec{}

// NewCodec is tok's codec with its eos as the stop token.
func NewCodec(tok *tokenizer.Tokenizer) Codec {
	var stops []int
	if eos := tok.Special().EOS; eos >= 0 {
		stops = []int{eos}
	}
	return Codec{Tok: tok, Stops: stops}
}

// Encode encodes text (addSpecial adds the post-processor's tokens).
func (c Codec) Encode(text string, addSpecial bool) []int { return c.Tok.Encode(text, addSpecial) }

// Decode returns the text of ids, leaving special tokens out when
// skipSpecial is set.
func (c Codec) Decode(ids []int, skipSpecial bool) (string, error) {
	if !skipSpecial {
		return c.Tok.Decode(ids)
	}
	kept := make([]int, 0, len(ids))
	for _, id := range ids {
		if !c.Tok.IsSpecial(id) {
			kept = append(kept, id)
		}
	}
	return c.Tok.Decode(kept)
}

// StopTokens end a reply.
func (c Codec) StopTokens() []int { return c.Stops }
