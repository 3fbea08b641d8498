package local

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// A multi-turn workload shaped like frozenlake's: a shared system prompt,
// then per episode a first observation, and each turn the sampled reply
// and the next observation appended to the conversation. Episodes of one
// group are a GRPO group: the same task, so the same first observation.
type multiTurnLoad struct {
	groups, groupSize int // episodes = groups × groupSize
	turns             int
	systemLen, obsLen int // approximate lengths in tokens (bytes)
	params            backend.SamplingParams
	// envTime is how long an env step takes between turns (frozenlake's:
	// none; an external env's or a tool's: up to seconds), during which
	// other episodes' turns push the episode's rows down the LRU.
	envTime time.Duration
}

// multiTurnStats count one run of a workload.
type multiTurnStats struct {
	requests, promptTokens, replyTokens int64
}

// filler is systemLen bytes of prose-like text, the same for every call.
func filler(prefix string, n int) string {
	const words = "the ice may be slippery so think briefly and then give exactly one move inside triple backticks "
	var b strings.Builder
	b.WriteString(prefix)
	for b.Len() < n {
		b.WriteString(words)
	}
	return b.String()[:max(n, len(prefix))]
}

// observation is turn k's grid for episode group g, about n bytes (at
// least 45): a square map whose player cell moves with the turn.
func observation(g, k, n int) string {
	const head, foot = "Current observation:\n", "Give your next move."
	side := 2
	for (side+1)*(side+2) <= n-len(head)-len(foot) {
		side++
	}
	var b strings.Builder
	b.WriteString(head)
	for r := range side {
		for c := range side {
			switch {
			case r*side+c == (g*7+k*3)%(side*side):
				b.WriteByte('P')
			case (r*31+c*17+g)%11 == 0:
				b.WriteByte('O')
			default:
				b.WriteByte('_')
			}
		}
		b.WriteByte('\n')
	}
	b.WriteString(foot)
	return b.String()
}

// firstPrompt is an episode's first prompt in the chat template.
func (wl multiTurnLoad) firstPrompt(group int) []int {
	return Tokenizer{}.ChatTemplate([]episode.Message{
		{Role: "system", Content: filler("You are walking on a frozen lake. ", wl.systemLen)},
		{Role: "user", Content: observation(group, 0, wl.obsLen)},
	}, true)
}

// nextTurn is the prompt after prompt and its reply: the reply closed as
// the chat template closes an assistant message (a reply that stopped on
// <|im_end|> already ends with it), then a user message and the
// generation prompt. For a reply without special tokens inside, this is
// what the agent's re-rendered chat gives.
func nextTurn(prompt, reply []int, user string) []int {
	p := append(append([]int(nil), prompt...), reply...)
	if len(reply) == 0 || reply[len(reply)-1] != TokenImEnd {
		p = append(p, TokenImEnd)
	}
	p = append(p, '\n')
	return append(p, Tokenizer{}.ChatTemplate([]episode.Message{{Role: "user", Content: user}}, true)...)
}

// episodeSeed is the sampling seed of episode ep's turn k.
func episodeSeed(ep, k int) *int64 { return seed(int64(ep*1000 + k)) }

// runEpisode plays one episode against sample, one request per turn,
// until its turns are done or the next prompt would leave no room for a
// reply. It returns every turn's request and result.
func (wl multiTurnLoad) runEpisode(ep int, sample func(backend.SampleRequest) (backend.SampleResult, error), ctxLen int) ([]backend.SampleRequest, []backend.SampleResult, error) {
	group := ep / wl.groupSize
	prompt := wl.firstPrompt(group)
	var reqs []backend.SampleRequest
	var ress []backend.SampleResult
	for k := range wl.turns {
		p := wl.params
		p.Seed = episodeSeed(ep, k)
		req := backend.SampleRequest{Prompt: prompt, NumSamples: 1, Params: p}
		res, err := sample(req)
		if err != nil {
			return reqs, ress, err
		}
		reqs, ress = append(reqs, req), append(ress, res)
		time.Sleep(wl.envTime)
		prompt = nextTurn(prompt, res.Sequences[0].Tokens, observation(group, k+1, wl.obsLen))
		if len(prompt)+max(p.MaxTokens, 1) >= ctxLen {
			break
		}
	}
	return reqs, ress, nil
}

// run plays every episode at once on snap, as a training step's rollouts
// do, and counts what was asked.
func (wl multiTurnLoad) run(ctx context.Context, snap *Snapshot) (multiTurnStats, error) {
	var mu sync.Mutex
	var st multiTurnStats
	var firstErr error
	var wg sync.WaitGroup
	for ep := range wl.groups * wl.groupSize {
		wg.Go(func() {
			reqs, ress, err := wl.runEpisode(ep, func(r backend.SampleRequest) (backend.SampleResult, error) {
				return snap.Sample(ctx, r)
			}, snap.w.cfg.Context)
			mu.Lock()
			defer mu.Unlock()
			for i := range ress {
				st.requests++
				st.promptTokens += int64(len(reqs[i].Prompt))
				st.replyTokens += int64(len(ress[i].Sequences[0].Tokens))
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	wg.Wait()
	return st, firstErr
}

// reuseRatio is the share of asked prompt tokens whose rows came from the
// cache (whole-prompt hits and shared flights included).
func reuseRatio(pc *prefixCache) float64 {
	asked := pc.promptTokens.Load()
	if asked == 0 {
		return 0
	}
	return 1 - float64(pc.prefillTokens.Load())/float64(asked)
}
