// Package exec_env holds an environment written in Python (guess_env.py)
// that rllm trains against through the exec protocol; this test plays it.
package exec_env

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
	_ "github.com/rllm-org/rllm-go/pkg/tasks" // registers chat and exec
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// python3 returns the interpreter, or skips the test where there is none.
// Under CI a python3 that exists but cannot run fails the test instead.
func python3(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: skipping the Python exec environment example")
	}
	if out, err := exec.Command(path, "-c", "import json, random, re, sys").CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 at %s cannot run: %v: %s", path, err, out)
		}
		t.Skipf("python3 at %s cannot run (%v): skipping", path, err)
	}
	return path
}

var number = regexp.MustCompile(`-?\d+`)

// bisector plays well: it reads the bounds and hints from the chat.
type bisector struct{}

func (bisector) Sample(_ context.Context, req sampler.Request) (sampler.Response, error) {
	lo, hi, last := 0, 0, 0
	for _, m := range req.Messages {
		nums := number.FindAllString(m.Content, -1)
		switch {
		case m.Role == "user" && strings.HasPrefix(m.Content, "I am thinking") && len(nums) >= 2:
			lo, _ = strconv.Atoi(nums[0])
			hi, _ = strconv.Atoi(nums[1])
		case m.Role == "assistant":
			last, _ = strconv.Atoi(m.Content)
		case strings.Contains(m.Content, "higher"):
			lo = last + 1
		case strings.Contains(m.Content, "lower"):
			hi = last - 1
		}
	}
	return sampler.Response{Text: strconv.Itoa((lo + hi) / 2), FinishReason: "stop"}, nil
}

func TestPythonEnvironment(t *testing.T) {
	py := python3(t)
	w, err := workflow.New("multi_turn", nil, workflow.Deps{
		Sampler:  bisector{},
		MaxSteps: 12,
		Agent:    workflow.Component{Name: "chat"},
		Env: workflow.Component{Name: "exec", Args: map[string]any{
			"command": []any{py, "guess_env.py"}, "processes": 2, "step_timeout_s": 20,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, secret := range []int{1, 37, 100} {
		task := episode.Task{"id": fmt.Sprintf("g%d", i), "lo": 1, "hi": 100, "secret": secret}
		ep, err := w.Run(context.Background(), task, episode.EpisodeID("g", i))
		if err != nil {
			t.Fatal(err)
		}
		traj := ep.Trajectories[0]
		if ep.TerminationReason != episode.TerminationEnvDone || !ep.IsCorrect || traj.Reward != 1 || len(traj.Steps) > 7 {
			t.Fatalf("secret %d: %s, correct %v, reward %v after %d steps: %s", secret, ep.TerminationReason, ep.IsCorrect, traj.Reward, len(traj.Steps), ep.Error)
		}
	}
	// A bad row is the env's error, reported for that episode only.
	ep, err := w.Run(context.Background(), episode.Task{"lo": 5, "hi": 1}, "bad:0")
	if err == nil || ep.TerminationReason != episode.TerminationError || !strings.Contains(ep.Error, "ValueError: task has lo 5 > hi 1") {
		t.Fatalf("bad row: %v %s %s", err, ep.TerminationReason, ep.Error)
	}
}
