package reward

import (
	"fmt"
	"math/big"
	"regexp"
	"sort"

	"github.com/rllm-org/rllm-go/internal/anyval"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/expr"
)

func init() {
	registerGrader("countdown", "<answer>expr</answer> uses every given number once and equals the target (exact arithmetic)", Countdown.Grade)
}

// Countdown scores countdown answers as verl's (and rLLM's) countdown
// reward does: no <answer> tag → 0; an answer that does not use exactly
// the given numbers, does not evaluate (syntax, division by zero) or
// misses the target → FormatScore; a correct equation → Score.
type Countdown struct {
	Score       float64 `arg:"score" default:"1" doc:"reward of a correct equation"`
	FormatScore float64 `arg:"format_score" default:"0.1" doc:"reward of an answer that is present but wrong, invalid or uses the wrong numbers"`
}

// DefaultCountdown has verl's scores: 1.0 and format score 0.1.
var DefaultCountdown = Countdown{Score: 1, FormatScore: 0.1}

var reAnswer = regexp.MustCompile(`<answer>(.*?)</answer>`)

// Grade implements Func.
func (c Countdown) Grade(task episode.Task, response string) Result {
	target, nums, err := countdownTask(task)
	if err != nil {
		return failed(0, err.Error())
	}
	matches := reAnswer.FindAllStringSubmatch(response, -1)
	if len(matches) == 0 {
		return failed(0, "no <answer>...</answer> in the reply")
	}
	equation := matches[len(matches)-1][1]
	meta := map[string]any{"equation": equation}
	fail := func(reason string) Result {
		meta["format_error"] = reason
		return Result{Reward: c.FormatScore, Metadata: meta}
	}
	res, err := expr.Eval(equation)
	if err != nil {
		return fail(err.Error())
	}
	if !sameNumbers(res.Numbers, nums) {
		return fail(fmt.Sprintf("the equation must use each of %v exactly once", nums))
	}
	meta["result"] = res.Value.RatString()
	if res.Value.Cmp(new(big.Rat).SetInt64(target)) != 0 {
		return Result{Reward: c.FormatScore, Metadata: meta}
	}
	return Result{Reward: c.Score, IsCorrect: true, Metadata: meta}
}

// countdownTask reads target and numbers from a row: top-level target and
// nums (or numbers), or a ground_truth map holding them (verl's layout).
func countdownTask(task episode.Task) (int64, []int64, error) {
	row := map[string]any(task)
	if gt, ok := task["ground_truth"].(map[string]any); ok {
		row = gt
	}
	t, ok := asInt(row["target"])
	if !ok {
		return 0, nil, fmt.Errorf("task has no integer target")
	}
	raw := row["nums"]
	if raw == nil {
		raw = row["numbers"]
	}
	var nums []int64
	switch l := raw.(type) {
	case []any:
		for _, x := range l {
			n, ok := asInt(x)
			if !ok {
				return 0, nil, fmt.Errorf("task nums holds %v, not an integer", x)
			}
			nums = append(nums, n)
		}
	case []int64:
		nums = l
	case []int:
		for _, n := range l {
			nums = append(nums, int64(n))
		}
	default:
		return 0, nil, fmt.Errorf("task has no nums list")
	}
	return t, nums, nil
}

// asInt reads one of a task's nums: a Go integer (parquet, a caller's
// row) or a whole float64 (JSON).
func asInt(v any) (int64, bool) {
	if x, ok := v.(float64); ok && x == float64(int64(x)) {
		return int64(x), true
	}
	return anyval.Int64(v)
}

func sameNumbers(used []*big.Int, given []int64) bool {
	if len(used) != len(given) {
		return false
	}
	u := make([]int64, len(used))
	for i, n := range used {
		if !n.IsInt64() {
			return false
		}
		u[i] = n.Int64()
	}
	g := append([]int64(nil), given...)
	sort.Slice(u, func(i, j int) bool { return u[i] < u[j] })
	sort.Slice(g, func(i, j int) bool { return g[i] < g[j] })
	for i := range u {
		if u[i] != g[i] {
			return false
		}
	}
	return true
}

// CheckCountdownTask reports why task is not a countdown task the
// Countdown reward can score (no integer target, no nums list), or nil.
func CheckCountdownTask(task episode.Task) error {
	_, _, err := countdownTask(task)
	return err
}
