package tasks_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/expr"
	"github.com/rllm-org/rllm-go/pkg/sampler/samplertest"
	"github.com/rllm-org/rllm-go/pkg/tasks/arith"
	"github.com/rllm-org/rllm-go/pkg/tasks/countdown"
	"github.com/rllm-org/rllm-go/pkg/tasks/frozenlake"
	"github.com/rllm-org/rllm-go/pkg/workflow"

	"github.com/rllm-org/rllm-go/pkg/tasks"
)

func TestBuiltinsRegistered(t *testing.T) {
	for _, name := range []string{"math", "countdown", "arith", "search", "frozenlake"} {
		if _, err := agent.Registry.Lookup(name); err != nil {
			t.Error(err)
		}
		if _, err := env.Registry.Lookup(name); err != nil {
			t.Error(err)
		}
	}
}

func run(t *testing.T, name string, envArgs map[string]any, task episode.Task, reply string) *episode.Episode {
	t.Helper()
	s := samplertest.Texts(reply)
	w, err := workflow.New("single_turn", nil, workflow.Deps{
		Sampler: s, Agent: workflow.Component{Name: name}, Env: workflow.Component{Name: name, Args: envArgs},
	})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := w.Run(context.Background(), task, "t:0")
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

func TestSingleTurnTasks(t *testing.T) {
	tests := []struct {
		name    string
		envArgs map[string]any
		task    episode.Task
		reply   string
		prompt  string
		reward  float64
		correct bool
	}{
		{"math", nil, episode.Task{"problem": "1+1?", "answer": "2", "data_source": "gsm8k"}, `<think>easy</think>\boxed{2}`, `1+1? Let's think step by step and output the final answer within \boxed{}.`, 1, true},
		{"math", map[string]any{"reward_args": map[string]any{"format_error_reward": -1}}, episode.Task{"question": "1+1?", "ground_truth": "2"}, "2", "", -1, false},
		{"arith", nil, episode.Task{"question": "3+4=", "ground_truth": "7"}, "7", "3+4=", 1, true},
		// Off by one: format_score 0.1 + close_score 0.4 / (1 + 1).
		{"arith", nil, episode.Task{"question": "3+4=", "ground_truth": "7"}, "8", "3+4=", 0.1 + 0.4/2, false},
		{"arith", map[string]any{"reward_args": map[string]any{"format_score": 0, "close_score": 0}}, episode.Task{"question": "3+4=", "ground_truth": "7"}, "8", "3+4=", 0, false},
		{"countdown", nil, episode.Task{"question": "q", "target": 6, "nums": []any{1, 2, 3}}, "<answer>1+2+3</answer>", "q", 1, true},
		{"search", nil, episode.Task{"question": "Capital of France?", "ground_truth": "Paris"}, "<answer>Paris</answer>", "", 1, true},
	}
	for _, tt := range tests {
		ep := run(t, tt.name, tt.envArgs, tt.task, tt.reply)
		st := ep.Trajectories[0].Steps[0]
		if ep.TerminationReason != episode.TerminationEnvDone || ep.IsCorrect != tt.correct || math.Abs(st.Reward-tt.reward) > 1e-12 {
			t.Errorf("%s %q: %s correct=%v reward=%v info=%v", tt.name, tt.reply, ep.TerminationReason, ep.IsCorrect, st.Reward, st.Info)
		}
		if tt.prompt != "" && st.ChatCompletions[0].Content != tt.prompt {
			t.Errorf("%s prompt %q, want %q", tt.name, st.ChatCompletions[0].Content, tt.prompt)
		}
	}
}

func TestEnvArgErrors(t *testing.T) {
	_, err := workflow.New("single_turn", nil, workflow.Deps{
		Sampler: samplertest.Texts(), Agent: workflow.Component{Name: "arith"},
		Env: workflow.Component{Name: "arith", Args: map[string]any{"reward_args": map[string]any{"format_scor": 0.5}}},
	})
	if err == nil || !strings.Contains(err.Error(), "env.args.reward_args.format_scor: is not an accepted argument; did you mean env.args.reward_args.format_score?") {
		t.Fatalf("err %v", err)
	}
}

func TestArithGenerate(t *testing.T) {
	rows, err := arith.Generate(500, 3, arith.Options{Min: 0, Max: 9, Operators: "+-*/"})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := arith.Generate(500, 3, arith.Options{Min: 0, Max: 9, Operators: "+-*/"})
	if !reflect.DeepEqual(rows, again) {
		t.Fatal("same seed, different rows")
	}
	ops := map[byte]bool{}
	for _, r := range rows {
		q := r["question"].(string)
		if !strings.HasSuffix(q, "=") || len(q) > 7 {
			t.Fatalf("question %q", q)
		}
		v, err := expr.Eval(strings.TrimSuffix(q, "="))
		if err != nil || !v.Value.IsInt() || v.Value.RatString() != r["ground_truth"] {
			t.Fatalf("%q: ground truth %v, evaluates to %v (%v)", q, r["ground_truth"], v.Value, err)
		}
		if strings.HasPrefix(r["ground_truth"].(string), "-") {
			t.Fatalf("%q has a negative answer", q)
		}
		ops[q[1+strings.IndexAny(q[1:], "+-*/")]] = true
	}
	if len(ops) != 4 {
		t.Errorf("operators drawn: %v", ops)
	}
	for _, bad := range []arith.Options{{Min: 5, Max: 1, Operators: "+"}, {Max: 9, Operators: "^"}, {Max: 9}} {
		if _, err := arith.Generate(1, 0, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestCountdownGenerate(t *testing.T) {
	rows, err := countdown.Generate(300, 1, countdown.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		// The kept solution must satisfy the reward itself.
		ep := run(t, "countdown", nil, r, "<answer>"+r["solution"].(string)+"</answer>")
		if !ep.IsCorrect {
			t.Fatalf("row %v: its own solution is not correct", r)
		}
		if tg := r["target"].(int); tg < 1 || tg > 100 {
			t.Fatalf("target %d", tg)
		}
	}
}

func TestFrozenLakeGenerate(t *testing.T) {
	rows, err := frozenlake.Generate(50, 9, frozenlake.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		e, err := env.New("frozenlake", r, nil)
		if err != nil {
			t.Fatal(err)
		}
		l := e.(*frozenlake.Env).Lake
		if l.Rows != r["size"] {
			t.Fatalf("row %v built a %dx%d lake", r, l.Rows, l.Cols)
		}
	}
}

func TestDefaultWorkflow(t *testing.T) {
	for env, want := range map[string]string{"math": "single_turn", "arith": "single_turn", "countdown": "single_turn", "search": "single_turn", "frozenlake": "multi_turn"} {
		if got := workflow.DefaultName(env); got != want {
			t.Errorf("%s: %s, want %s", env, got, want)
		}
	}
}

// The warm-up's format examples are well-formed replies built from the
// prompt alone: what the reward and agent read as an answer, with the
// task's own numbers, and not (beyond chance) the solution.
func TestFormatExamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	wrap := func(q string) string { return "<|im_start|>user\n" + q + "<|im_end|>\n<|im_start|>assistant\n" }

	t.Run("arith", func(t *testing.T) {
		f, ok := tasks.FormatExampleFor("arith")
		if !ok {
			t.Fatal("arith has no format examples")
		}
		rows, err := arith.Generate(200, 3, arith.DefaultOptions)
		if err != nil {
			t.Fatal(err)
		}
		operands, twoDigit, correct := 0, 0, 0
		for _, row := range rows {
			q := row["question"].(string)
			var a, b int
			var op string
			if _, err := fmt.Sscanf(strings.Replace(strings.Replace(q, "+", " + ", 1), "-", " - ", 1), "%d %s %d=", &a, &op, &b); err != nil {
				t.Fatalf("%q: %v", q, err)
			}
			reply := f(wrap(q), rng)
			n, err := strconv.Atoi(reply)
			if err != nil {
				t.Fatalf("%q: reply %q is not a bare integer", q, reply)
			}
			if n < 0 || n > 2*max(a, b) {
				t.Errorf("%q: reply %d outside 0..%d", q, n, 2*max(a, b))
			}
			if n == a || n == b {
				operands++
			}
			if n >= 10 {
				twoDigit++
			}
			if reply == row["ground_truth"] {
				correct++
			}
		}
		if operands < 80 || twoDigit < 20 {
			t.Errorf("%d operands and %d two-digit replies of 200: want both kinds", operands, twoDigit)
		}
		if correct > 50 {
			t.Errorf("%d of 200 replies are the answer: format examples must not solve the task", correct)
		}
	})

	t.Run("countdown", func(t *testing.T) {
		f, _ := tasks.FormatExampleFor("countdown")
		rows, err := countdown.Generate(100, 3, countdown.DefaultOptions)
		if err != nil {
			t.Fatal(err)
		}
		solved := 0
		for _, row := range rows {
			reply := f(wrap(row["question"].(string)), rng)
			ep := run(t, "countdown", nil, row, reply)
			r := ep.Trajectories[0].Reward
			if r <= 0 {
				t.Fatalf("%q scores %v: not a well-formed answer with the given numbers", reply, r)
			}
			m := regexp.MustCompile(`<answer>(.*)</answer>`).FindStringSubmatch(reply)
			res, err := expr.Eval(m[1])
			if err != nil {
				t.Fatal(err)
			}
			var used []string
			for _, n := range res.Numbers {
				used = append(used, n.String())
			}
			var given []string
			for _, n := range row["nums"].([]any) {
				given = append(given, fmt.Sprint(n))
			}
			sort.Strings(used)
			sort.Strings(given)
			if !reflect.DeepEqual(used, given) {
				t.Errorf("%q uses %v, the puzzle gives %v", reply, used, given)
			}
			if ep.IsCorrect {
				solved++
			}
		}
		if solved > 30 {
			t.Errorf("%d of 100 random equations solve their puzzle: format examples must not solve the task", solved)
		}
	})

	t.Run("frozenlake", func(t *testing.T) {
		f, _ := tasks.FormatExampleFor("frozenlake")
		seen := map[string]bool{}
		for range 100 {
			move, ok := frozenlake.ParseReply(f("any prompt", rng))
			if !ok {
				t.Fatal("a format example is not a move the agent reads")
			}
			seen[move] = true
		}
		if len(seen) != 4 {
			t.Errorf("moves %v: want all four", seen)
		}
	})

	if _, ok := tasks.FormatExampleFor("math"); ok {
		t.Error("math has format examples: its warm-up should use shuffled ground truths")
	}
}
