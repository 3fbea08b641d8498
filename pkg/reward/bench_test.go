package reward

import (
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// A typical reasoning-model reply: thinking, then a boxed fraction.
const benchMathReply = `<think>We need x such that 2x + 3 = 4, so 2x = 1 and x = 1/2.
Let me double-check: 2 * 0.5 + 3 = 4. Yes.</think>
The solution of the equation is $x = \boxed{\dfrac{1}{2}}$.`

func BenchmarkMathGrader(b *testing.B) {
	task := episode.Task{"ground_truth": "0.5"}
	b.ReportAllocs()
	for b.Loop() {
		if !DefaultMath.Score(task, benchMathReply).IsCorrect {
			b.Fatal("not graded correct")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "replies/s")
}

func BenchmarkCountdownChecker(b *testing.B) {
	task := episode.Task{"target": 24, "nums": []any{8, 3, 8, 3}}
	reply := "<think>8/(3-8/3) = 8/(1/3) = 24</think>\n<answer>8 / (3 - 8 / 3)</answer>"
	b.ReportAllocs()
	for b.Loop() {
		if !DefaultCountdown.Grade(task, reply).IsCorrect {
			b.Fatal("not graded correct")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "replies/s")
}
