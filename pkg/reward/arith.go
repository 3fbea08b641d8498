package reward

import (
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func init() {
	registerGrader("arith", "the reply is exactly the integer answer (1), a wrong bare integer (format_score, plus close_score/(1+|error|)) or anything else (0)", Arith.Grade)
}

// Arith scores the tiny arithmetic task: the whole reply, trimmed, must
// be an integer. The format score rewards a tiny policy for learning to
// answer with a number at all before it learns the right one; the close
// score grades wrong numbers by their distance to the answer, so that a
// group of episodes that all missed still says which misses were nearer
// (with exact-or-nothing rewards such groups carry no signal, and a small
// policy that starts at chance rarely gets anything else).
type Arith struct {
	FormatScore float64 `arg:"format_score" default:"0.1" doc:"reward of a bare integer that is wrong"`
	CloseScore  float64 `arg:"close_score" default:"0.4" doc:"extra reward of a wrong integer, divided by 1+|its distance to the answer| (0 turns it off)"`
}

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
	r := a.FormatScore
	if a.CloseScore != 0 && len(want) > 0 {
		g, err1 := strconv.ParseInt(canonicalInt(got), 10, 64)
		w, err2 := strconv.ParseInt(canonicalInt(strings.TrimSpace(want[0])), 10, 64)
		if err1 == nil && err2 == nil {
			d := math.Abs(float64(g) - float64(w))
			r += a.CloseScore / (1 + d)
			meta["distance"] = d
		}
	}
	return Result{Reward: r, Metadata: meta}
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
