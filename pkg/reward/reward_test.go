package reward

import (
	"bufio"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
)

// TestMathGradingTable runs testdata/math_grading.tsv: one graded pair a
// line, with the rule it exercises and where that rule comes from.
func TestMathGradingTable(t *testing.T) {
	f, err := os.Open("testdata/math_grading.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n, correct := 0, 0
	for line := 1; sc.Scan(); line++ {
		if strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) != 4 {
			t.Fatalf("line %d: %d columns, want 4", line, len(cols))
		}
		want := cols[0] == "1"
		res := DefaultMath.Score(episode.Task{"ground_truth": cols[1]}, cols[2])
		if res.IsCorrect != want || (res.Reward == 1) != want {
			t.Errorf("line %d (%s): ground truth %q, reply %q: correct=%v reward=%v meta=%v, want correct=%v",
				line, cols[3], cols[1], cols[2], res.IsCorrect, res.Reward, res.Metadata, want)
		}
		n++
		if want {
			correct++
		}
	}
	if n < 60 || correct == n || correct == 0 {
		t.Fatalf("table has %d pairs (%d correct); want ≥ 60 with both kinds", n, correct)
	}
}

func TestMathGroundTruthShapes(t *testing.T) {
	tests := []struct {
		task  episode.Task
		reply string
		want  bool
	}{
		{episode.Task{"ground_truth": 7}, `\boxed{7}`, true},
		{episode.Task{"ground_truth": 2.5}, `\boxed{\frac{5}{2}}`, true},
		{episode.Task{"ground_truth": float64(1e6)}, `\boxed{1,000,000}`, true},
		{episode.Task{"ground_truth": []any{"4", `\frac{8}{2}`, 3}}, `\boxed{3}`, true},
		{episode.Task{"ground_truth": []any{"4", "5"}}, `\boxed{3}`, false},
		{episode.Task{"answer": "12"}, `\boxed{12}`, true}, // rLLM's problem/answer spelling
		{episode.Task{"reward_model": map[string]any{"ground_truth": "9"}}, `\boxed{9}`, true},
		{episode.Task{"question": "no answer column"}, `\boxed{9}`, false},
	}
	for i, tt := range tests {
		if got := DefaultMath.Score(tt.task, tt.reply); got.IsCorrect != tt.want {
			t.Errorf("%d: %v %q → %+v, want %v", i, tt.task, tt.reply, got, tt.want)
		}
	}
}

func TestMathFormatErrorsRecorded(t *testing.T) {
	g := MathGrader{Correct: 1, Incorrect: -0.5, FormatError: -1}
	for reply, reason := range map[string]string{
		"no box":          ErrNoBoxed.Error(),
		`\boxed{1+{2}`:    ErrUnbalancedBoxed.Error(),
		`\boxed{}`:        ErrEmptyBoxed.Error(),
		`\boxed`:          ErrUnbalancedBoxed.Error(),
		`x \boxed  `:      ErrEmptyBoxed.Error(),
		"</think>\\boxed": ErrUnbalancedBoxed.Error(),
	} {
		res := g.Score(episode.Task{"ground_truth": "1"}, reply)
		if res.Reward != -1 || res.Metadata["format_error"] != reason {
			t.Errorf("%q: %+v, want reward -1 and reason %q", reply, res, reason)
		}
	}
	if res := g.Score(episode.Task{"ground_truth": "1"}, `\boxed{2}`); res.Reward != -0.5 || res.Metadata["extracted_answer"] != "2" {
		t.Errorf("incorrect: %+v", res)
	}
}

// Countdown scores follow verl's countdown compute_score: 0 without an
// answer tag, format_score 0.1 for invalid or wrong equations, 1.0 when
// the equation uses each number once and hits the target.
func TestCountdown(t *testing.T) {
	task := episode.Task{"target": 24, "nums": []any{4, 6, 1, 1}}
	tests := []struct {
		reply   string
		reward  float64
		correct bool
		reason  string
	}{
		{"<answer>4*6*1*1</answer>", 1, true, ""},
		{"<answer>(4 * 6) / (1 * 1)</answer>", 1, true, ""},
		{"<think>try</think><answer>1</answer> then <answer>4*6+1-1</answer>", 1, true, ""},
		{"<answer>4*6+1+1</answer>", 0.1, false, ""},
		{"<answer>4*6</answer>", 0.1, false, "exactly once"},
		{"<answer>4*6*1*1*1</answer>", 0.1, false, "exactly once"},
		{"<answer>44*6/11</answer>", 0.1, false, "exactly once"},
		{"<answer>4*6*1/(1-1)</answer>", 0.1, false, "division by zero"},
		{"<answer>4**6</answer>", 0.1, false, `"**"`},
		{"<answer>4*6*1*1 = 24</answer>", 0.1, false, "unexpected '='"},
		{"<answer>(4*6*1*1</answer>", 0.1, false, "missing )"},
		{"<answer>4.0*6*1*1</answer>", 0.1, false, "decimal"},
		{"<answer></answer>", 0.1, false, "syntax"},
		{"4*6*1*1", 0, false, "no <answer>"},
		{"", 0, false, "no <answer>"},
	}
	for _, tt := range tests {
		res := DefaultCountdown.Grade(task, tt.reply)
		if res.Reward != tt.reward || res.IsCorrect != tt.correct {
			t.Errorf("%q: %+v, want reward %v correct %v", tt.reply, res, tt.reward, tt.correct)
		}
		if reason, _ := res.Metadata["format_error"].(string); !strings.Contains(reason, tt.reason) || (tt.reason == "") != (reason == "") {
			t.Errorf("%q: reason %q, want %q", tt.reply, reason, tt.reason)
		}
	}
	// Exact arithmetic: 1/3*3 is exactly 1, not 0.999...
	frac := episode.Task{"target": 1, "numbers": []any{1, 3, 3}}
	if res := DefaultCountdown.Grade(frac, "<answer>1/3*3</answer>"); !res.IsCorrect {
		t.Errorf("1/3*3: %+v", res)
	}
	// verl layout: ground_truth {target, numbers}; float-typed numbers from JSON.
	verl := episode.Task{"ground_truth": map[string]any{"target": 10.0, "numbers": []any{5.0, 2.0}}}
	if res := DefaultCountdown.Grade(verl, "<answer>5*2</answer>"); !res.IsCorrect {
		t.Errorf("verl layout: %+v", res)
	}
	// Any Go integer type (a parquet column, a caller's row) or a whole float.
	typed := episode.Task{"target": int32(24), "nums": []any{int64(4), int32(6), uint8(1), 1.0}}
	if res := DefaultCountdown.Grade(typed, "<answer>4*6*1*1</answer>"); !res.IsCorrect {
		t.Errorf("typed nums: %+v", res)
	}
	if res := DefaultCountdown.Grade(episode.Task{"target": 24, "nums": []any{4, 6, 1, 1.5}}, "<answer>4*6*1*1</answer>"); res.IsCorrect || res.Reward != 0 {
		t.Errorf("a fractional num: %+v", res)
	}
	if res := DefaultCountdown.Grade(episode.Task{}, "<answer>1</answer>"); res.Reward != 0 || res.Metadata["format_error"] == nil {
		t.Errorf("task without target: %+v", res)
	}
}

// Search/QA expectations follow SQuAD's evaluation script: F1 over
// normalised tokens (lower case, no punctuation, no articles).
func TestQA(t *testing.T) {
	qa := QA{Threshold: 0.3}
	tests := []struct {
		gt      any
		reply   string
		reward  float64
		correct bool
	}{
		{"Paris", "<answer>paris</answer>", 1, true},
		{"The Eiffel Tower", "<answer>eiffel tower!</answer>", 1, true},
		{[]any{"NYC", "New York City"}, `\boxed{new york city}`, 1, true},
		// prediction "new york" vs "new york city": P=1, R=2/3, F1=0.8.
		{"New York City", "<answer>New York</answer>", 0.8, true},
		// "york" vs "new york city": P=1, R=1/3, F1=0.5.
		{"New York City", "<answer>york</answer>", 0.5, true},
		// 1 common token of 5 predicted and 3 reference: P=0.2, R=1/3, F1=0.25 < 0.3.
		{"New York City", "<answer>it is in york I think</answer>", 0, false},
		{"Paris", "<answer>London</answer>", 0, false},
		{"Paris", "<think>Paris?</think>   ", 0, false},
		{"Paris", "Paris", 1, true},
	}
	for _, tt := range tests {
		res := qa.Grade(episode.Task{"ground_truth": tt.gt}, tt.reply)
		if diff := res.Reward - tt.reward; diff > 1e-9 || diff < -1e-9 || res.IsCorrect != tt.correct {
			t.Errorf("%v / %q: %+v, want %v %v", tt.gt, tt.reply, res, tt.reward, tt.correct)
		}
	}
}

func TestArith(t *testing.T) {
	a := Arith{FormatScore: 0.1}
	tests := []struct {
		gt     any
		reply  string
		reward float64
	}{
		{"7", "7", 1}, {"7", " 7\n", 1}, {7, "+07", 1}, {"-3", "-3", 1}, {"0", "-0", 1},
		{"7", "8", 0.1}, {"7", "70", 0.1},
		{"7", "7.", 0}, {"7", "seven", 0}, {"7", "7 7", 0}, {"7", "", 0},
		{"7", "99999999999999999999999", 0}, // too long to be a bare answer here
	}
	for _, tt := range tests {
		res := a.Grade(episode.Task{"ground_truth": tt.gt}, tt.reply)
		if res.Reward != tt.reward || res.IsCorrect != (tt.reward == 1) {
			t.Errorf("%v / %q: %+v, want %v", tt.gt, tt.reply, res, tt.reward)
		}
	}
}

// The close score grades wrong integers by distance: 0.1 + 0.4/(1+|d|).
func TestArithCloseScore(t *testing.T) {
	a := Arith{FormatScore: 0.1, CloseScore: 0.4}
	for _, tt := range []struct {
		gt     any
		reply  string
		reward float64
	}{
		{"7", "7", 1}, {"7", "8", 0.1 + 0.4/2}, {"7", "6", 0.1 + 0.4/2}, {"7", "10", 0.1 + 0.4/4},
		{"-3", "3", 0.1 + 0.4/7}, {12, "2", 0.1 + 0.4/11}, {"7", "x", 0},
		{"7", "999999999999999999", 0.1 + 0.4/(1+999999999999999992)},
	} {
		res := a.Grade(episode.Task{"ground_truth": tt.gt}, tt.reply)
		if math.Abs(res.Reward-tt.reward) > 1e-12 || res.IsCorrect != (tt.reward == 1) {
			t.Errorf("%v / %q: %+v, want %v", tt.gt, tt.reply, res, tt.reward)
		}
	}
}

// TestRegisteredArgs: each reward function gets its configured
// arguments (registerGrader: the tagged fields of its grader).
func TestRegisteredArgs(t *testing.T) {
	tests := []struct {
		name  string
		args  map[string]any
		task  episode.Task
		reply string
		want  Result
	}{
		{"arith", nil, episode.Task{"ground_truth": "7"}, "7", Result{Reward: 1, IsCorrect: true}},
		{"arith", map[string]any{"format_score": 0.25, "close_score": 0}, episode.Task{"ground_truth": "7"}, "3", Result{Reward: 0.25}},
		{"countdown", map[string]any{"score": 2}, episode.Task{"target": 6, "nums": []any{2, 3}}, "<answer>2*3</answer>", Result{Reward: 2, IsCorrect: true}},
		{"countdown", map[string]any{"format_score": 0.5}, episode.Task{"target": 6, "nums": []any{2, 3}}, "<answer>2+3</answer>", Result{Reward: 0.5}},
		{"math", map[string]any{"correct_reward": 3}, episode.Task{"ground_truth": "1"}, `\boxed{1}`, Result{Reward: 3, IsCorrect: true}},
		{"math", map[string]any{"incorrect_reward": -1}, episode.Task{"ground_truth": "1"}, `\boxed{2}`, Result{Reward: -1}},
		{"math", map[string]any{"format_error_reward": -2}, episode.Task{"ground_truth": "1"}, "1", Result{Reward: -2}},
		{"search", nil, episode.Task{"ground_truth": "new york"}, "<answer>new york city</answer>", Result{Reward: 0.8, IsCorrect: true}},
		{"search", map[string]any{"f1_threshold": 0.9}, episode.Task{"ground_truth": "new york"}, "<answer>new york city</answer>", Result{}},
	}
	for _, tt := range tests {
		fn, err := registry.Build(Registry, tt.name, "env.args.reward_args", tt.args)
		if err != nil {
			t.Fatalf("%s %v: %v", tt.name, tt.args, err)
		}
		got := fn(tt.task, tt.reply)
		if math.Abs(got.Reward-tt.want.Reward) > 1e-12 || got.IsCorrect != tt.want.IsCorrect {
			t.Errorf("%s %v %q: %+v, want reward %v correct %v", tt.name, tt.args, tt.reply, got, tt.want.Reward, tt.want.IsCorrect)
		}
	}
}

func TestRegistered(t *testing.T) {
	for _, name := range []string{"math", "countdown", "search", "arith"} {
		fn, err := registry.Build(Registry, name, "env.args.reward_args", nil)
		if err != nil || fn == nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := registry.Build(Registry, "countdown", "env.args.reward_args", map[string]any{"format": 0.2}); err == nil ||
		!strings.Contains(err.Error(), "env.args.reward_args.format: is not an accepted argument; did you mean env.args.reward_args.format_score?") {
		t.Errorf("err %v", err)
	}
}
