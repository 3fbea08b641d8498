package reward

import (
	"regexp"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
)

func init() {
	Register(Definition{
		Name:        "arith",
		Description: "the reply is exactly the integer answer (1), a wrong bare integer (format_score) or anything else (0)",
		Args: []registry.Arg{
			{Name: "format_score", Type: "float", Default: 0.1, Doc: "reward of a bare integer that is wrong"},
		},
		New: func(v registry.Values) (Func, error) {
			return Arith{FormatScore: v.Float("format_score")}.Grade, nil
		},
	})
}

// Arith scores the tiny arithmetic task: the whole reply, trimmed, must
// be an integer. The format score rewards a tiny policy for learning to
// answer with a number at all before it learns the right one.
type Arith struct{ FormatScore float64 }

var reBareInt = regexp.MustCompile(`^[-+]?\d{1,18}$`)

// Grade implements Func.
func (a Arith) Grade(task episode.Task, response string) Result {
	gt, ok := GroundTruth(task)
	if !ok {
		return failed(0, "task has no ground_truth")
	}
	got := strings.TrimSpace(response)
	if !reBareInt.MatchString(got) {
		return failed(0, "reply is not a bare integer")
	}
	want := truths(gt)
	meta := map[string]any{"extracted_answer": got}
	if len(want) > 0 && canonicalInt(got) == canonicalInt(strings.TrimSpace(want[0])) {
		return Result{Reward: 1, IsCorrect: true, Metadata: meta}
	}
	return Result{Reward: a.FormatScore, Metadata: meta}
}

// canonicalInt drops a plus sign and leading zeros so "+07" equals "7".
func canonicalInt(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimLeft(strings.TrimLeft(s, "+-"), "0")
	if s == "" {
		return "0"
	}
	if neg {
		return "-" + s
	}
	return s
}
