package code

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// Options shape generated tasks.
type Options struct {
	// Tests is the number of hidden tests of each task.
	Tests int
}

// DefaultGenerateOptions: five hidden tests a task.
var DefaultGenerateOptions = Options{Tests: 5}

// problem is one family of generated tasks: a statement and a reference
// solution computing the expected outputs in Go.
type problem struct {
	name string
	// stdin problems read Input and print the answer; function problems
	// define fn.
	stdin bool
	fn    string
	text  string
	// gen draws one test: the input (stdin text, or the argument list)
	// and the expected output (text, or the return value).
	gen func(r *rand.Rand) (in any, out any)
}

var problems = []problem{
	{name: "sum", stdin: true, text: "Read two integers a and b (on one line, separated by a space) from standard input and print a + b.",
		gen: func(r *rand.Rand) (any, any) {
			a, b := r.IntN(2001)-1000, r.IntN(2001)-1000
			return fmt.Sprintf("%d %d\n", a, b), strconv.Itoa(a + b)
		}},
	{name: "max", stdin: true, text: "The first line of standard input holds n; the second n integers. Print the largest of them.",
		gen: func(r *rand.Rand) (any, any) {
			n := 1 + r.IntN(8)
			xs, best := make([]string, n), -1<<31
			for i := range xs {
				v := r.IntN(201) - 100
				xs[i], best = strconv.Itoa(v), max(best, v)
			}
			return fmt.Sprintf("%d\n%s\n", n, strings.Join(xs, " ")), strconv.Itoa(best)
		}},
	{name: "reverse", stdin: true, text: "Read one line of lowercase letters from standard input and print it reversed.",
		gen: func(r *rand.Rand) (any, any) {
			b := make([]byte, 1+r.IntN(10))
			for i := range b {
				b[i] = byte('a' + r.IntN(26))
			}
			rev := make([]byte, len(b))
			for i := range b {
				rev[len(b)-1-i] = b[i]
			}
			return string(b) + "\n", string(rev)
		}},
	{name: "sum_even", fn: "sum_even", text: "Write a Python function sum_even(xs) that returns the sum of the even numbers in the list of integers xs.",
		gen: func(r *rand.Rand) (any, any) {
			xs, s := randInts(r, 8, -20, 20), 0
			for _, v := range xs {
				if v%2 == 0 {
					s += v
				}
			}
			return []any{xs}, s
		}},
	{name: "count_vowels", fn: "count_vowels", text: "Write a Python function count_vowels(s) that returns how many of the characters of the lowercase string s are vowels (a, e, i, o, u).",
		gen: func(r *rand.Rand) (any, any) {
			b, n := make([]byte, r.IntN(12)), 0
			for i := range b {
				b[i] = byte('a' + r.IntN(26))
				if strings.IndexByte("aeiou", b[i]) >= 0 {
					n++
				}
			}
			return []any{string(b)}, n
		}},
	{name: "fib", fn: "fib", text: "Write a Python function fib(n) that returns the n-th Fibonacci number, with fib(0) = 0 and fib(1) = 1.",
		gen: func(r *rand.Rand) (any, any) {
			n := r.IntN(40)
			a, b := 0, 1
			for i := 0; i < n; i++ {
				a, b = b, a+b
			}
			return []any{n}, a
		}},
	{name: "sorted_unique", fn: "sorted_unique", text: "Write a Python function sorted_unique(xs) that returns the distinct values of the list of integers xs in increasing order, as a list.",
		gen: func(r *rand.Rand) (any, any) {
			xs := randInts(r, 8, 0, 9)
			seen := map[int]bool{}
			var out []int
			for v := 0; v <= 9; v++ {
				for _, x := range xs {
					if x == v && !seen[v] {
						seen[v] = true
						out = append(out, v)
					}
				}
			}
			if out == nil {
				out = []int{}
			}
			return []any{xs}, out
		}},
}

func randInts(r *rand.Rand, maxLen, lo, hi int) []int {
	xs := make([]int, r.IntN(maxLen+1))
	for i := range xs {
		xs[i] = lo + r.IntN(hi-lo+1)
	}
	return xs
}

// Generate returns n small programming tasks drawn with seed, each with
// o.Tests hidden tests in rLLM's layouts: stdin tasks as LiveCodeBench
// lists of {input, output, testtype}, function tasks as TACO
// {fn_name, inputs, outputs} with each output wrapped in a list;
// ground_truth is a JSON string, as verl rows carry it.
func Generate(n int, seed uint64, o Options) ([]episode.Task, error) {
	if o.Tests < 1 || o.Tests > 1000 {
		return nil, fmt.Errorf("tests per task is %d; use 1 to 1000", o.Tests)
	}
	rng := rand.New(rand.NewPCG(seed, 0x636f6465)) // "code": a stream of our own
	out := make([]episode.Task, 0, n)
	for i := 0; i < n; i++ {
		p := problems[rng.IntN(len(problems))]
		var gt any
		if p.stdin {
			tests := make([]map[string]any, o.Tests)
			for j := range tests {
				in, want := p.gen(rng)
				tests[j] = map[string]any{"input": in, "output": want.(string) + "\n", "testtype": "stdin"}
			}
			gt = tests
		} else {
			ins, outs := make([]any, o.Tests), make([]any, o.Tests)
			for j := range ins {
				in, want := p.gen(rng)
				ins[j], outs[j] = in, []any{want}
			}
			gt = map[string]any{"fn_name": p.fn, "inputs": ins, "outputs": outs}
		}
		b, err := json.Marshal(gt)
		if err != nil {
			return nil, err
		}
		out = append(out, episode.Task{
			"id":           "code-" + strconv.Itoa(i),
			"question":     p.text,
			"ground_truth": string(b),
			"data_source":  "code_" + p.name,
		})
	}
	return out, nil
}
