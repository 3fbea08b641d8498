package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rllm-org/rllm-go/pkg/openaiwire"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// responseRules are what a usable response must satisfy.
type responseRules struct {
	vocabSize int  // token ids must be below it; 0 skips the check
	textOnly  bool // token ids and logprobs may be missing
	promptIDs []int
}

// invalidf reports a response that decoded but cannot be used.
func invalidf(format string, args ...any) error {
	return &invalidResponse{msg: fmt.Sprintf(format, args...)}
}

type invalidResponse struct{ msg string }

func (e *invalidResponse) Error() string { return e.msg }

// malformed is a body that is not the JSON it should be; a truncated body
// is usually a transport accident, so it is retried.
type malformed struct{ err error }

func (e *malformed) Error() string { return "malformed JSON: " + e.err.Error() }

// decodeJSON decodes one JSON value from a body as it streams in, so a
// large answer is never held twice; an error is *malformed unless it
// comes from the reader (a body over its limit, a timeout).
func decodeJSON(r io.Reader, v any) error {
	er := &errReader{r: r}
	if err := json.NewDecoder(er).Decode(v); err != nil {
		if er.err != nil && !errors.Is(er.err, io.EOF) {
			return er.err
		}
		return &malformed{err}
	}
	return nil
}

// errReader remembers the reader's own error, to tell it from the JSON's.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

// serverError is the OpenAI error object some servers send with a 200.
type serverError struct {
	Error json.RawMessage `json:"error"`
}

// noChoices is the error of an answer without choices: the server's own
// message and type when it sent an error object instead.
func (e serverError) noChoices() error {
	if len(e.Error) == 0 || string(e.Error) == "null" {
		return invalidf("the response has no choices")
	}
	msg, typ := openaiwire.ErrorMessage([]byte(`{"error":` + string(e.Error) + `}`))
	if typ != "" {
		return invalidf("the server answered 200 with an error instead of choices: %s (type %s)", msg, typ)
	}
	return invalidf("the server answered 200 with an error instead of choices: %s", msg)
}

// decodeAnswer decodes an answer R as it streams in (see decodeJSON) and
// checks it with check.
func decodeAnswer[R any](body io.Reader, check func(*R) (sampler.Response, error)) (sampler.Response, error) {
	var r R
	if err := decodeJSON(body, &r); err != nil {
		return sampler.Response{}, err
	}
	return check(&r)
}

// decodeChat decodes and checks a chat answer and returns its first choice.
func decodeChat(body io.Reader, rules responseRules) (sampler.Response, error) {
	return decodeAnswer(body, rules.chat)
}

// leanChatResponse is ChatResponse without the fields Sample never reads
// (per-token bytes and alternatives): decoding them was a third of the
// client's CPU per request. Like completionAnswer, it keeps the error
// object some servers send in place of choices.
type leanChatResponse struct {
	Model          string               `json:"model"`
	Choices        []leanChatChoice     `json:"choices"`
	PromptTokenIDs []int                `json:"prompt_token_ids"`
	Metadata       *openaiwire.Metadata `json:"metadata"`
	serverError
}

type leanChatChoice struct {
	Message  *openaiwire.ChatMessage `json:"message"`
	Logprobs *struct {
		Content []struct {
			Token   string  `json:"token"`
			Logprob float64 `json:"logprob"`
		} `json:"content"`
	} `json:"logprobs"`
	openaiwire.ChoiceEnd
}

// completionAnswer is a completions answer as the client decodes it,
// with the error object some servers send in place of choices.
type completionAnswer struct {
	openaiwire.CompletionResponse
	serverError
}

// decodeCompletion decodes and checks a completions answer.
func decodeCompletion(body io.Reader, rules responseRules) (sampler.Response, error) {
	return decodeAnswer(body, rules.completion)
}

func (rules responseRules) chat(r *leanChatResponse) (sampler.Response, error) {
	if len(r.Choices) == 0 {
		return sampler.Response{}, r.noChoices()
	}
	c := r.Choices[0]
	if c.Message == nil {
		return sampler.Response{}, invalidf("choice 0 has no message")
	}
	out := sampler.Response{Model: r.Model, WeightVersion: r.Metadata.Version(), ToolCalls: c.Message.ToolCalls,
		FinishReason: c.FinishReason, StopReason: c.Stop()}
	if c.Message.Content != nil {
		out.Text = *c.Message.Content
	}
	switch {
	case c.Message.Reasoning != nil:
		out.Reasoning = *c.Message.Reasoning
	case c.Message.ReasoningContent != nil:
		out.Reasoning = *c.Message.ReasoningContent
	}
	var toks []string
	var lps []float64
	if c.Logprobs != nil {
		toks = make([]string, len(c.Logprobs.Content))
		lps = make([]float64, len(c.Logprobs.Content))
		for i, t := range c.Logprobs.Content {
			toks[i], lps[i] = t.Token, openaiwire.DecodeLogprob(t.Logprob)
		}
	}
	prompt := r.PromptTokenIDs
	if prompt == nil {
		prompt = rules.promptIDs
	}
	return rules.finish(out, prompt, c.TokenIDs, toks, lps, c.Logprobs != nil)
}

func (rules responseRules) completion(r *completionAnswer) (sampler.Response, error) {
	if len(r.Choices) == 0 {
		return sampler.Response{}, r.noChoices()
	}
	c := r.Choices[0]
	if c.Text == nil {
		return sampler.Response{}, invalidf("choice 0 has no text")
	}
	out := sampler.Response{Model: r.Model, WeightVersion: r.Metadata.Version(), Text: *c.Text, FinishReason: c.FinishReason, StopReason: c.Stop()}
	var toks []string
	var lps []float64
	if c.Logprobs != nil {
		toks = c.Logprobs.Tokens
		if len(toks) != len(c.Logprobs.TokenLogprobs) {
			return sampler.Response{}, invalidf("choice 0 has %d logprob tokens but %d token_logprobs", len(toks), len(c.Logprobs.TokenLogprobs))
		}
		lps = make([]float64, len(c.Logprobs.TokenLogprobs))
		for i, v := range c.Logprobs.TokenLogprobs {
			lps[i] = openaiwire.DecodeLogprob(v)
		}
	}
	prompt := c.PromptTokenIDs
	if prompt == nil {
		prompt = rules.promptIDs
	}
	return rules.finish(out, prompt, c.TokenIDs, toks, lps, c.Logprobs != nil)
}

// finish fills token ids and logprobs and checks them against each other
// and the vocabulary.
func (rules responseRules) finish(out sampler.Response, prompt, ids []int, toks []string, lps []float64, haveLogprobs bool) (sampler.Response, error) {
	if out.FinishReason == "" {
		return out, invalidf("choice 0 has no finish_reason")
	}
	if ids == nil && haveLogprobs && len(toks) > 0 {
		// Servers without return_token_ids but started with
		// --return-tokens-as-token-ids still tell us the ids.
		ids = make([]int, len(toks))
		for i, t := range toks {
			id, ok := openaiwire.ParseTokenID(t)
			if !ok {
				ids = nil
				break
			}
			ids[i] = id
		}
	}
	if !rules.textOnly {
		switch {
		case ids == nil:
			return out, invalidf("choice 0 has no token_ids; use vLLM 0.10.2 or later (return_token_ids) or start it with --return-tokens-as-token-ids")
		case !haveLogprobs:
			return out, invalidf("choice 0 has no logprobs")
		case prompt == nil:
			return out, invalidf("the response has no prompt_token_ids; use vLLM 0.10.2 or later (return_token_ids)")
		}
	}
	if haveLogprobs && ids != nil && len(lps) != len(ids) {
		return out, invalidf("choice 0 has %d token ids but %d logprobs", len(ids), len(lps))
	}
	if err := rules.checkIDs("token_ids", ids); err != nil {
		return out, err
	}
	if err := rules.checkIDs("prompt_token_ids", prompt); err != nil {
		return out, err
	}
	out.PromptIDs, out.CompletionIDs, out.Logprobs = prompt, ids, lps
	return out, nil
}

func (rules responseRules) checkIDs(field string, ids []int) error {
	for i, id := range ids {
		if id < 0 || (rules.vocabSize > 0 && id >= rules.vocabSize) {
			return invalidf("%s[%d] = %d is outside the vocabulary of %d tokens", field, i, id, rules.vocabSize)
		}
	}
	return nil
}
