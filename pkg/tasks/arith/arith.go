// Package arith is the tiny default task of `rllm train`: single-digit
// arithmetic such as "3+4=" answered by a bare integer. Prompts are short
// and carry no instructions so a character-level policy trained from
// scratch by RL alone can learn it on a CPU.
package arith

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
	agent.RegisterPrompt("arith", `sends the bare question ("3+4="), nothing else`, agent.PromptParams{})
	env.RegisterScored("arith", "arith", "single turn: 1 for the exact integer, format_score for a wrong bare integer")
}

// Options shape the generated problems.
type Options struct {
	Min, Max  int    // operand range, inclusive
	Operators string // any of "+-*/"
	// Negative allows a-b < 0; otherwise operands of - are ordered.
	Negative bool
}

// DefaultOptions: single digits, addition and subtraction, no negative
// answers.
var DefaultOptions = Options{Min: 0, Max: 9, Operators: "+-"}

// Generate returns n problems drawn with seed. Division problems are
// exact (a = b·q) so every answer is an integer.
func Generate(n int, seed uint64, o Options) ([]episode.Task, error) {
	if o.Min > o.Max || o.Min < -1000000 || o.Max > 1000000 {
		return nil, fmt.Errorf("operand range [%d, %d] is empty or too wide; use min ≤ max within ±1e6", o.Min, o.Max)
	}
	if o.Operators == "" || strings.Trim(o.Operators, "+-*/") != "" {
		return nil, fmt.Errorf("operators %q: use one or more of + - * /", o.Operators)
	}
	if strings.Contains(o.Operators, "/") && o.Max < 1 {
		return nil, fmt.Errorf("division needs a positive divisor; raise max above 0")
	}
	rng := rand.New(rand.NewPCG(seed, 0x61726974)) // "arit": a stream of our own
	pick := func() int { return o.Min + rng.IntN(o.Max-o.Min+1) }
	out := make([]episode.Task, 0, n)
	for i := 0; i < n; i++ {
		op := o.Operators[rng.IntN(len(o.Operators))]
		a, b := pick(), pick()
		var ans int
		switch op {
		case '+':
			ans = a + b
		case '-':
			if !o.Negative && a < b {
				a, b = b, a
			}
			ans = a - b
		case '*':
			ans = a * b
		case '/':
			for b == 0 {
				b = max(1, pick())
			}
			ans = a // the quotient is drawn, the dividend built from it
			a = ans * b
		}
		out = append(out, episode.Task{
			"id":           "arith-" + strconv.Itoa(i),
			"question":     fmt.Sprintf("%d%c%d=", a, op, b),
			"ground_truth": strconv.Itoa(ans),
			"data_source":  "arith",
		})
	}
	return out, nil
}

var reQuestion = regexp.MustCompile(`(-?\d+)\s*[-+*/]\s*(-?\d+)\s*=`)

// FormatExample answers the last question of prompt with a bare integer
// read from the question or of its size, never computed from it: half the
// time one of its operands, otherwise a random integer from 0 to twice the
// larger operand (so replies of one and two digits both occur, as answers
// do). A model fitted to these replies knows the format and where the
// numbers are; which number is right is left to RL. Without a question it
// answers a random digit.
func FormatExample(prompt string, rng *rand.Rand) string {
	m := reQuestion.FindAllStringSubmatch(prompt, -1)
	if len(m) == 0 {
		return strconv.Itoa(rng.IntN(10))
	}
	a, b := m[len(m)-1][1], m[len(m)-1][2]
	if rng.IntN(2) == 0 {
		return []string{a, b}[rng.IntN(2)]
	}
	x, _ := strconv.Atoi(strings.TrimPrefix(a, "-"))
	y, _ := strconv.Atoi(strings.TrimPrefix(b, "-"))
	return strconv.Itoa(rng.IntN(2*min(max(x, y), 1000000) + 1))
}
