package env

import (
	"context"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/reward"
)

// Scored is rLLM's SingleTurnEnvironment: Reset shows the task row, Step
// scores the action's text with a reward function and ends the episode.
// The math, countdown, arith and search envs are Scored envs.
type Scored struct {
	Task   episode.Task
	Reward reward.Func
}

// Reset returns the task row as the observation.
func (s *Scored) Reset(context.Context) (any, map[string]any, error) {
	return map[string]any(s.Task), nil, nil
}

// Step scores the answer; the result's metadata and is_correct go to Info.
func (s *Scored) Step(_ context.Context, action episode.Action) (StepResult, error) {
	res := s.Reward(s.Task, action.Content)
	info := make(map[string]any, len(res.Metadata)+1)
	for k, v := range res.Metadata {
		info[k] = v
	}
	info["is_correct"] = res.IsCorrect
	return StepResult{Observation: map[string]any{}, Reward: res.Reward, Done: true, Info: info}, nil
}

// Close does nothing.
func (s *Scored) Close() error { return nil }
