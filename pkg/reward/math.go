package reward

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func init() {
	registerGrader("math", `last \boxed{} after </think> equals the ground truth after LaTeX normalisation`, MathGrader.Score)
}

// MathGrader scores math answers the way rLLM's math reward does: the
// reply's text after </think>, its last \boxed{...}, compared with the
// task's ground truth (a string, a number or a list of acceptable
// answers) after normalisation.
type MathGrader struct {
	Correct     float64 `arg:"correct_reward" default:"1" doc:"reward of a correct answer"`
	Incorrect   float64 `arg:"incorrect_reward" default:"0" doc:"reward of a wrong answer"`
	FormatError float64 `arg:"format_error_reward" default:"0" doc:"reward of a reply with no readable \\boxed{} answer"`
}

// DefaultMath is the grader with rLLM's default rewards (1, 0, 0).
var DefaultMath = MathGrader{Correct: 1}

// Score implements Func.
func (g MathGrader) Score(task episode.Task, response string) Result {
	gt, ok := GroundTruth(task)
	if !ok {
		return failed(g.FormatError, "task has no ground_truth or answer")
	}
	answer, err := LastBoxed(AfterThinking(response))
	if err != nil {
		return failed(g.FormatError, err.Error())
	}
	meta := map[string]any{"extracted_answer": answer}
	for _, want := range truths(gt) {
		if MathEqual(answer, want) {
			return Result{Reward: g.Correct, IsCorrect: true, Metadata: meta}
		}
	}
	return Result{Reward: g.Incorrect, Metadata: meta}
}

// truths lists the acceptable answers of a ground truth value. A string
// ground truth that itself contains \boxed{} is reduced to its content.
func truths(gt any) []string {
	switch v := gt.(type) {
	case string:
		if b, err := LastBoxed(v); err == nil {
			return []string{b}
		}
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, truths(x)...)
		}
		return out
	case []string:
		return v
	case float64:
		return []string{strconv.FormatFloat(v, 'f', -1, 64)}
	case float32:
		return []string{strconv.FormatFloat(float64(v), 'f', -1, 32)}
	case int, int64, int32, uint, uint64, uint32:
		return []string{fmt.Sprint(v)}
	case nil:
		return nil
	}
	return []string{fmt.Sprint(gt)}
}

// MathEqual reports whether answer and truth denote the same value: equal
// after NormalizeMath, or equal as exact rational numbers (0.5,
// \frac{1}{2} and 1/2 are one value). Percent signs are stripped, not
// scaled: "50\%" equals "50", not "0.5".
func MathEqual(answer, truth string) bool {
	a, t := NormalizeMath(answer), NormalizeMath(truth)
	if a == "" || t == "" {
		return false
	}
	if a == t {
		return true
	}
	ra, ok1 := parseNumber(a)
	rt, ok2 := parseNumber(t)
	return ok1 && ok2 && ra.Cmp(rt) == 0
}

var (
	reTextCmd      = regexp.MustCompile(`\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}`)
	reThousands    = regexp.MustCompile(`^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$`)
	reTrailingZero = regexp.MustCompile(`^([-+]?\d+)\.0+$`)
	reDecimalZeros = regexp.MustCompile(`^([-+]?\d+\.\d*?[1-9])0+$`)
	reNumberUnit   = regexp.MustCompile(`^([-+]?\d[\d,]*(?:\.\d+)?)\s+(?:[a-zA-Z]+(?:\^\{?\d\}?)?)(?:\s+[a-zA-Z]+)*$`)
	reSlashFrac    = regexp.MustCompile(`^(-?)(\d+)/(\d+)$`)
	reSqrtBare     = regexp.MustCompile(`\\sqrt(\w)`)
	reFracBare2    = regexp.MustCompile(`\\frac(\d)(\d)`)
	reFracBare1    = regexp.MustCompile(`\\frac(\d)\{`)
	reFracBareDen  = regexp.MustCompile(`\\frac\{([^{}]*)\}(\d)`)
	reFracNum      = regexp.MustCompile(`^(-?)\\frac\{(-?\d+(?:\.\d+)?)\}\{(-?\d+(?:\.\d+)?)\}$`)
	reChoice       = regexp.MustCompile(`^\(?([A-Ea-e])\)?$`)
	rePlainNumber  = regexp.MustCompile(`^[-+]?\d+(?:\.\d+)?$`)
)

// NormalizeMath brings a LaTeX answer to a canonical string, following the
// Hendrycks MATH normaliser (strip_string) with a few additions users of
// rLLM's grader rely on: \text{} unwrapped, units after a number dropped,
// thousands separators removed, trailing zeros of decimals removed.
func NormalizeMath(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 4096 {
		// No real answer is this long; don't spend time on it.
		return s
	}
	r := strings.NewReplacer(
		"\n", "", "\\!", "", "\\,", "", "\\;", "", "\\:", "", "\\ ", " ", "{,}", ",",
		"\\\\", "\\", "tfrac", "frac", "dfrac", "frac", "\\left", "", "\\right", "",
		"\\displaystyle", "", "^{\\circ}", "", "^\\circ", "", "°", "",
		"\\$", "", "$", "", "\\%", "", "%", "", "\\cdot", "*", "\\times", "*",
	)
	s = r.Replace(s)
	// \text{ cm} → " cm" so the unit can be dropped below.
	for i := 0; i < 4 && strings.Contains(s, "{"); i++ {
		n := reTextCmd.ReplaceAllString(s, " $1")
		if n == s {
			break
		}
		s = n
	}
	s = strings.TrimSpace(s)
	if m := reNumberUnit.FindStringSubmatch(s); m != nil {
		s = m[1]
	}
	if strings.HasSuffix(s, ".") && rePlainNumber.MatchString(strings.TrimSuffix(s, ".")) {
		s = strings.TrimSuffix(s, ".") // "5." at the end of a sentence
	}
	s = strings.ReplaceAll(s, " .", " 0.")
	s = strings.ReplaceAll(s, "{.", "{0.")
	if strings.HasPrefix(s, ".") {
		s = "0" + s
	}
	// "x = 5" or "k=5": keep the value when the left side is a short name.
	if parts := strings.Split(s, "="); len(parts) == 2 && len(strings.TrimSpace(parts[0])) <= 2 {
		s = strings.TrimSpace(parts[1])
	}
	s = reSqrtBare.ReplaceAllString(s, `\sqrt{$1}`)
	s = strings.ReplaceAll(s, " ", "")
	s = reFracBare2.ReplaceAllString(s, `\frac{$1}{$2}`)
	s = reFracBare1.ReplaceAllString(s, `\frac{$1}{`)
	s = reFracBareDen.ReplaceAllString(s, `\frac{$1}{$2}`)
	if reThousands.MatchString(s) {
		s = strings.ReplaceAll(s, ",", "")
	}
	if m := reTrailingZero.FindStringSubmatch(s); m != nil {
		s = m[1]
	} else if m := reDecimalZeros.FindStringSubmatch(s); m != nil {
		s = m[1]
	}
	if m := reSlashFrac.FindStringSubmatch(s); m != nil {
		s = m[1] + `\frac{` + m[2] + "}{" + m[3] + "}"
	}
	if m := reChoice.FindStringSubmatch(s); m != nil {
		s = strings.ToUpper(m[1])
	}
	s = strings.TrimPrefix(s, "+")
	return s
}

// parseNumber reads a normalised answer as an exact rational: integers,
// decimals and \frac{a}{b} with numeric parts. Exponents are refused, so
// "1e999999999" cannot make us build a gigantic number.
func parseNumber(s string) (*big.Rat, bool) {
	if len(s) > 400 {
		return nil, false
	}
	if rePlainNumber.MatchString(s) {
		r, ok := new(big.Rat).SetString(s)
		return r, ok
	}
	if m := reFracNum.FindStringSubmatch(s); m != nil {
		num, ok1 := new(big.Rat).SetString(m[2])
		den, ok2 := new(big.Rat).SetString(m[3])
		if !ok1 || !ok2 || den.Sign() == 0 {
			return nil, false
		}
		q := num.Quo(num, den)
		if m[1] == "-" {
			q.Neg(q)
		}
		return q, true
	}
	return nil, false
}
