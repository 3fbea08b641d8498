package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	"github.com/rllm-org/rllm-go/pkg/sampler/samplertest"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// guessAgent sends each observation as a user message and answers with
// the reply's text.
type guessAgent struct{ agent.Base }

func (a *guessAgent) UpdateFromEnv(obs any, _ float64, _ bool, _ map[string]any) {
	a.AddUser(agent.ObservationText(obs))
}

func (a *guessAgent) UpdateFromModel(resp sampler.Response) episode.Action {
	act := episode.Action{Content: strings.TrimSpace(resp.Text)}
	a.RecordModel(resp, act)
	return act
}

// guessEnv is "guess my number": reward 1 and done on a hit, "higher" or
// "lower" otherwise, an error on the reply "crash".
type guessEnv struct {
	target int
	closed *bool
}

func (e *guessEnv) Reset(context.Context) (any, map[string]any, error) {
	return "guess a number", map[string]any{"target": e.target}, nil
}

func (e *guessEnv) Step(_ context.Context, a episode.Action) (env.StepResult, error) {
	if a.Content == "crash" {
		return env.StepResult{}, errors.New("sandbox died")
	}
	n, err := strconv.Atoi(a.Content)
	switch {
	case err != nil:
		return env.StepResult{Observation: "say a number", Info: map[string]any{"format_error": err.Error()}}, nil
	case n < e.target:
		return env.StepResult{Observation: "higher"}, nil
	case n > e.target:
		return env.StepResult{Observation: "lower"}, nil
	}
	return env.StepResult{Observation: "yes", Reward: 1, Done: true}, nil
}

func (e *guessEnv) Close() error {
	if e.closed != nil {
		*e.closed = true
	}
	return nil
}

func init() {
	agent.Register(agent.Definition{
		Name: "test_guess", Description: "test agent",
		New: func(registry.Values) (agent.Agent, error) { return &guessAgent{}, nil },
	})
	env.Register(env.Definition{
		Name: "test_guess", Description: "test env",
		Args: []registry.Arg{{Name: "target", Type: "int", Default: 5, Doc: "the number", FromTask: true}},
		New: func(_ episode.Task, args registry.Values) (env.Env, error) {
			return &guessEnv{target: args.Int("target")}, nil
		},
	})
}

func deps(s sampler.Sampler) workflow.Deps {
	return workflow.Deps{
		Sampler: s, Params: sampler.Params{Temperature: 1, MaxTokens: 16},
		Agent: workflow.Component{Name: "test_guess"},
		Env:   workflow.Component{Name: "test_guess"},
	}
}

func TestMultiTurnScripted(t *testing.T) {
	s := samplertest.Texts("3", "9", "7")
	w, err := workflow.New("multi_turn", map[string]any{"gamma": 0.5}, deps(s))
	if err != nil {
		t.Fatal(err)
	}
	ep, err := w.Run(context.Background(), episode.Task{"target": 7}, "t1:0")
	if err != nil {
		t.Fatal(err)
	}
	if ep.ID != "t1:0" || ep.TerminationReason != episode.TerminationEnvDone || !ep.IsCorrect {
		t.Fatalf("episode = %+v", ep)
	}
	steps := ep.Trajectories[0].Steps
	if len(steps) != 3 {
		t.Fatalf("%d steps, want 3", len(steps))
	}
	wantObs := []string{"guess a number", "higher", "lower"}
	wantReward := []float64{0, 0, 1}
	// gamma 0.5: G = r + 0.5·G_next → 0.25, 0.5, 1.
	wantReturn := []float64{0.25, 0.5, 1}
	for i, st := range steps {
		if st.Observation != wantObs[i] || st.Reward != wantReward[i] || st.MCReturn != wantReturn[i] {
			t.Errorf("step %d: obs %v reward %v return %v", i, st.Observation, st.Reward, st.MCReturn)
		}
		if !reflect.DeepEqual(st.ResponseIDs, samplertest.Tokens(st.ModelResponse)) || len(st.Logprobs) != len(st.ResponseIDs) ||
			len(st.LossMask) != len(st.ResponseIDs) || st.LossMask[0] != 1 || st.FinishReason != "stop" {
			t.Errorf("step %d token bookkeeping: %+v", i, st)
		}
		// chat completions: user, (assistant, user)*, assistant
		if n := len(st.ChatCompletions); n != 2*i+2 || st.ChatCompletions[n-1].Role != "assistant" {
			t.Errorf("step %d chat completions %+v", i, st.ChatCompletions)
		}
	}
	if got := ep.Trajectories[0].Reward; got != 1 {
		t.Errorf("trajectory reward %v", got)
	}
	// The third request carries the whole conversation.
	if got := len(s.Requests[2].Messages); got != 5 || s.Requests[2].Params.MaxTokens != 16 {
		t.Errorf("third request: %d messages, params %+v", got, s.Requests[2].Params)
	}
	// Episodes are logged and replayed: JSON must round-trip.
	b, err := json.Marshal(ep)
	if err != nil {
		t.Fatal(err)
	}
	var back episode.Episode
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(&back)
	if string(b) != string(b2) {
		t.Errorf("round trip differs:\n%s\n%s", b, b2)
	}
}

func TestTerminations(t *testing.T) {
	tests := []struct {
		name    string
		wf      string
		args    map[string]any
		replies []samplertest.Reply
		want    episode.TerminationReason
		wantErr string
	}{
		{"max turns", "multi_turn", map[string]any{"max_steps": 2}, []samplertest.Reply{{Text: "1"}, {Text: "2"}}, episode.TerminationMaxTurns, ""},
		{"single turn wrong", "single_turn", nil, []samplertest.Reply{{Text: "1"}}, episode.TerminationMaxTurns, ""},
		{"single turn right", "single_turn", nil, []samplertest.Reply{{Text: "5"}}, episode.TerminationEnvDone, ""},
		{"truncated", "multi_turn", nil, []samplertest.Reply{{Text: "1", FinishReason: "length"}}, episode.TerminationMaxResponseLength, ""},
		{"env error", "multi_turn", nil, []samplertest.Reply{{Text: "1"}, {Text: "crash"}}, episode.TerminationError, "sandbox died"},
		{"sampler error", "multi_turn", nil, []samplertest.Reply{{Err: errors.New("503 from server")}}, episode.TerminationError, "503 from server"},
		{"unparseable", "multi_turn", map[string]any{"max_steps": 1}, []samplertest.Reply{{Text: "five"}}, episode.TerminationMaxTurns, ""},
		// A conversation that outgrew the context ends the episode; it is
		// not an error to retry.
		{"prompt too long", "multi_turn", nil, []samplertest.Reply{{Text: "1"}, {Err: fmt.Errorf("server said no: %w", sampler.ErrPromptTooLong)}}, episode.TerminationMaxPromptLength, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := workflow.New(tt.wf, tt.args, deps(samplertest.New(tt.replies...)))
			if err != nil {
				t.Fatal(err)
			}
			ep, err := w.Run(context.Background(), episode.Task{}, "x:1")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(ep.Error, tt.wantErr) {
					t.Fatalf("err %v, episode error %q; want %q", err, ep.Error, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if ep.TerminationReason != tt.want {
				t.Errorf("termination %q, want %q", ep.TerminationReason, tt.want)
			}
			if tt.wantErr != "" && ep.IsCorrect {
				t.Error("failed episode counted correct")
			}
		})
	}
}

// blockingSampler waits for the context, as a hung server would.
type blockingSampler struct{}

func (blockingSampler) Sample(ctx context.Context, _ sampler.Request) (sampler.Response, error) {
	<-ctx.Done()
	return sampler.Response{}, ctx.Err()
}

func TestTimeout(t *testing.T) {
	closed := false
	d := deps(blockingSampler{})
	d.NewEnv = func(episode.Task) (env.Env, error) { return &guessEnv{target: 1, closed: &closed}, nil }
	w, err := workflow.New("multi_turn", nil, d)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	ep, err := w.Run(ctx, episode.Task{}, "x:0")
	if !errors.Is(err, context.DeadlineExceeded) || ep.TerminationReason != episode.TerminationTimeout {
		t.Fatalf("err %v, reason %q", err, ep.TerminationReason)
	}
	if !closed {
		t.Error("env not closed after timeout")
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		wf   string
		args map[string]any
		mod  func(*workflow.Deps)
		want string
	}{
		{"unknown workflow", "multi_trun", nil, nil, `workflow.name: "multi_trun" is not a registered workflow; did you mean "multi_turn"?`},
		{"unknown workflow arg", "multi_turn", map[string]any{"gama": 1.0}, nil, "workflow.args.gama: is not an accepted argument; did you mean workflow.args.gamma?"},
		{"bad type", "multi_turn", map[string]any{"gamma": "high"}, nil, "workflow.args.gamma: must be a float"},
		{"unknown agent", "single_turn", nil, func(d *workflow.Deps) { d.Agent.Name = "test_gues" }, `agent.name: "test_gues" is not a registered agent; did you mean "test_guess"?`},
		{"unknown env arg", "single_turn", nil, func(d *workflow.Deps) { d.Env.Args = map[string]any{"targte": 3} }, "env.args.targte: is not an accepted argument; did you mean env.args.target?"},
		{"agent takes no args", "single_turn", nil, func(d *workflow.Deps) { d.Agent.Args = map[string]any{"x": 1} }, "agent.args.x: is not an accepted argument; this takes no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := deps(samplertest.Texts())
			if tt.mod != nil {
				tt.mod(&d)
			}
			_, err := workflow.New(tt.wf, tt.args, d)
			var ce interface{ ExitCode() int }
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.As(err, &ce) || ce.ExitCode() != 2 {
				t.Fatalf("err = %v, want config error containing %q", err, tt.want)
			}
		})
	}
}

func TestShapeRewards(t *testing.T) {
	// Hand computation: raw rewards 0, 1, 1, 0 with bonus 0.5:
	// r1 = 1 + 0.5·(1−0) = 1.5, r2 = 1 + 0.5·(1−1) = 1, r3 = 0 + 0.5·(0−1) = −0.5.
	// gamma 0.9 returns: G3 = −0.5, G2 = 1 − 0.45 = 0.55, G1 = 1.5 + 0.495 = 1.995, G0 = 0 + 1.7955.
	steps := []episode.Step{{Reward: 0}, {Reward: 1}, {Reward: 1}, {Reward: 0}}
	workflow.ShapeRewards(steps, 0.5, 0.9)
	wantR := []float64{0, 1.5, 1, -0.5}
	wantG := []float64{1.7955, 1.995, 0.55, -0.5}
	for i := range steps {
		if math.Abs(steps[i].Reward-wantR[i]) > 1e-12 || math.Abs(steps[i].MCReturn-wantG[i]) > 1e-12 {
			t.Errorf("step %d: reward %v return %v, want %v %v", i, steps[i].Reward, steps[i].MCReturn, wantR[i], wantG[i])
		}
	}
}

func TestConcurrentEpisodes(t *testing.T) {
	// One workflow per episode, many at once, as the rollout engine runs them.
	done := make(chan error)
	for i := 0; i < 16; i++ {
		go func(i int) {
			w, err := workflow.New("single_turn", nil, deps(samplertest.Texts(strconv.Itoa(i%7))))
			if err != nil {
				done <- err
				return
			}
			ep, err := w.Run(context.Background(), episode.Task{"target": i % 7}, episode.EpisodeID("t", i))
			if err == nil && !ep.IsCorrect {
				err = errors.New("episode " + ep.ID + " not correct")
			}
			done <- err
		}(i)
	}
	for i := 0; i < 16; i++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func TestWorkflowArgsNameAgentAndEnv(t *testing.T) {
	// rLLM's workflow mode: agent and env given inside workflow.args.
	d := deps(samplertest.Texts("3"))
	d.Agent, d.Env = workflow.Component{}, workflow.Component{}
	w, err := workflow.New("single_turn", map[string]any{
		"agent_cls": "test_guess", "env_cls": "test_guess", "env_args": map[string]any{"target": 3},
	}, d)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := w.Run(context.Background(), episode.Task{}, "w:0")
	if err != nil || !ep.IsCorrect {
		t.Fatalf("%+v %v", ep, err)
	}
	if got := workflow.DefaultName("test_guess"); got != "multi_turn" {
		t.Errorf("default workflow for a multi-step env: %s", got)
	}
}
