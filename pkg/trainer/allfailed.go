package trainer

import (
	"fmt"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// allFailed returns why a step cannot train when every one of its
// episodes ended in error or timeout (after workflow.retry_limit tries):
// the first such episode's error (an agent program's names its last
// stderr line) and, when none got a reply, the keys that change it. The
// next step would fail the same way, so the run stops there instead of
// going on, silently, with nothing to learn from. nil when any episode
// ended otherwise.
func allFailed(eps []*episode.Episode) error {
	var endings rollout.FirstTurnEndings
	first := ""
	for _, ep := range eps {
		if ep.TerminationReason != episode.TerminationError && ep.TerminationReason != episode.TerminationTimeout {
			return nil
		}
		endings.Add(ep)
		if first == "" && ep.Error != "" {
			first = ep.ID + ": " + ep.Error
		}
	}
	if len(eps) == 0 {
		return nil
	}
	if f, ok := endings.Dominant(); ok && f.Episodes == len(eps) {
		return fmt.Errorf("every episode failed: %s", f)
	}
	return fmt.Errorf("every one of the %d episodes ended in error or timeout; the first: %s", len(eps), first)
}
