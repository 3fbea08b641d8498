package openai

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
	wire "github.com/rllm-org/rllm-go/pkg/openaiwire"
)

// vLLM's default max_tokens for /v1/completions.
const defaultCompletionTokens = 16

type completionRequest struct {
	wire.SamplingFields
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`
}

var completionKeys = union(samplingKeys, keySet("prompt", "logprobs", "echo", "suffix"))

type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// completionChunk is a /v1/completions response or stream chunk.
type completionChunk struct {
	chunkHead
	Choices []completionChoice `json:"choices"`
	Usage   *wire.Usage        `json:"usage,omitempty"`
}

type completionChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   any                 `json:"finish_reason"`
	StopReason     any                 `json:"stop_reason"`
	PromptLogprobs []map[string]any    `json:"prompt_logprobs,omitempty"`
	TokenIDs       []int               `json:"token_ids,omitempty"`
	PromptTokenIDs []int               `json:"prompt_token_ids,omitempty"`
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req completionRequest
	if !s.decodeBody(w, r, completionKeys, &req) || !s.checkModel(w, req.Model) {
		return
	}
	o, perr := options(&req.SamplingFields, s, defaultCompletionTokens)
	if perr == nil {
		perr = s.completionOptions(&req, &o)
	}
	if perr != nil {
		writeParamError(w, perr)
		return
	}
	if len(req.Prompt) == 0 {
		writeError(w, http.StatusBadRequest, "prompt", "prompt is required")
		return
	}
	prompts, perr := parsePrompts(req.Prompt)
	if perr != nil {
		writeParamError(w, perr)
		return
	}
	snap, _ := s.eng.Weights()
	for i, p := range prompts {
		if prompts[i], perr = s.fitPrompt(p, snap.Config().Context, req.TruncatePromptTokens, o.maxTokens, "prompt"); perr != nil {
			writeParamError(w, perr)
			return
		}
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	run := s.newRun(&o, prompts, start)
	if !run.begin(w, ctx) {
		return
	}
	defer run.finish()
	head := s.head("cmpl-", "text_completion", run.version)
	k := -1
	if req.Logprobs != nil {
		k = *req.Logprobs
	}
	if o.stream {
		sse := newSSE(w, s.opts.WriteTimeout, run.version)
		usageChunk := func(u wire.Usage) any {
			return completionChunk{chunkHead: head, Choices: []completionChoice{}, Usage: &u}
		}
		run.streamChoices(ctx, sse, usageChunk, func(c *choice, delta string) any {
			ch := completionChoice{Index: c.index, Text: delta, FinishReason: c.finishReason(), StopReason: c.stopReason()}
			if k >= 0 {
				ch.Logprobs = completionLogprobsOf(c, c.sentTok, k, o.tokensAsIDs, nil)
			}
			if o.returnIDs {
				ch.TokenIDs = nonNil(c.ids[c.sentTok:])
				if !c.started {
					ch.PromptTokenIDs = c.prompt
				}
			}
			return completionChunk{chunkHead: head, Choices: []completionChoice{ch}, Usage: run.runningUsage()}
		})
		return
	}
	choices, ok := answers(ctx, w, run, func(i int, c *choice) completionChoice {
		p := i / o.req.N
		text := string(c.visible(&o))
		ch := completionChoice{Index: c.index, FinishReason: c.finishReason(), StopReason: c.stopReason()}
		var promptLP [][]local.TokenLogprob
		if o.req.PromptLogprobs >= 0 {
			promptLP = run.streams[p].PromptLogprobs()
		}
		if o.promptLogprobs >= 0 {
			ch.PromptLogprobs = vllmPromptLogprobs(promptLP, c.prompt, o.promptLogprobs, o.tokensAsIDs)
		}
		var echo []int
		if req.Echo {
			echo = c.prompt
			pt, _ := local.Tokenizer{}.Decode(c.prompt, false)
			text = pt + text
		}
		ch.Text = text
		if k >= 0 {
			ch.Logprobs = completionLogprobsOf(c, 0, k, o.tokensAsIDs, &echoLogprobs{ids: echo, lps: promptLP})
		}
		if o.returnIDs {
			ch.TokenIDs, ch.PromptTokenIDs = nonNil(c.ids), c.prompt
		}
		return ch
	})
	if !ok {
		return
	}
	u := run.usage()
	s.writeResult(w, run.version, completionChunk{chunkHead: head, Choices: choices, Usage: &u})
}

// completionOptions checks the completions-only fields.
func (s *Server) completionOptions(req *completionRequest, o *genOptions) *paramError {
	if req.Logprobs != nil {
		if k := *req.Logprobs; k < 0 || k > s.opts.MaxLogprobs {
			return badParam("logprobs", "logprobs is %d; use 0 to %d", k, s.opts.MaxLogprobs)
		}
		o.req.TopLogprobs = *req.Logprobs
	}
	if req.Suffix != nil && *req.Suffix != "" {
		return badParam("suffix", "suffix (fill-in-the-middle) is not supported by rllm serve")
	}
	if req.Echo {
		if o.stream {
			return badParam("echo", "echo is not supported with stream: true by rllm serve; send echo without streaming")
		}
		if req.Logprobs != nil {
			// The prompt's logprobs are part of the echo, each with
			// logprobs alternatives like the completion's tokens (vLLM
			// asks for prompt_logprobs = logprobs when echoing).
			o.req.PromptLogprobs = max(o.req.PromptLogprobs, *req.Logprobs)
		}
	}
	return nil
}

type echoLogprobs struct {
	ids []int
	lps [][]local.TokenLogprob
}

// completionLogprobsOf lists the logprobs of tokens from on, each with its
// k most likely alternatives plus itself (vLLM's shape); an echoed prompt
// comes first, its first token with null logprobs.
func completionLogprobsOf(c *choice, from, k int, asIDs bool, echo *echoLogprobs) *completionLogprobs {
	lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	off := 0
	if echo != nil && len(echo.ids) > 0 {
		for i, id := range echo.ids {
			t := tokenString(id, asIDs)
			lp.Tokens = append(lp.Tokens, t)
			lp.TextOffset = append(lp.TextOffset, off)
			off += len(local.Tokenizer{}.TokenText(id))
			if i == 0 || i >= len(echo.lps) || echo.lps[i] == nil {
				lp.TokenLogprobs = append(lp.TokenLogprobs, nil)
				lp.TopLogprobs = append(lp.TopLogprobs, nil)
				continue
			}
			own := wire.EncodeLogprob(echo.lps[i][0].Logprob)
			lp.TokenLogprobs = append(lp.TokenLogprobs, &own)
			top := map[string]float64{t: own}
			for _, alt := range echo.lps[i][1:min(len(echo.lps[i]), k+1)] {
				top[tokenString(alt.Token, asIDs)] = wire.EncodeLogprob(alt.Logprob)
			}
			lp.TopLogprobs = append(lp.TopLogprobs, top)
		}
	}
	for i := from; i < len(c.ids); i++ {
		id := c.ids[i]
		t := tokenString(id, asIDs)
		own := wire.EncodeLogprob(c.lps[i])
		lp.Tokens = append(lp.Tokens, t)
		lp.TokenLogprobs = append(lp.TokenLogprobs, &own)
		top := map[string]float64{t: own}
		for _, alt := range c.tops[i] {
			top[tokenString(alt.Token, asIDs)] = wire.EncodeLogprob(alt.Logprob)
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, off+c.offsets[i])
	}
	return lp
}

// vllmPromptLogprobs is vLLM's prompt_logprobs: null for the first token,
// then {token_id: {logprob, rank, decoded_token}} with the token itself
// and up to k alternatives.
func vllmPromptLogprobs(lps [][]local.TokenLogprob, prompt []int, k int, asIDs bool) []map[string]any {
	out := make([]map[string]any, len(prompt))
	for i := 1; i < len(prompt) && i < len(lps); i++ {
		m := map[string]any{}
		for j, e := range lps[i] {
			if j > k {
				break
			}
			m[strconv.Itoa(e.Token)] = map[string]any{"logprob": wire.EncodeLogprob(e.Logprob), "rank": e.Rank, "decoded_token": tokenString(e.Token, asIDs)}
		}
		out[i] = m
	}
	return out
}
