package rollout

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

func ep(term episode.TerminationReason, steps ...episode.Step) *episode.Episode {
	return &episode.Episode{ID: "t:0", TerminationReason: term, Trajectories: []episode.Trajectory{{ID: "u", Name: "solver", Reward: 1, Steps: steps}}}
}

func step(prompt, resp []int, lps ...float64) episode.Step {
	return episode.Step{PromptIDs: prompt, ResponseIDs: resp, Logprobs: lps, Reward: 0.5}
}

func TestAssemble(t *testing.T) {
	// Two turns that extend each other: [1 2] -> [3 4]; env adds [5 6].
	good := []episode.Step{step([]int{1, 2}, []int{3, 4}, -.1, -.2), step([]int{1, 2, 3, 4, 5, 6}, []int{7}, -.3)}
	drift := []episode.Step{step([]int{1, 2}, []int{3, 4}, -.1, -.2), step([]int{1, 2, 9, 5, 6}, []int{7}, -.3)}
	for _, tc := range []struct {
		name  string
		ep    *episode.Episode
		opts  AssembleOptions
		want  []Sequence
		stats AssembleStats
	}{
		{name: "multi-turn interleaves env tokens with mask 0 and logprob 0", ep: ep(episode.TerminationEnvDone, good...),
			want: []Sequence{{PromptIDs: []int{1, 2}, ResponseIDs: []int{3, 4, 5, 6, 7}, LossMask: []int8{1, 1, 0, 0, 1},
				Logprobs: []float64{-.1, -.2, 0, 0, -.3}, Reward: 1, Step: -1, Termination: episode.TerminationEnvDone}},
			stats: AssembleStats{Sequences: 1}},
		{name: "drift is flagged and the sequence stops at the last good turn", ep: ep(episode.TerminationEnvDone, drift...),
			want: []Sequence{{PromptIDs: []int{1, 2}, ResponseIDs: []int{3, 4}, LossMask: []int8{1, 1}, Logprobs: []float64{-.1, -.2},
				Reward: 1, Step: -1, Termination: episode.TerminationEnvDone, TokenMismatch: true}},
			stats: AssembleStats{Sequences: 1, TokenMismatches: 1}},
		{name: "filter_token_mismatch zeroes the mask", ep: ep(episode.TerminationEnvDone, drift...), opts: AssembleOptions{FilterTokenMismatch: true},
			want: []Sequence{{PromptIDs: []int{1, 2}, ResponseIDs: []int{3, 4}, LossMask: []int8{0, 0}, Logprobs: []float64{-.1, -.2},
				Reward: 1, Step: -1, Termination: episode.TerminationEnvDone, TokenMismatch: true, Masked: true}},
			stats: AssembleStats{Sequences: 1, TokenMismatches: 1, MismatchMasked: 1}},
		{name: "per step", ep: ep(episode.TerminationEnvDone, drift...), opts: AssembleOptions{PerStep: true},
			want: []Sequence{
				{PromptIDs: []int{1, 2}, ResponseIDs: []int{3, 4}, LossMask: []int8{1, 1}, Logprobs: []float64{-.1, -.2}, Reward: .5, Step: 0, Termination: episode.TerminationEnvDone},
				{PromptIDs: []int{1, 2, 9, 5, 6}, ResponseIDs: []int{7}, LossMask: []int8{1}, Logprobs: []float64{-.3}, Reward: .5, Step: 1, Termination: episode.TerminationEnvDone},
			},
			stats: AssembleStats{Sequences: 2}},
		{name: "response cut at max_response_length", ep: ep(episode.TerminationEnvDone, good...), opts: AssembleOptions{MaxResponseLength: 3},
			want: []Sequence{{PromptIDs: []int{1, 2}, ResponseIDs: []int{3, 4, 5}, LossMask: []int8{1, 1, 0}, Logprobs: []float64{-.1, -.2, 0},
				Reward: 1, Step: -1, Termination: episode.TerminationMaxResponseLength}},
			stats: AssembleStats{Sequences: 1, ResponseTruncated: 1}},
		{name: "overlong filter masks what it cut", ep: ep(episode.TerminationEnvDone, good...), opts: AssembleOptions{MaxResponseLength: 3, OverlongFilter: true},
			want: []Sequence{{PromptIDs: []int{1, 2}, ResponseIDs: []int{3, 4, 5}, LossMask: []int8{0, 0, 0}, Logprobs: []float64{-.1, -.2, 0},
				Reward: 1, Step: -1, Termination: episode.TerminationMaxResponseLength, Masked: true}},
			stats: AssembleStats{Sequences: 1, ResponseTruncated: 1, OverlongMasked: 1}},
		{name: "overlong filter masks max turns and timeouts", ep: ep(episode.TerminationMaxTurns, step([]int{1}, []int{2}, -1)), opts: AssembleOptions{OverlongFilter: true},
			want: []Sequence{{PromptIDs: []int{1}, ResponseIDs: []int{2}, LossMask: []int8{0}, Logprobs: []float64{-1},
				Reward: 1, Step: -1, Termination: episode.TerminationMaxTurns, Masked: true}},
			stats: AssembleStats{Sequences: 1, OverlongMasked: 1}},
		{name: "overlong filter keeps env_done", ep: ep(episode.TerminationEnvDone, step([]int{1}, []int{2}, -1)), opts: AssembleOptions{OverlongFilter: true},
			want: []Sequence{{PromptIDs: []int{1}, ResponseIDs: []int{2}, LossMask: []int8{1}, Logprobs: []float64{-1},
				Reward: 1, Step: -1, Termination: episode.TerminationEnvDone}},
			stats: AssembleStats{Sequences: 1}},
		{name: "mask_truncated_samples drops a full response", ep: ep(episode.TerminationEnvDone, good...), opts: AssembleOptions{MaxResponseLength: 5, MaskTruncatedSamples: true},
			stats: AssembleStats{TruncatedDropped: 1}},
		{name: "prompt keeps its last tokens", ep: ep(episode.TerminationEnvDone, step([]int{1, 2, 3}, []int{4}, -1)), opts: AssembleOptions{MaxPromptLength: 2},
			want: []Sequence{{PromptIDs: []int{2, 3}, ResponseIDs: []int{4}, LossMask: []int8{1}, Logprobs: []float64{-1},
				Reward: 1, Step: -1, Termination: episode.TerminationMaxPromptLength, PromptCut: true}},
			stats: AssembleStats{Sequences: 1, PromptTruncated: 1}},
		{name: "a step's own loss mask is kept", ep: ep(episode.TerminationEnvDone, episode.Step{PromptIDs: []int{1}, ResponseIDs: []int{2, 3}, LossMask: []int8{1, 0}}),
			want: []Sequence{{PromptIDs: []int{1}, ResponseIDs: []int{2, 3}, LossMask: []int8{1, 0}, Logprobs: []float64{0, 0},
				Reward: 1, Step: -1, Termination: episode.TerminationEnvDone}},
			stats: AssembleStats{Sequences: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seqs, st, err := Assemble([]*episode.Episode{tc.ep, nil, {ID: "empty"}}, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				tc.want[i].EpisodeID, tc.want[i].TrajectoryID, tc.want[i].TrajectoryName = "t:0", "u", "solver"
			}
			if !reflect.DeepEqual(seqs, tc.want) {
				t.Errorf("sequences\n got %+v\nwant %+v", seqs, tc.want)
			}
			if st != tc.stats {
				t.Errorf("stats %+v, want %+v", st, tc.stats)
			}
		})
	}
}

func TestAssembleRejectsInconsistentSteps(t *testing.T) {
	for _, tc := range []struct {
		step episode.Step
		want string
	}{
		{episode.Step{ResponseIDs: []int{1}}, "no prompt token ids"},
		{episode.Step{PromptIDs: []int{1}, ResponseIDs: []int{1, 2}, Logprobs: []float64{-1}}, "2 response tokens but 1 logprobs"},
		{episode.Step{PromptIDs: []int{1}, ResponseIDs: []int{1}, LossMask: []int8{1, 1}}, "loss mask of 2"},
	} {
		_, _, err := Assemble([]*episode.Episode{ep(episode.TerminationEnvDone, tc.step)}, AssembleOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "t:0") {
			t.Errorf("error %v, want one naming the episode and %q", err, tc.want)
		}
	}
}

// Against the fake: a thinking model re-rendered through its chat template
// drifts (the template drops earlier reasoning, as Qwen3's does); token-id
// prompts built from the exact previous tokens never drift.
func TestAssembleDriftAgainstFake(t *testing.T) {
	run := func(reasoning, tokenPrompts bool) Sequence {
		s := fakevllm.New(fakevllm.Config{Reasoning: reasoning})
		defer s.Close()
		c := newTestClient(t, Options{Endpoints: []string{s.URL}})
		msgs := []episode.Message{{Role: "user", Content: "the cat"}}
		var steps []episode.Step
		var prompt []int
		for turn := 0; turn < 3; turn++ {
			req := sampler.Request{Messages: msgs, Params: greedy()}
			if tokenPrompts && prompt != nil {
				req = sampler.Request{PromptIDs: prompt, Params: greedy()}
			}
			r, err := c.Sample(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			steps = append(steps, step(r.PromptIDs, r.CompletionIDs, r.Logprobs...))
			msgs = append(msgs, episode.Message{Role: "assistant", Content: r.Text, Reasoning: r.Reasoning}, episode.Message{Role: "user", Content: " so"})
			env := s.Vocab().Encode("\n<|im_start|>user\n so<|im_end|>\n<|im_start|>assistant\n")
			prompt = append(append(append([]int{}, r.PromptIDs...), r.CompletionIDs...), env...)
		}
		seqs, _, err := Assemble([]*episode.Episode{ep(episode.TerminationEnvDone, steps...)}, AssembleOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return seqs[0]
	}
	if s := run(false, false); s.TokenMismatch {
		t.Errorf("chat without reasoning drifted")
	}
	if s := run(true, false); !s.TokenMismatch {
		t.Errorf("chat with reasoning re-rendered without it did not drift")
	}
	s := run(true, true)
	if s.TokenMismatch {
		t.Fatalf("token-id prompts drifted")
	}
	var model int
	for _, m := range s.LossMask {
		model += int(m)
	}
	if model == 0 || model == len(s.ResponseIDs) || len(s.Logprobs) != len(s.ResponseIDs) {
		t.Errorf("mask %v over %d tokens", s.LossMask, len(s.ResponseIDs))
	}
}
