package reward

import (
	"regexp"
	"strings"
	"unicode"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func init() {
	registerGrader("search", "QA answer: exact match after SQuAD normalisation, else token F1 (correct at F1 ≥ threshold)", QA.Grade)
}

// QA scores short answers against one or more references: exact match
// (after SQuAD normalisation) earns 1; otherwise the best token F1 is the
// reward and counts as correct from Threshold on.
type QA struct {
	Threshold float64 `arg:"f1_threshold" default:"0.3" doc:"token F1 from which an answer counts as correct"`
}

var reArticles = regexp.MustCompile(`\b(a|an|the)\b`)

// NormalizeAnswer is SQuAD's normalize_answer: lower case, punctuation
// removed, articles removed, whitespace collapsed.
func NormalizeAnswer(s string) string {
	s = strings.ToLower(s)
	s = strings.Map(func(r rune) rune {
		if r < 128 && unicode.IsPunct(r) || r == '$' || r == '+' || r == '<' || r == '=' || r == '>' || r == '^' || r == '`' || r == '|' || r == '~' {
			return -1
		}
		return r
	}, s)
	s = reArticles.ReplaceAllString(s, " ")
	return strings.Join(strings.Fields(s), " ")
}

// TokenF1 is SQuAD's F1 between the normalised token bags.
func TokenF1(prediction, reference string) float64 {
	p := strings.Fields(NormalizeAnswer(prediction))
	r := strings.Fields(NormalizeAnswer(reference))
	if len(p) == 0 || len(r) == 0 {
		return 0
	}
	counts := make(map[string]int, len(r))
	for _, t := range r {
		counts[t]++
	}
	common := 0
	for _, t := range p {
		if counts[t] > 0 {
			counts[t]--
			common++
		}
	}
	if common == 0 {
		return 0
	}
	precision := float64(common) / float64(len(p))
	recall := float64(common) / float64(len(r))
	return 2 * precision * recall / (precision + recall)
}

// ExtractAnswer takes the answer out of a reply: the last
// <answer>...</answer>, else the last \boxed{...}, else the text after
// </think>.
func ExtractAnswer(reply string) string {
	reply = AfterThinking(reply)
	if m := reAnswerMultiline.FindAllStringSubmatch(reply, -1); len(m) > 0 {
		return strings.TrimSpace(m[len(m)-1][1])
	}
	if b, err := LastBoxed(reply); err == nil {
		return b
	}
	return strings.TrimSpace(reply)
}

var reAnswerMultiline = regexp.MustCompile(`(?s)<answer>(.*?)</answer>`)

// Grade implements Func.
func (q QA) Grade(task episode.Task, response string) Result {
	gt, ok := GroundTruth(task)
	if !ok {
		return failed(0, "task has no ground_truth or answer")
	}
	answer := ExtractAnswer(response)
	if answer == "" {
		return failed(0, "empty answer")
	}
	best := 0.0
	for _, ref := range truths(gt) {
		if NormalizeAnswer(answer) == NormalizeAnswer(ref) && NormalizeAnswer(ref) != "" {
			return Result{Reward: 1, IsCorrect: true, Metadata: map[string]any{"extracted_answer": answer, "exact_match": true, "f1": 1.0}}
		}
		best = max(best, TokenF1(answer, ref))
	}
	meta := map[string]any{"extracted_answer": answer, "exact_match": false, "f1": best}
	if best >= q.Threshold {
		return Result{Reward: best, IsCorrect: true, Metadata: meta}
	}
	return Result{Reward: 0, Metadata: meta}
}
