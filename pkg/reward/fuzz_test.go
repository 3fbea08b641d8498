package reward

import (
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func FuzzMath(f *testing.F) {
	for _, s := range []string{`\boxed{\frac{1}{2}}`, `\boxed{`, `\boxed{{{}`, `</think>\boxed 3`, `\boxed{1,000.00\%}`, `\boxed{\text{\text{x}}}`} {
		f.Add(s, "1")
	}
	f.Fuzz(func(t *testing.T, reply, truth string) {
		res := DefaultMath.Score(episode.Task{"ground_truth": truth}, reply)
		if res.IsCorrect != (res.Reward == 1) {
			t.Fatalf("inconsistent result %+v", res)
		}
		// A value always equals itself once extracted.
		if b, err := LastBoxed(reply); err == nil && NormalizeMath(b) != "" && !MathEqual(b, b) {
			t.Fatalf("%q is not equal to itself", b)
		}
	})
}

func FuzzCountdown(f *testing.F) {
	for _, s := range []string{"<answer>(1+2)*3</answer>", "<answer>1/(2-2)</answer>", "<answer>((((</answer>", "<answer>--1</answer>"} {
		f.Add(s)
	}
	task := episode.Task{"target": 9, "nums": []any{1, 2, 3}}
	f.Fuzz(func(t *testing.T, reply string) {
		res := DefaultCountdown.Grade(task, reply)
		if res.Reward != 0 && res.Reward != 0.1 && res.Reward != 1 {
			t.Fatalf("reward %v", res.Reward)
		}
	})
}

func FuzzQA(f *testing.F) {
	f.Add("<answer>the Paris</answer>", "Paris")
	f.Fuzz(func(t *testing.T, reply, truth string) {
		res := QA{Threshold: 0.3}.Grade(episode.Task{"ground_truth": truth}, reply)
		if res.Reward < 0 || res.Reward > 1 {
			t.Fatalf("reward %v", res.Reward)
		}
	})
}

func FuzzArith(f *testing.F) {
	f.Add("7", "7")
	f.Fuzz(func(t *testing.T, reply, truth string) {
		res := Arith{FormatScore: 0.1}.Grade(episode.Task{"ground_truth": truth}, reply)
		if res.IsCorrect != (res.Reward == 1) {
			t.Fatalf("inconsistent %+v", res)
		}
	})
}
