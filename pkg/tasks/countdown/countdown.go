// Package countdown is the Countdown numbers game of TinyZero and rLLM:
// combine the given numbers with + - * / (each exactly once) to reach the
// target, answering in <answer></answer>.
package countdown

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/agent"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

func init() {
	agent.RegisterPrompt("countdown", "asks the countdown question (the row's question, built by the generator)", agent.PromptParams{})
	env.RegisterScored("countdown", "countdown", "single turn: 1.0 for a correct <answer> equation, 0.1 for a wrong one, 0 without answer")
}

// Prompt is TinyZero's countdown prompt, in our words: Question followed
// by Instructions.
func Prompt(nums []int, target int) string {
	return Question(nums, target) + " " + Instructions
}

// Question states the puzzle alone.
func Question(nums []int, target int) string {
	s := make([]string, len(nums))
	for i, n := range nums {
		s[i] = strconv.Itoa(n)
	}
	return fmt.Sprintf("Using the numbers [%s], create an equation that equals %d.", strings.Join(s, ", "), target)
}

// Instructions give the rules and the answer format.
const Instructions = "You can use + - * / and parentheses, and each number must be used exactly once. " +
	"Think in <think> </think> tags, then give the equation in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>."

// Options shape generated puzzles.
type Options struct {
	MinNumbers, MaxNumbers int // how many numbers a puzzle has
	MaxNumber              int // numbers are drawn from 1..MaxNumber
	MaxTarget              int // targets are 1..MaxTarget
	// NoInstructions writes the bare Question, without the rules and the
	// answer format: for a model that learns the format elsewhere (the
	// embedded policy's warm-up) and reads a 60-token prompt more easily
	// than a 300-token one.
	NoInstructions bool
}

// DefaultOptions follow the Countdown-Tasks-3to4 data TinyZero trains on:
// 3 or 4 numbers up to 99, targets up to 100.
var DefaultOptions = Options{MinNumbers: 3, MaxNumbers: 4, MaxNumber: 99, MaxTarget: 100}

// Generate returns n solvable puzzles drawn with seed: the numbers are
// combined by a random expression whose exact integer value becomes the
// target, so a solution always exists. The row keeps that solution.
func Generate(n int, seed uint64, o Options) ([]episode.Task, error) {
	if o.MinNumbers < 2 || o.MaxNumbers < o.MinNumbers || o.MaxNumbers > 8 || o.MaxNumber < 1 || o.MaxTarget < 1 {
		return nil, fmt.Errorf("countdown options %+v: need 2 ≤ min numbers ≤ max numbers ≤ 8 and positive maxima", o)
	}
	rng := rand.New(rand.NewPCG(seed, 0x636f756e)) // "coun"
	out := make([]episode.Task, 0, n)
	for attempts := 0; len(out) < n; attempts++ {
		if attempts > 1000*(n+1) {
			return nil, fmt.Errorf("countdown options %+v yield almost no solvable puzzles; raise max target or max number", o)
		}
		k := o.MinNumbers + rng.IntN(o.MaxNumbers-o.MinNumbers+1)
		nums := make([]int, k)
		for i := range nums {
			nums[i] = 1 + rng.IntN(o.MaxNumber)
		}
		target, solution, ok := combine(rng, nums)
		if !ok || target < 1 || target > o.MaxTarget {
			continue
		}
		numsAny := make([]any, k)
		for i, v := range nums {
			numsAny[i] = v
		}
		out = append(out, episode.Task{
			"id":          "countdown-" + strconv.Itoa(len(out)),
			"question":    question(nums, target, o),
			"target":      target,
			"nums":        numsAny,
			"solution":    solution,
			"data_source": "countdown",
		})
	}
	return out, nil
}

func question(nums []int, target int, o Options) string {
	if o.NoInstructions {
		return Question(nums, target)
	}
	return Prompt(nums, target)
}

// combine folds the numbers, in a random order, with random operators
// whose intermediate results stay non-negative integers.
func combine(rng *rand.Rand, nums []int) (int, string, bool) {
	order := rng.Perm(len(nums))
	val, text := nums[order[0]], strconv.Itoa(nums[order[0]])
	for _, idx := range order[1:] {
		x := nums[idx]
		switch rng.IntN(4) {
		case 0:
			val, text = val+x, fmt.Sprintf("(%s + %d)", text, x)
		case 1:
			if val < x {
				return 0, "", false
			}
			val, text = val-x, fmt.Sprintf("(%s - %d)", text, x)
		case 2:
			if val*x > 1_000_000 {
				return 0, "", false
			}
			val, text = val*x, fmt.Sprintf("(%s * %d)", text, x)
		default:
			if val%x != 0 {
				return 0, "", false
			}
			val, text = val/x, fmt.Sprintf("(%s / %d)", text, x)
		}
	}
	return val, strings.TrimSuffix(strings.TrimPrefix(text, "("), ")"), true
}

var reNumbers = regexp.MustCompile(`numbers \[([0-9, ]+)\]`)

// FormatExample answers the last puzzle of prompt with the given numbers,
// each once, in a random order joined by random operators, inside
// <answer></answer>: a well-formed equation that is rarely the solution.
// A model fitted to these replies knows the format and copies the
// numbers; reaching the target is left to RL.
func FormatExample(prompt string, rng *rand.Rand) string {
	var nums []string
	if m := reNumbers.FindAllStringSubmatch(prompt, -1); len(m) > 0 {
		for _, f := range strings.Split(m[len(m)-1][1], ",") {
			if f = strings.TrimSpace(f); f != "" {
				nums = append(nums, f)
			}
		}
	}
	if len(nums) == 0 {
		nums = []string{strconv.Itoa(1 + rng.IntN(99)), strconv.Itoa(1 + rng.IntN(99))}
	}
	rng.Shuffle(len(nums), func(i, j int) { nums[i], nums[j] = nums[j], nums[i] })
	expr := nums[0]
	for i, n := range nums[1:] {
		op := string("+-*/"[rng.IntN(4)])
		if i > 0 && rng.IntN(2) == 0 {
			expr = "(" + expr + ")"
		}
		expr += " " + op + " " + n
	}
	return "<answer> " + expr + " </answer>"
}
